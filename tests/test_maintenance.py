"""Maintenance on both backends: gc (dry run, purging old cache entries and runs, orphaned blobs,
lineage of what is kept), blob integrity (a corrupted blob is never served from the cache), and
export/import of a run with its lineage, SQLite -> PostgreSQL -> SQLite.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import time

import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, action
from rewind.errors import IntegrityError, InvalidRequest, NotFound
from rewind.keys import canonical_hash

DAY = 86400.0
TABLES = ("runs", "nodes", "edges", "cache", "tool_cache", "blobs", "burr_state", "alarms")






# --- the pipeline ------------------------------------------------------------------------------
CALLS: list = []


@rewind.tool(name="lookup")
def lookup(query: str) -> dict:
    CALLS.append("lookup")
    return {"query": query, "hits": [f"{query} result {i}" for i in range(3)]}


@action(reads=["topic"], writes=["plan"])
def plan(state, temperature: float = 0.0):
    CALLS.append("plan")
    rewind.record_usage(20, 10)
    found = lookup(state["topic"])
    return state.update(plan=f"plan for {state['topic']} from {len(found['hits'])} hits (t={temperature})")


@action(reads=["plan"], writes=["draft"])
def draft(state):
    CALLS.append("draft")
    rewind.record_usage(30, 30)
    return state.update(draft={"text": state["plan"].upper(), "words": len(state["plan"].split())})


@action(reads=["draft"], writes=["report"])
def polish(state, tone: str = "neutral"):
    CALLS.append("polish")
    rewind.record_usage(10, 5)
    return state.update(report=f"({tone}) {state['draft']['text']}")


@action(reads=["report"], writes=["receipt"], determinism="side-effect")
def publish(state):
    CALLS.append("publish")
    return state.update(receipt={"chars": len(state["report"])})


PIPELINE = Pipeline(
    name="maint",
    graph=GraphBuilder()
    .with_actions(plan=plan, draft=draft, polish=polish, publish=publish)
    .with_transitions(("plan", "draft"), ("draft", "polish"), ("polish", "publish"))
    .build(),
    entrypoint="plan",
)


def snapshot(store) -> dict:
    """Every row of every table, comparable across calls."""
    out = {}
    for table in TABLES:
        rows = []
        for r in store.query(f"SELECT * FROM {table}"):
            rows.append(tuple(bytes(v) if isinstance(v, memoryview) else
                              json.dumps(v, sort_keys=True) if isinstance(v, dict) else v for v in r))
        out[table] = sorted(rows, key=repr)
    return out


def counts(store) -> dict:
    return {t: int(store.query(f"SELECT COUNT(*) FROM {t}")[0][0]) for t in TABLES}


def age(store, table: str, column: str, days: float, where: str, params: tuple = ()) -> None:
    with store.transaction():
        store.execute(f"UPDATE {table} SET {column} = {column} - ? WHERE {where}",
                      (days * DAY, *params))


def trajectory(run) -> list:
    return [(s.node, s.occurrence, s.status, s.input_hash, s.output_hash, s.tokens) for s in run.steps]


# --- gc ------------------------------------------------------------------------------------------
def build_history(rw: Rewind) -> dict:
    """An old run A (to purge), a fresh fork F of it, an old unrelated run B (to purge, with
    values nobody else has), a fresh run C, and an old run still running (never purged)."""
    a = rw.run(PIPELINE, {"topic": "old topic A"})
    f = rw.fork(a.id, at="polish", params={"tone": "warm"})
    b = rw.run(PIPELINE, {"topic": "old unique topic B"})
    c = rw.run(PIPELINE, {"topic": "new topic C"})
    assert all(r.status == "completed" for r in (a, f, b, c))
    store = rw.store
    from rewind.store import HOST, this_process

    pid, started = this_process()
    with store.transaction():
        store.insert_run({"id": "still-running", "pipeline": "maint", "status": "running",
                          "created_at": time.time() - 90 * DAY, "owner_host": HOST, "owner_pid": pid,
                          "owner_started": started, "heartbeat_at": time.time()})
    age(store, "runs", "created_at", 30, "id IN (?, ?)", (a.id, b.id))
    age(store, "cache", "cached_at", 30, "source_run IN (?, ?)", (a.id, b.id))
    age(store, "tool_cache", "cached_at", 30, "args_hash = ?",
        (canonical_hash({"args": ["old unique topic B"], "kwargs": {}}),))
    return {"a": a, "f": f, "b": b, "c": c}


def test_gc_dry_run_changes_nothing(db_url):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    build_history(rw)
    before = snapshot(rw.store)
    report = rw.gc(older_than_days=7, dry_run=True)
    assert report["runs"] == 2 and report["cache_entries"] > 0 and report["blobs"] > 0
    assert report["tool_entries"] == 1 and report["bytes"] > 0
    assert snapshot(rw.store) == before
    # and the dry run predicted exactly what the real one does
    real = rw.gc(older_than_days=7)
    assert real == report
    assert snapshot(rw.store) != before
    rw.close()


def test_gc_purges_old_entries_runs_and_orphans_but_keeps_lineage(db_url):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    h = build_history(rw)
    a, f, b, c = h["a"], h["f"], h["b"], h["c"]
    store = rw.store
    old_cache = int(store.query("SELECT COUNT(*) FROM cache WHERE source_run IN (?, ?)", (a.id, b.id))[0][0])
    before = counts(store)
    unique_b = canonical_hash("old unique topic B")
    assert store.query("SELECT COUNT(*) FROM blobs WHERE hash = ?", (unique_b,))[0][0] == 1

    report = rw.gc(older_than_days=7)
    after = counts(store)
    assert report["runs"] == 2
    assert report["cache_entries"] == old_cache == 6  # plan, draft, polish of A and B
    assert report["tool_entries"] == 1
    assert report["blobs"] > 0 and report["bytes"] > 0
    assert after["runs"] == before["runs"] - 2
    assert after["nodes"] == before["nodes"] - len(a.steps) - len(b.steps)
    assert after["cache"] == before["cache"] - old_cache
    assert after["tool_cache"] == before["tool_cache"] - 1
    assert after["blobs"] == before["blobs"] - report["blobs"]
    assert store.get_run_row(a.id) is None and store.get_run_row(b.id) is None
    assert store.get_run_row("still-running")["status"] == "running"  # never purged
    # B's values were referenced by nothing else: gone, with B's saved states
    assert store.query("SELECT COUNT(*) FROM blobs WHERE hash = ?", (unique_b,))[0][0] == 0
    assert store.query("SELECT COUNT(*) FROM burr_state WHERE app_id = ?", (b.id,))[0][0] == 0
    # A's saved states survive only where F's inherited steps point
    kept = store.query("SELECT sequence_id FROM burr_state WHERE app_id = ? ORDER BY sequence_id", (a.id,))
    assert [r[0] for r in kept] == sorted(s.sequence_id for s in f.steps if s.status == "inherited")

    # F, whose parent is gone, renders whole: every inherited value is still there
    got = rw.get_run(f.id)
    assert trajectory(got) == trajectory(f)
    assert got.step("plan").inputs == {"topic": "old topic A"}
    assert got.step("draft").outputs == f.step("draft").outputs
    assert got.step("polish").outputs["report"].startswith("(warm) PLAN FOR OLD TOPIC A")
    assert all(rw.state_at(s) is not None for s in got.steps)
    lineage = rw.lineage(f.id)
    assert [(x["id"], x["missing"]) for x in lineage["ancestors"]] == [(a.id, True)]
    # ...and still forks: at an inherited step (its saved state was kept) and at its own
    again = rw.fork(f.id, at="draft")
    assert again.status == "completed", again.error
    assert [s.output_hash for s in again.steps] == [s.output_hash for s in f.steps]
    with pytest.raises(NotFound, match="purged"):
        rw.fork(f.id, at="plan")  # the root's start state went with A
    d = rw.diff(c.id, f.id)
    assert d.first_divergence == "plan"
    # C is untouched: a no-edit fork is all cache, zero tokens
    CALLS.clear()
    cc = rw.fork(c.id, at="plan")
    assert cc.total_tokens == 0 and CALLS == []
    # every blob left is one something refers to: a second gc finds nothing
    assert rw.gc(older_than_days=7) == {"cache_entries": 0, "tool_entries": 0, "runs": 0,
                                        "blobs": 0, "bytes": 0, "corrupt_blobs": 0}
    # a gc with 0 days purges everything but the running run; no blob is left unreferenced
    n_runs = rw.count_runs()
    final = rw.gc(older_than_days=0)
    assert final["runs"] == n_runs - 1
    assert [r.id for r in rw.list_runs(limit=100)] == ["still-running"]
    left = counts(store)
    assert (left["runs"], left["nodes"], left["cache"], left["tool_cache"], left["blobs"],
            left["burr_state"]) == (1, 0, 0, 0, 0, 0)
    rw.close()


def test_a_fork_of_a_fork_at_its_parents_fork_node_keeps_the_parents_edit(db_url):
    """Lineage through copied rows: F1 edits `plan` at `draft`; F2 forks F1 later on; forking F2
    at `draft` (an inherited step) must start from F1's edited state, not from the state the
    root saved after `plan` -- else a no-edit fork silently replays the root's values."""
    rw = Rewind(db_url, pipelines=[PIPELINE])
    a = rw.run(PIPELINE, {"topic": "lineage"})
    f1 = rw.fork(a.id, at="draft", edit={"plan": "an edited plan"})
    f2 = rw.fork(f1.id, at="polish", params={"tone": "dry"})
    again = rw.fork(f2.id, at="draft")
    assert again.step("draft").inputs == {"plan": "an edited plan"}
    assert [s.output_hash for s in again.steps[:3]] == [s.output_hash for s in f2.steps[:3]]
    assert again.total_tokens == 0  # a no-edit fork is all cache (invariant 1)
    rw.close()


@pytest.mark.parametrize("days", [-1, "soon", float("nan"), None])
def test_gc_rejects_bad_ages(tmp_path, days):
    rw = Rewind(str(tmp_path / "r.db"))
    with pytest.raises(InvalidRequest):
        rw.gc(older_than_days=days)
    rw.close()


# --- integrity -----------------------------------------------------------------------------------
@pytest.mark.parametrize("corruption", ["another-value", "garbage-bytes"])
def test_a_corrupted_blob_is_never_served_from_the_cache(db_url, corruption):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    run = rw.run(PIPELINE, {"topic": "integrity"})
    store = rw.store
    entry = store.cache_get("draft", run.step("draft").input_hash)
    (h,) = json.loads(entry["outputs"]).values()
    bad = b'{"text":"TAMPERED","words":1}' if corruption == "another-value" else b"\x00\xff not json"
    with store.transaction():
        store.execute("UPDATE blobs SET data = ? WHERE hash = ?", (bad, h))

    fresh = Rewind(db_url, pipelines=[PIPELINE])
    with pytest.raises(IntegrityError):
        fresh.get_run(run.id).step("draft").outputs
    CALLS.clear()
    fork = fresh.fork(run.id, at="draft")
    assert fork.status == "completed", fork.error
    step = fork.step("draft")
    assert step.status == "executed"  # a miss, not a hit on the tampered value
    assert "cache entry rejected" in step.reason and "no longer matches" in step.reason
    assert CALLS == ["draft"]
    assert step.output_hash == run.step("draft").output_hash  # recomputed, same as the original
    assert fork.step("polish").status == "cached"
    # the re-execution wrote the value again over the corrupt bytes: the original reads again
    assert fresh.get_run(run.id).step("draft").outputs["draft"]["text"].startswith("PLAN FOR INTEGRITY")

    # corrupted again: gc drops the corrupt blob; the next execution stores it again
    with store.transaction():
        store.execute("UPDATE blobs SET data = ? WHERE hash = ?", (bad, h))
    report = fresh.gc(older_than_days=365)
    assert report["corrupt_blobs"] == 1 and report["runs"] == 0
    assert store.query("SELECT COUNT(*) FROM blobs WHERE hash = ?", (h,))[0][0] == 0
    healed = fresh.fork(run.id, at="draft")
    assert healed.step("draft").status == "executed"
    assert fresh.get_run(run.id).step("draft").outputs["draft"]["text"].startswith("PLAN FOR INTEGRITY")
    third = fresh.fork(run.id, at="draft")
    assert third.step("draft").status == "cached" and third.total_tokens == 0
    fresh.close()
    rw.close()


# --- export / import -----------------------------------------------------------------------------
def lineage_ids(rw: Rewind, run_id: str) -> list:
    return [(x["id"], x["missing"]) for x in rw.lineage(run_id)["ancestors"]]


def describe(rw: Rewind, ids: list) -> list:
    out = []
    for rid in ids:
        run = rw.get_run(rid)
        out.append({
            "id": run.id, "status": run.status, "parent": run.parent_id, "fork_node": run.fork_node,
            "created_at": run.created_at, "tokens": (run.total_tokens, run.tokens_saved),
            "edit": run.edit, "params": run.params, "trajectory": trajectory(run),
            "inputs": [s.inputs for s in run.steps], "outputs": [s.outputs for s in run.steps],
            "states": [rw.state_at(s) for s in run.steps], "lineage": lineage_ids(rw, rid),
            "graph": rw.graph(run),
        })
    return out


def test_export_import_round_trip_sqlite_postgres_sqlite(tmp_path, pg_url):
    src = Rewind(str(tmp_path / "source.db"), pipelines=[PIPELINE])
    a = src.run(PIPELINE, {"topic": "portable"})
    f1 = src.fork(a.id, at="draft", edit={"plan": "a hand-edited plan"})
    f2 = src.fork(f1.id, at="polish", params={"tone": "dry"})
    failed = src.run(PIPELINE, {"topic": "portable"}, use_cache=False)  # another root, same values
    ids = [a.id, f1.id, f2.id]
    expected = describe(src, ids)
    doc = json.loads(json.dumps(src.export_run(f2.id)))  # plain JSON, as a file would carry it
    assert [r["id"] for r in doc["runs"]] == ids and doc["missing_ancestors"] == []
    assert failed.id not in json.dumps(doc["runs"])

    pg = Rewind(pg_url, pipelines=[PIPELINE])
    assert pg.import_run(doc) == ids
    rows_once = counts(pg.store)
    assert pg.import_run(doc) == ids  # idempotent
    assert counts(pg.store) == rows_once
    assert describe(pg, ids) == expected

    doc2 = json.loads(json.dumps(pg.export_run(f2.id)))
    back = Rewind(str(tmp_path / "back.db"), pipelines=[PIPELINE])
    assert back.import_run(doc2) == ids
    assert describe(back, ids) == expected
    # the imported runs are live: a no-edit fork replays from the imported cache, 0 tokens
    CALLS.clear()
    replay = back.fork(f2.id, at="polish")
    assert replay.status == "completed" and replay.total_tokens == 0 and CALLS == []
    assert [s.output_hash for s in replay.steps] == [s.output_hash for s in f2.steps]
    edited = back.fork(a.id, at="polish", params={"tone": "wry"})
    assert edited.step("polish").status == "executed"
    print(f"\n[export/import] {len(ids)} runs, {len(doc['nodes'])} steps, {len(doc['blobs'])} blobs, "
          f"{len(doc['states'])} states: SQLite -> PostgreSQL -> SQLite identical")
    for h in (src, pg, back):
        h.close()


def test_export_of_a_fork_whose_parent_was_purged(db_url, tmp_path):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    a = rw.run(PIPELINE, {"topic": "orphaned"})
    f = rw.fork(a.id, at="polish", params={"tone": "sad"})
    age(rw.store, "runs", "created_at", 30, "id = ?", (a.id,))
    assert rw.gc(older_than_days=7)["runs"] == 1
    doc = json.loads(json.dumps(rw.export_run(f.id)))
    assert doc["missing_ancestors"] == [a.id] and [r["id"] for r in doc["runs"]] == [f.id]
    other = Rewind(str(tmp_path / "other.db"), pipelines=[PIPELINE])
    assert other.import_run(doc) == [f.id]
    assert describe(other, [f.id]) == describe(rw, [f.id])
    assert lineage_ids(other, f.id) == [(a.id, True)]
    other.close()
    rw.close()


def _valid_doc(tmp_path) -> dict:
    src = Rewind(str(tmp_path / "docsrc.db"), pipelines=[PIPELINE])
    a = src.run(PIPELINE, {"topic": "documents"})
    f = src.fork(a.id, at="polish", params={"tone": "formal"})
    doc = json.loads(json.dumps(src.export_run(f.id)))
    src.close()
    return doc


def _mutations(doc: dict) -> list:
    """(name, broken document, words the error must contain)."""
    out = []

    def m(name, fn, *words):
        d = copy.deepcopy(doc)
        fn(d)
        out.append((name, d, words))

    some_blob = sorted(doc["blobs"])[0]
    out.append(("not an object", [copy.deepcopy(doc)], ("object",)))
    m("wrong format", lambda d: d.update(format="something-else"), "format")
    m("newer version", lambda d: d.update(version=99), "version")
    m("no runs", lambda d: d.update(runs=[]), "runs")
    m("run_id not among runs", lambda d: d.update(run_id="nope"), "run_id")
    m("bad status", lambda d: d["runs"][0].update(status="exploded"), "runs[0].status")
    m("unknown run field", lambda d: d["runs"][0].update(colour="red"), "colour")
    m("NaN created_at", lambda d: d["runs"][0].update(created_at=float("nan")), "created_at")
    m("lone surrogate id", lambda d: d["runs"][-1].update(summary="\ud800"), "summary", "Unicode")
    m("node of an unknown run", lambda d: d["nodes"][0].update(run_id="ghost"), "nodes[0].run_id")
    m("duplicate step", lambda d: d["nodes"].append(copy.deepcopy(d["nodes"][0])), "repeats")
    m("bad hash", lambda d: d["nodes"][0].update(output_hash="xyz"), "output_hash")
    m("bad refs", lambda d: d["nodes"][0].update(outputs="{not json"), "outputs")
    m("tampered blob", lambda d: d["blobs"].update(
        {some_blob: base64.b64encode(b'"tampered"').decode()}), "does not match")
    m("blob not base64", lambda d: d["blobs"].update({some_blob: "***"}), "base64")
    m("missing blob", lambda d: d["blobs"].pop(some_blob), "neither in the document")
    m("state without refs", lambda d: d["states"][0].update(state=[1, 2]), "states[0].state")
    m("bad edge", lambda d: d["edges"][next(iter(d["edges"]))].append(["x"]), "edges")
    m("negative idx", lambda d: d["nodes"][0].update(idx=-1), "idx")
    m("huge integer", lambda d: d["nodes"][0].update(tokens=2**70), "tokens")
    return out


def test_import_refuses_bad_documents_and_writes_nothing(db_url, tmp_path):
    doc = _valid_doc(tmp_path)
    rw = Rewind(db_url, pipelines=[PIPELINE])
    rw.run(PIPELINE, {"topic": "already here"})
    before = snapshot(rw.store)
    tried = 0
    for name, broken, words in _mutations(doc):
        with pytest.raises(InvalidRequest) as e:
            rw.import_run(broken)
        for w in words:
            assert w in str(e.value), (name, str(e.value))
        assert snapshot(rw.store) == before, name
        tried += 1
    # a run that exists here with other content: refused, and its ancestors not written either
    last = doc["runs"][-1]
    with rw.store.transaction():
        rw.store.insert_run({**{k: last[k] for k in ("id", "status", "created_at")},
                             "pipeline": "someone-else"})
    before = snapshot(rw.store)
    with pytest.raises(InvalidRequest, match="already exists in .* with different content"):
        rw.import_run(doc)
    assert snapshot(rw.store) == before
    assert rw.store.get_run_row(doc["runs"][0]["id"]) is None
    print(f"\n[{'postgres' if db_url.startswith('postgres') else 'sqlite'}] import refused "
          f"{tried + 1} bad documents, 0 rows written")
    rw.close()


def test_export_unknown_run(db_url):
    rw = Rewind(db_url)
    with pytest.raises(NotFound):
        rw.export_run("no-such-run")
    rw.close()
