"""Adversarial checks of two SQLite features (issue 16): a connection remembering what a fork
reads (`SQLiteStore._remembered`) and the search index taking new runs in batches (schema 7).

Memory: after every write any connection makes (another handle, another thread, another
process, this connection; commits, rollbacks, VACUUM), each remembered read must equal a fresh
read, and forks must equal forks made by a handle with the memory off. Search: after random
inserts, updates, deletes, reused rowids, rollbacks and VACUUM around the batch boundary, every
search must return what a brute-force model of LIKE returns, and FTS5's integrity-check must
pass once the waiting runs are indexed; a v6 database written by the v6 code must migrate with
every run searchable; the index repair the store documents must keep the index consistent.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from burr.core.persistence import SQLitePersister

from rewind import Rewind
from rewind.errors import StoreError
from rewind.store import SCHEMA_VERSION, open_store
from rewind.store.runs import SQLRuns
from rewind.store.sqlite import SEARCH_BATCH, SQLiteStore
from tests import shapes
from tests.test_search_paging import integrity_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
V6_COMMIT = "e9c63e4"  # the last commit with schema version 6
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


# --- helpers ---------------------------------------------------------------------------------
def _fold(s) -> str:
    return (s or "").translate(ASCII_LOWER)


def _like_model(rows: dict, q: str) -> set:
    """What LIKE '%q%' over id, summary, pipeline matches (SQLite folds ASCII letters only)."""
    q = _fold(q.replace("\x00", "\ufffd"))
    return {rid for rid, (s, p) in rows.items() if any(q in _fold(v) for v in (rid, s, p))}


def _searched(rw: Rewind, q: str) -> list:
    got = [r.id for r in rw.list_runs(search=q, limit=10_000)]
    assert len(got) == len(set(got)) == rw.count_runs(search=q), q
    return got


def _paged(rw: Rewind, q: str, size: int = 37) -> list:
    out, after = [], None
    while True:
        page = rw.list_runs(search=q, limit=size, after=after)
        out += [r.id for r in page]
        if len(page) < size:
            return out
        after = page[-1]


def _fresh(path: str) -> str:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


WORDS = ["zebra", "ZEBRA", "Zeb", "okapi", "ok", "a%b", "x_y", "'q'", '"d"', "é", "É", "ß",
         "\u212a", "kelvin", "pip", "\U0001F600", "a\ufffdb", "back\\slash"]
QUERIES = ["zebra", "ZEB", "okapi", "a%b", "%", "_", "x_y", "'q'", '"d"', "é", "É", "ß", "\u212a",
           "kelvin", "-zeb", "ebra 1", "pip", "pi", "e", "\U0001F600", "a\x00b", "a\ufffdb",
           "back\\", "\\", "r1", "no such text", "ok 'q'"]


def _text(rnd: random.Random):
    if rnd.random() < 0.1:
        return None
    return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(0, 3))) + f" {rnd.randint(0, 999)}"


# --- search: random writes around the batch boundary, checked against LIKE -------------------
@pytest.mark.parametrize("seed", [11, 12])
def test_search_equals_like_under_random_writes_around_the_batch(tmp_path, seed):
    rnd = random.Random(seed)
    path = str(tmp_path / "fz.db")
    rw = Rewind(path)
    st = rw.store
    rows: dict = {}
    n, t = 0, 1e6

    def add(k: int) -> None:
        nonlocal n, t
        with st.transaction():
            for _ in range(k):
                n, t = n + 1, t + 1
                rid, s, p = f"r{n}-{rnd.choice(WORDS)}", _text(rnd), rnd.choice(["pipe", "PIPE", "etl"])
                st.insert_run({"id": rid, "pipeline": p, "status": "completed", "created_at": t,
                               "summary": s})
                rows[rid] = (s, p)

    # straight to the edge of the first batch, then around it
    add(SEARCH_BATCH - 2)
    for step in range(160):
        op = rnd.random()
        if op < 0.4:
            add(rnd.choice([1, 1, 1, 2, 3, 40, SEARCH_BATCH + 5]))
        elif op < 0.55 and rows:  # the newest runs: their rowids are given out again
            ids = [r[0] for r in st.query("SELECT id FROM runs ORDER BY rowid DESC LIMIT ?",
                                          (rnd.randint(1, 12),))]
            st.delete_runs(ids)
            for i in ids:
                rows.pop(i)
        elif op < 0.65 and rows:
            ids = rnd.sample(sorted(rows), min(len(rows), rnd.randint(1, 10)))
            st.delete_runs(ids)
            for i in ids:
                rows.pop(i)
        elif op < 0.8 and rows:
            for rid in rnd.sample(sorted(rows), min(len(rows), 4)):
                s = _text(rnd)
                st.update_run(rid, summary=s)
                rows[rid] = (s, rows[rid][1])
        elif op < 0.85:  # a transaction crossing the boundary, rolled back
            with pytest.raises(KeyboardInterrupt):
                with st.transaction():
                    for i in range(rnd.randint(1, SEARCH_BATCH + 3)):
                        st.insert_run({"id": f"rolled-{step}-{i}", "pipeline": "pipe",
                                       "status": "completed", "created_at": 5e6 + i,
                                       "summary": "rolled back zebra"})
                    raise KeyboardInterrupt
        elif op < 0.9:
            st.index_pending_runs()
            integrity_check(path, flush=False)
        elif op < 0.93:
            st.execute("VACUUM")
        if step % 8 == 0:
            for q in QUERIES:
                assert set(_searched(rw, q)) == _like_model(rows, q), (seed, step, q)
    for q in QUERIES:
        want = _like_model(rows, q)
        assert set(_searched(rw, q)) == want, q
        paged = _paged(rw, q)
        assert paged == _searched(rw, q), q  # keyset pages: the same sequence
    other = Rewind(path)  # another connection sees the same
    assert {q: set(_searched(other, q)) for q in QUERIES} == {q: _like_model(rows, q) for q in QUERIES}
    other.close()
    st.index_pending_runs()
    rw.close()
    integrity_check(path, flush=False)


def test_a_reused_rowid_at_and_around_the_mark(tmp_path):
    """Delete the newest runs right at the mark, one below, one above; insert again."""
    path = str(tmp_path / "reuse.db")
    rw = Rewind(path)
    st = rw.store
    rows: dict = {}

    def add(prefix: str, k: int) -> None:
        with st.transaction():
            for i in range(k):
                rid = f"{prefix}{i}"
                st.insert_run({"id": rid, "pipeline": "pipe", "status": "completed",
                               "created_at": time.time(), "summary": f"{prefix} zebra {i}"})
                rows[rid] = (f"{prefix} zebra {i}", "pipe")

    def newest(k: int) -> None:
        ids = [r[0] for r in st.query("SELECT id FROM runs ORDER BY rowid DESC LIMIT ?", (k,))]
        st.delete_runs(ids)
        for i in ids:
            rows.pop(i)

    add("a", SEARCH_BATCH)  # the batch: the mark at SEARCH_BATCH
    assert st.query("SELECT indexed_through FROM runs_search_mark") == [(SEARCH_BATCH,)]
    for k_del, k_add in ((1, 1), (2, 1), (1, 3), (3, SEARCH_BATCH + 1), (SEARCH_BATCH + 2, 2)):
        newest(k_del)
        add(f"n{k_del}x{k_add}-", k_add)
        for q in ("zebra", "n1x", "n3x", "a1", "x1-0"):
            assert set(_searched(rw, q)) == _like_model(rows, q), (k_del, k_add, q)
    st.index_pending_runs()
    rw.close()
    integrity_check(path, flush=False)


def test_a_read_only_store_finds_the_waiting_runs_and_refuses_to_index_them(tmp_path):
    path = str(tmp_path / "ro.db")
    rw = Rewind(path)
    with rw.store.transaction():
        for i in range(SEARCH_BATCH + 10):
            rw.store.insert_run({"id": f"ro{i}", "pipeline": "pipe", "status": "completed",
                                 "created_at": 1e6 + i, "summary": f"zebra {i}"})
    rw.close()
    ro = open_store(path, read_only=True)
    want = {f"ro{i}" for i in range(SEARCH_BATCH + 10) if "7" in str(i)}
    rows = ro.list_run_rows(limit=10_000, search="zebra")
    assert len(rows) == SEARCH_BATCH + 10
    got = {r["id"] for r in ro.list_run_rows(limit=10_000, search="ro") if "7" in r["id"]}
    assert got == want
    with pytest.raises(StoreError, match="read-only"):
        ro.index_pending_runs()
    ro.close()


# --- search: the repair the store documents ------------------------------------------------
def test_the_documented_index_repair_keeps_the_batched_index_consistent(tmp_path):
    """`_create_search_index` says: anything that renumbers the runs' rowids must rebuild the
    index after. With schema 7 a bare FTS5 'rebuild' also indexes the runs waiting for their
    batch, and the next batch indexes them a second time: the index no longer holds exactly
    the runs (integrity-check: "database disk image is malformed"). The repair must be one
    the store offers (`rebuild_search_index`) that rebuilds and moves the mark with it."""
    path = str(tmp_path / "rebuild.db")
    rw = Rewind(path)
    st = rw.store

    def add(a: int, b: int) -> None:
        with st.transaction():
            for i in range(a, b):
                st.insert_run({"id": f"r{i}", "pipeline": "pipe", "status": "completed",
                               "created_at": 1e6 + i, "summary": f"s {i} zebra"})

    add(0, 10)  # waiting for their batch
    rebuild = getattr(st, "rebuild_search_index", None)
    assert rebuild is not None, (
        "SQLiteStore has no rebuild_search_index(): the repair _create_search_index documents "
        "(a bare FTS5 'rebuild') leaves the waiting runs in the index twice once their batch comes")
    rebuild()
    st.delete_runs(["r9"])  # a waiting run deleted
    add(10, SEARCH_BATCH + 20)  # the batch
    assert len(_searched(rw, "zebra")) == SEARCH_BATCH + 19
    st.index_pending_runs()
    rw.close()
    integrity_check(path, flush=False)


# --- migration from a database the v6 code wrote ---------------------------------------------
_V6_WRITER = """
import sys
from rewind import Rewind
from rewind.store import SCHEMA_VERSION
sys.path.insert(0, sys.argv[3])
from tests import shapes
assert SCHEMA_VERSION == 6, SCHEMA_VERSION
rw = Rewind(sys.argv[1])
run = rw.run(shapes.linear(), {"topic": "wasps"})
rw.fork(run.id, at="draft")
with rw.store.transaction():
    for i in range(int(sys.argv[2])):
        rw.store.insert_run({"id": f"v6-{i}", "pipeline": "pipe", "status": "completed",
                             "created_at": 1e6 + i, "summary": f"old {i} " + ("zebra" if i % 7 == 0 else "")})
rw.store.update_run("v6-3", summary="renamed okapi")
rw.store.delete_runs(["v6-5"])
print(run.id)
rw.close()
"""


def _v6_code(tmp_path) -> str:
    old = tmp_path / "v6code"
    old.mkdir()
    archive = subprocess.run(["git", "-C", ROOT, "archive", V6_COMMIT, "rewind"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    return str(old)


@pytest.mark.parametrize("n", [SEARCH_BATCH - 3, SEARCH_BATCH * 2 + 1])
def test_a_v6_database_written_by_the_v6_code_migrates_with_every_run_searchable(tmp_path, n):
    old = _v6_code(tmp_path)
    path = str(tmp_path / "v6.db")
    env = {**os.environ, "PYTHONPATH": old}
    p = subprocess.run([sys.executable, "-c", _V6_WRITER, path, str(n), ROOT], env=env,
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    run_id = p.stdout.strip().splitlines()[-1]
    conn = sqlite3.connect(path)
    # the v6 code counted hits per entry (its fork was served from the cache): the total keeps them
    entry_hits = conn.execute("SELECT SUM(hits) FROM cache").fetchone()[0]
    total = conn.execute("SELECT SUM(hits) FROM cache_stat").fetchone()[0]
    conn.close()
    assert entry_hits == total > 0
    rw = Rewind(path, pipelines=[shapes.linear()])
    assert rw.store.query("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    assert rw.cache_stats()["hits"] == total
    assert rw.store.query("SELECT SUM(hits) FROM cache") == [(0,)]
    integrity_check(path, flush=False)  # v6 indexed every run: nothing waits, no flush needed
    rows = {r["id"]: (r["summary"], r["pipeline"]) for r in rw.store.list_run_rows(limit=10_000)}
    assert len(rows) == n + 1
    for q in ("zebra", "okapi", "old 1", "v6-", "v6-5", "linear", "old 5 "):
        assert set(_searched(rw, q)) == _like_model(rows, q), q
    # new runs past the mark, across a batch, then a fork of the run the v6 code made
    with rw.store.transaction():
        for i in range(SEARCH_BATCH + 3):
            rw.store.insert_run({"id": f"v7-{i}", "pipeline": "pipe", "status": "completed",
                                 "created_at": 2e6 + i, "summary": f"new {i} zebra"})
            rows[f"v7-{i}"] = (f"new {i} zebra", "pipe")
    fork = rw.fork(run_id, at="polish")
    assert [s.status for s in fork.steps][2:4] == ["cached", "cached"], [s.reason for s in fork.steps]
    assert rw.cache_stats()["hits"] == total + sum(1 for s in fork.steps if s.status == "cached")
    rows[fork.id] = (fork.summary, "linear")
    for q in ("zebra", "new 1", "okapi", fork.id[:6]):
        assert set(_searched(rw, q)) == _like_model(rows, q), q
    rw.store.index_pending_runs()
    rw.close()
    integrity_check(path, flush=False)


# --- the memory: every remembered read equals a fresh one -------------------------------------
def _fresh_read(store, key):
    if key[0] == "run":
        return SQLRuns.get_run_row(store, key[1])
    if key[0] == "cache":
        return store.cache_get_many(key[1])
    return SQLitePersister.load(store.persister(), *key[1:])


def _comparable(v):
    if isinstance(v, dict) and "state" in v and hasattr(v["state"], "get_all"):
        return {**v, "state": v["state"].get_all()}
    if isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()):
        return {k: {f: y for f, y in e.items() if f != "hits"} for k, e in v.items()}
    return v


def _in_thread(f):
    out: list = []

    def go():
        try:
            out.append(f())
        except BaseException as e:  # noqa: BLE001 - re-raised below
            out.append(e)

    t = threading.Thread(target=go)
    t.start()
    t.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


_START = {"linear": lambda r: {"topic": r.choice(["wasps", "bees"])},
          "loop": lambda r: {"goal": r.choice(["go", "write"])},
          "branching": lambda r: {"text": r.choice(["short", "a fairly long text about bees"])}}


@pytest.mark.parametrize("seed", [3, 6])
def test_every_remembered_read_equals_a_fresh_read_after_any_write(tmp_path, monkeypatch, seed):
    seen: list = []
    original = SQLiteStore._remembered
    main = threading.current_thread()

    def spy(self, key, read):
        if threading.current_thread() is main:
            seen.append((self, key))
        return original(self, key, read)

    monkeypatch.setattr(SQLiteStore, "_remembered", spy)
    rnd = random.Random(seed)
    path = str(tmp_path / "memo.db")
    a, b = Rewind(path), Rewind(path)
    pipes = [shapes.linear(), shapes.loop(), shapes.branching()]
    runs: list = []
    for step in range(90):
        h = rnd.choice([a, a, b])
        op = rnd.randrange(12)
        try:
            if op == 0 or not runs:
                p = rnd.choice(pipes)
                runs.append(h.run(p, _START[p.name](rnd)).id)
            elif op in (1, 2, 3):
                run = a.get_run(rnd.choice(runs))
                if run.steps:
                    at = rnd.choice(run.steps).node
                    f = a.fork(run.id, at=at) if op != 3 else _in_thread(lambda: a.fork(run.id, at=at))
                    runs.append(f.id)
            elif op == 4:
                h.purge_cache(older_than_days=0)
            elif op == 5:  # replace an entry
                e = h.store.query("SELECT node, input_hash FROM cache ORDER BY random() LIMIT 1")
                if e:
                    k = tuple(e[0])
                    entry = h.store.cache_get_many([k])[k]
                    with h.store.transaction():
                        h.store.cache_put({**entry, "cached_at": time.time(), "output_hash": "0" * 64})
            elif op == 6:
                h.store.update_run(rnd.choice(runs), summary=f"renamed {step}")
            elif op == 7:
                rid = rnd.choice(runs)
                with h.store.transaction():
                    h.store.delete_runs([rid])
                runs.remove(rid)
            elif op == 8:  # writes of every kind, rolled back
                with pytest.raises(KeyboardInterrupt):
                    with h.store.transaction():
                        h.store.update_run(rnd.choice(runs), summary="rolled back")
                        h.store.execute("DELETE FROM cache")
                        h.store.execute("DELETE FROM burr_state")
                        raise KeyboardInterrupt
            elif op == 9:
                _in_thread(lambda: h.purge_cache(older_than_days=0))
            elif op == 10:
                r = h.store.query("SELECT partition_key, app_id, sequence_id, position FROM "
                                  "burr_state ORDER BY random() LIMIT 1")
                if r:
                    with h.store.transaction():
                        h.store.delete_state(*r[0])
            else:
                h.store.execute("VACUUM")
        except Exception as e:  # a fork of a run whose state or parent was just removed
            if type(e).__name__ not in ("ForkError", "NotFound", "InvalidRequest"):
                raise
        for store, key in list({(id(s), k): (s, k) for s, k in seen}.values()):
            want = _comparable(_fresh_read(store, key))
            got = _comparable(original(store, key, lambda: _fresh_read(store, key)))
            assert got == want, (seed, step, op, key)
    assert seen
    a.close()
    b.close()


_OTHER_PROCESS = """
import sys, json
sys.path.insert(0, sys.argv[2])
from rewind import Rewind
rw = Rewind(sys.argv[1])
what = sys.argv[3]
if what == "purge":
    rw.purge_cache(older_than_days=0)
elif what == "rename":
    rw.store.update_run(sys.argv[4], summary="renamed in another process")
elif what == "replace":
    import time
    k = tuple(json.loads(sys.argv[4]))
    entry = rw.store.cache_get_many([k])[k]
    with rw.store.transaction():
        rw.store.cache_put({**entry, "output_hash": sys.argv[5], "cached_at": time.time()})
rw.close()
"""


def _other_process(path: str, *args: str) -> None:
    p = subprocess.run([sys.executable, "-c", _OTHER_PROCESS, path, ROOT, *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def _fork_view(run) -> tuple:
    return (run.summary, [(s.node, s.status, s.output_hash) for s in run.steps])


def test_forks_equal_forks_made_without_the_memory_while_another_process_writes(tmp_path):
    path = str(tmp_path / "procs.db")
    rw = Rewind(path, pipelines=[shapes.linear()])
    plain = Rewind(path, pipelines=[shapes.linear()])
    plain.store._remembered = lambda key, read: read()  # this handle remembers nothing
    run = rw.run(shapes.linear(), {"topic": "wasps"})
    rw.fork(run.id, at="plan")  # remembered now
    for what, args in (("rename", [run.id]),
                       ("replace", ['["%s", "%s"]' % (run.steps[1].node, run.steps[1].input_hash),
                                    run.steps[0].output_hash]),
                       ("purge", [])):
        _other_process(path, what, *args)
        remembered = rw.fork(run.id, at="plan")
        _other_process(path, what, *args)  # the same again: both forks see the same database
        fresh = plain.fork(run.id, at="plan")
        assert _fork_view(remembered) == _fork_view(fresh), what
        if what == "rename":
            assert remembered.summary == "renamed in another process"
        if what == "replace":
            assert remembered.steps[1].status == "cached"
            assert remembered.steps[1].output_hash == run.steps[0].output_hash
    rw.close()
    plain.close()


def test_a_failed_commit_then_reset_connection_forgets(tmp_path):
    """A commit that fails (here: a constraint, as a conflicting import would) is rolled back
    and the connection dropped; what the next fork reads is the database's."""
    path = str(tmp_path / "reset.db")
    rw = Rewind(path)
    run = rw.run(shapes.linear(), {"topic": "wasps"})
    rw.fork(run.id, at="plan")
    st = rw.store
    with pytest.raises(sqlite3.IntegrityError):
        with st.transaction():
            st.update_run(run.id, summary="never committed")
            st.insert_run(dict(st.get_run_row(run.id)))  # the same id: fails
    st.reset_connection()
    assert rw.fork(run.id, at="plan").summary == run.summary
    assert st.get_run_row(run.id)["summary"] == run.summary
    rw.close()
