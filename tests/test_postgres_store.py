"""The PostgreSQL backend against a real server (REWIND_TEST_PG_URL, from scripts/pg.sh).

The same pipeline run, forked, diffed and listed on SQLite and on PostgreSQL must give the same
trajectories and the same hashes; a fresh handle reads everything back; the backend's own
mechanics (BYTEA, ON CONFLICT, LIKE escapes, nested transactions, concurrent schema creation,
connections inherited across fork()) hold.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from burr.core import expr
from burr.core.graph import GraphBuilder

import rewind
from tests.conftest import postgres_base_url as pg_base_url
from rewind import Pipeline, Rewind, action
from rewind.errors import InvalidRequest, NotFound, StoreError







# --- a small pipeline: the offline model, a loop, a side effect --------------------------------
CALLS: list = []


@action(reads=["topic"], writes=["plan"])
def plan(state, model: str = "sim-small", temperature: float = 0.0):
    CALLS.append("plan")
    text = rewind.llm.chat(
        [{"role": "user", "content": f"Plan research on {state['topic']}"}],
        model=model, temperature=temperature,
    )
    return state.update(plan=text)


@action(reads=["plan", "notes"], writes=["notes"])
def research(state):
    CALLS.append("research")
    rewind.record_usage(7, 3)
    notes = list(state["notes"]) + [f"note {len(state['notes']) + 1} on {state['plan'][:20]}"]
    return state.update(notes=notes)


@action(reads=["notes", "topic"], writes=["report"])
def write(state, style: str = "plain"):
    CALLS.append("write")
    rewind.record_usage(11, 13)
    body = {"style": style, "n": len(state["notes"]), "notes": state["notes"],
            "ratio": 0.1 * len(state["notes"]), "tags": ("a", "b")}
    return state.update(report=body)


@action(reads=["report"], writes=["receipt"], determinism="side-effect")
def publish(state):
    CALLS.append("publish")
    return state.update(receipt={"sent": state["report"]["n"]})


GRAPH = (
    GraphBuilder()
    .with_actions(plan=plan, research=research, write=write, publish=publish)
    .with_transitions(
        ("plan", "research"),
        ("research", "research", expr("len(notes) < 3")),
        ("research", "write"),
        ("write", "publish"),
    )
    .build()
)
PIPELINE = Pipeline(name="pgparity", graph=GRAPH, entrypoint="plan")
START = {"topic": "urban heat islands", "notes": []}


def trajectory(run) -> list:
    return [(s.node, s.occurrence, s.status, s.input_hash, s.output_hash, s.tokens) for s in run.steps]


def scenario(rw: Rewind) -> dict:
    """Run, fork three ways, diff, list: everything comparable across backends."""
    base = rw.run(PIPELINE, START)
    same = rw.fork(base.id, at="research", occurrence=2)
    edited = rw.fork(base.id, at="write", edit={"notes": ["edited 1", "edited 2", "edited 3"]})
    styled = rw.fork(base.id, at="write", params={"style": "bullets"}, allow_side_effects=True)
    refork = rw.fork(styled.id, at="publish")
    d1 = rw.diff(base.id, edited.id)
    d2 = rw.diff(base.id, styled.id)
    return {
        "ids": [base.id, same.id, edited.id, styled.id, refork.id],
        "runs": [base, same, edited, styled, refork],
        "trajectories": [trajectory(r) for r in (base, same, edited, styled, refork)],
        "statuses": [r.status for r in (base, same, edited, styled, refork)],
        "tokens": [(r.total_tokens, r.tokens_saved) for r in (base, same, edited, styled, refork)],
        "outputs": [[s.outputs for s in r.steps] for r in (base, same, edited, styled, refork)],
        "diffs": [
            (d.first_divergence, d.tokens_a, d.tokens_b,
             [(r.node, r.a_hash, r.b_hash, r.identical, r.a_status, r.b_status) for r in d.rows])
            for d in (d1, d2)
        ],
    }


def relabel(value, ids_a: list, ids_b: list):
    """Replace run ids of one backend by the other's, so reasons compare."""
    mapping = dict(zip(ids_a, ids_b))
    if isinstance(value, str):
        for a, b in mapping.items():
            value = value.replace(a, b)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(relabel(v, ids_a, ids_b) for v in value)
    if isinstance(value, dict):
        return {k: relabel(v, ids_a, ids_b) for k, v in value.items()}
    return value


def test_sqlite_and_postgres_give_the_same_trajectories_and_hashes(tmp_path, pg_url):
    CALLS.clear()
    lite = Rewind(str(tmp_path / "parity.db"))
    pg = Rewind(pg_url)
    assert type(pg.store).__name__ == "PostgresStore"
    a = scenario(lite)
    calls_sqlite = list(CALLS)
    CALLS.clear()
    b = scenario(pg)
    calls_pg = list(CALLS)

    assert a["statuses"] == b["statuses"] == ["completed"] * 5
    assert a["trajectories"] == b["trajectories"]
    assert a["tokens"] == b["tokens"]
    assert a["outputs"] == b["outputs"]
    assert a["diffs"] == b["diffs"]
    assert calls_sqlite == calls_pg  # the same nodes really executed on both
    # the scenario means something: a no-edit fork is all cache, an edit re-executes downstream
    base, same, edited, styled, refork = b["runs"]
    assert base.total_tokens > 0 and same.total_tokens == 0
    assert [s.status for s in same.steps] == ["inherited", "inherited", "cached", "cached", "cached", "dry-run"]
    assert [s.output_hash for s in same.steps] == [s.output_hash for s in base.steps]
    assert edited.step("write").status == "executed" and edited.step("publish").status == "dry-run"
    assert styled.step("publish").status == "executed"  # allow_side_effects=True
    assert b["diffs"][0][0] == "write"
    # the reasons match too, once run ids are mapped
    reasons_a = [[s.reason for s in r.steps] for r in a["runs"]]
    reasons_b = [[s.reason for s in r.steps] for r in b["runs"]]
    assert relabel(reasons_a, a["ids"], b["ids"]) == reasons_b
    # Python types survive the round trip through BYTEA blobs (tuple stays a tuple)
    assert base.step("write").outputs["report"]["tags"] == ("a", "b")
    assert isinstance(pg.get_run(base.id).step("write").outputs["report"]["ratio"], float)

    # list_runs: the same filters give the same shapes
    def listing(rw, ids):
        out = []
        for kwargs in ({}, {"pipeline": "pgparity"}, {"status": "completed"},
                       {"parent_id": ids[0]}, {"search": "urban"}, {"search": "heat isl"},
                       {"forks_only": True}, {"limit": 2, "offset": 1}, {"search": "nothing"}):
            runs = rw.list_runs(**kwargs)
            out.append([ids.index(r.id) for r in runs])
        return out

    assert listing(lite, a["ids"]) == listing(pg, b["ids"])
    assert [ids for ids in listing(pg, b["ids"])][3] == [3, 2, 1]  # children of base, newest first
    assert pg.count_runs(parent_id=b["ids"][0]) == 3
    lite.close()

    # a new handle (a new connection) reads everything back, values included
    pg.close()
    again = Rewind(pg_url)
    for run, traj, outs in zip(b["runs"], b["trajectories"], b["outputs"]):
        got = again.get_run(run.id)
        assert trajectory(got) == traj
        assert [s.outputs for s in got.steps] == outs
        assert got.status == "completed" and got.parent_id == run.parent_id
    assert again.lineage(b["ids"][4])["ancestors"][0]["id"] == b["ids"][0]
    stats = again.cache_stats()
    assert stats["entries"] > 0 and stats["blobs"] > 0
    assert again.store.db_size_bytes() > 0
    again.close()


def test_postgres_store_mechanics(pg_url):
    from rewind.store import serde
    from rewind.keys import canonical_hash
    from rewind.store import open_store
    from rewind.store.postgres import PostgresStore

    store = open_store(pg_url)
    assert isinstance(store, PostgresStore)
    # BYTEA comes back as bytes; ON CONFLICT keeps one row per hash
    value = {"text": "naïve ☃ \x00 nul", "n": [1, 2.5]}
    h = canonical_hash(value)
    with store.transaction():
        store.put_blobs({h: serde.encode(value)})
        store.put_blobs({h: serde.encode(value)})
    assert store.get_blobs([h]) == {h: value}
    assert store.query("SELECT COUNT(*) FROM blobs WHERE hash = ?", (h,))[0][0] == 1
    # a literal % in shared SQL is not taken for a placeholder
    assert store.query("SELECT '100%' || ?", ("!",))[0][0] == "100%!"
    # LIKE ... ESCAPE '\': metacharacters match literally
    for i, summary in enumerate(["100% sure", "1000 sure", "a_b", "axb", "back\\slash", "backslash"]):
        store.insert_run({"id": f"r{i}", "pipeline": "p", "status": "completed",
                          "created_at": 1000.0 + i, "summary": summary})
    found = lambda s: sorted(r["summary"] for r in store.list_run_rows(search=s))  # noqa: E731
    assert found("0%") == ["100% sure"]
    assert found("a_b") == ["a_b"]
    assert found("\\") == ["back\\slash"]
    assert found("'; DROP TABLE runs; --") == []
    assert store.count_runs() == 6

    # nested transactions: an inner failure rolls back to its savepoint only
    with store.transaction():
        store.insert_run({"id": "outer", "pipeline": "p", "status": "completed", "created_at": 1.0})
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.insert_run({"id": "inner", "pipeline": "p", "status": "completed", "created_at": 2.0})
                raise RuntimeError("inner fails")
        store.insert_run({"id": "after", "pipeline": "p", "status": "completed", "created_at": 3.0})
    ids = {r["id"] for r in store.list_run_rows(limit=100)}
    assert {"outer", "after"} <= ids and "inner" not in ids
    # an outer failure rolls back everything, and the connection is usable afterwards
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.insert_run({"id": "doomed", "pipeline": "p", "status": "completed", "created_at": 4.0})
            raise RuntimeError("outer fails")
    assert store.get_run_row("doomed") is None
    # a failed statement inside a transaction rolls it back and raises; the store still works
    with pytest.raises(Exception):
        with store.transaction():
            store.insert_run({"id": "dup", "pipeline": "p", "status": "completed", "created_at": 5.0})
            store.insert_run({"id": "dup", "pipeline": "p", "status": "completed", "created_at": 5.0})
    assert store.get_run_row("dup") is None
    assert store.count_runs() == 8
    # reads never leave the connection idle in a transaction
    store.query("SELECT COUNT(*) FROM runs")
    assert store.connection.get_transaction_status() == 0  # TRANSACTION_STATUS_IDLE
    # a lone surrogate is a RewindError, not a driver crash
    with pytest.raises(InvalidRequest):
        store.list_run_rows(search="\ud800")
    store.close()


def test_concurrent_schema_creation_on_a_fresh_database(pg_url, tmp_path):
    """Four processes open the same empty database at the same instant: all succeed, one schema
    (without the advisory lock, CREATE TABLE IF NOT EXISTS races and fails on pg_type)."""
    n = 4
    gate = str(tmp_path / "gate")
    code = textwrap.dedent(f"""
        import os, sys, time
        from rewind.store import open_store
        open(sys.argv[1], "w").close()  # imported: ready
        deadline = time.time() + 60
        while not os.path.exists({gate!r}):
            if time.time() > deadline:
                sys.exit("gate never opened")
            time.sleep(0.002)
        s = open_store({pg_url!r})
        print(s.query("SELECT COUNT(*) FROM schema_version")[0][0])
    """)
    ready = [str(tmp_path / f"ready-{i}") for i in range(n)]
    procs = [subprocess.Popen([sys.executable, "-c", code, r], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in ready]
    try:
        deadline = time.monotonic() + 120
        while not all(os.path.exists(r) for r in ready):  # bounded: all imported, all waiting
            assert all(p.poll() is None for p in procs), "a child exited early"
            assert time.monotonic() < deadline, "the children never got ready"
            time.sleep(0.005)
        open(gate, "w").close()  # released together
        results = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert out.strip() == "1"
    print(f"\n[postgres] {n} processes created the schema at once: 1 schema_version row")


def test_close_in_a_forked_child_leaves_the_parent_connection_alone(pg_url):
    store = rewind.store.open_store(pg_url)
    store.query("SELECT 1")
    pid = os.fork()
    if pid == 0:  # child: its own connection, then close everything it may close
        code = 0
        try:
            store.query("SELECT 1")
            store.close()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert store.query("SELECT 2")[0][0] == 2  # the parent's connection still works
    store.close()


def test_connections_of_finished_threads_are_closed(pg_url):
    """A connection per thread, but not one per thread that ever lived (a dashboard starts a
    thread per page run; the server has a connection limit)."""
    import threading

    store = rewind.store.open_store(pg_url)
    for _ in range(40):
        t = threading.Thread(target=lambda: store.query("SELECT 1"))
        t.start()
        t.join()
    sessions = store.query(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
    )[0][0]
    assert sessions <= 3, sessions
    store.close()


def test_a_connection_the_server_dropped_is_replaced(pg_url):
    import psycopg2

    rw = Rewind(pg_url)
    pid = rw.store.query("SELECT pg_backend_pid()")[0][0]
    admin = psycopg2.connect(pg_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
    admin.close()
    # issue 12: a raw psycopg2 error no longer reaches the caller; the read reconnects
    assert rw.list_runs() == []
    assert rw.store.query("SELECT pg_backend_pid()")[0][0] != pid
    rw.close()


def test_bad_postgres_urls_are_clear_errors(pg_url):
    with pytest.raises(StoreError) as e:
        Rewind("postgresql://postgres:s3cret@127.0.0.1:1/nowhere")
    assert "cannot connect" in str(e.value) and "s3cret" not in str(e.value)
    base = pg_base_url()
    missing = base.rsplit("/", 1)[0] + "/rewind_no_such_db_xyz"
    with pytest.raises(StoreError, match="rewind_no_such_db_xyz"):
        Rewind(missing)
    rw = Rewind(pg_url)
    with pytest.raises(NotFound):
        rw.get_run("nope")
    rw.close()


def test_both_backends_round_trip_value_types(db_url):
    """A value written on either backend reads back with its Python types."""

    @action(reads=["x"], writes=["y"])
    def typed(state):
        import datetime

        return state.update(y={"when": datetime.date(2024, 1, 2), "set": {3, 1}, "t": (1, "a"),
                               "b": b"\x00\xff", "f": 0.1, "big": 2**62, "s": "é\x00"})

    p = Pipeline("types", GraphBuilder().with_actions(typed=typed).with_transitions().build(), "typed")
    rw = Rewind(db_url)
    run = rw.run(p, {"x": 1})
    assert run.status == "completed", run.error
    rw.close()
    got = Rewind(db_url).get_run(run.id).step("typed").outputs["y"]
    import datetime

    assert got == {"when": datetime.date(2024, 1, 2), "set": {1, 3}, "t": (1, "a"),
                   "b": b"\x00\xff", "f": 0.1, "big": 2**62, "s": "é\x00"}
    assert isinstance(got["t"], tuple) and isinstance(got["set"], set)
