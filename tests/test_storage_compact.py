"""Compact storage on both backends: a no-edit fork adds small rows and no blobs (state rows and
step rows refer to content-addressed docs; inherited steps are pointers to the parent's rows);
gc keeps what only docs refer to and turns pointers into full rows before purging a parent;
export/import carries the docs; rows of the first layout still read.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from rewind import Rewind
from rewind.store import DOC_KEY, REFS_KEY, STEP_DOC_KEY, is_pointer

from test_maintenance import CALLS, PIPELINE, age, describe, trajectory


def _blobs(store) -> tuple:
    return tuple(store.query("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blobs")[0])


def _row_bytes(store, run_id: str) -> int:
    """Bytes of the values in every row a run wrote (runs, nodes, burr_state)."""
    total = 0
    for table, col in (("runs", "id"), ("nodes", "run_id"), ("burr_state", "app_id")):
        for row in store.query(f"SELECT * FROM {table} WHERE {col} = ?", (run_id,)):
            total += sum(len(str(v).encode()) for v in row if v is not None)
    return total


def _full(run) -> list:
    return [(s.node, s.occurrence, s.status, s.input_hash, s.output_hash, s.tokens, s.reason,
             s.params, s.field_hashes, s.input_refs, s.output_refs, s.sequence_id, s.state_app_id,
             s.source_run) for s in run.steps]


def test_a_no_edit_fork_adds_small_rows_and_no_blobs(db_url):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    run = rw.run(PIPELINE, {"topic": "compact " * 200})
    blobs = _blobs(rw.store)
    fork = rw.fork(run.id, at="polish")
    assert [s.status for s in fork.steps] == ["inherited", "inherited", "cached", "dry-run"]
    assert _blobs(rw.store) == blobs  # every doc it needs is its parent's
    # 4 step rows, 2 state rows and a run row: no refs maps, no copied summary of a value
    assert _row_bytes(rw.store, fork.id) < 1500, _row_bytes(rw.store, fork.id)
    for (state,) in rw.store.query("SELECT state FROM burr_state WHERE app_id = ?", (fork.id,)):
        doc = state if isinstance(state, dict) else json.loads(state)
        assert (DOC_KEY in doc or STEP_DOC_KEY in doc) and REFS_KEY not in doc
    # the inherited steps are pointers; read back, they are the parent's steps
    raw = rw.store.raw_node_rows(fork.id)
    assert [is_pointer(r) for r in raw] == [True, True, False, False]
    again = rw.get_run(fork.id)
    assert _full(again) == _full(fork)
    assert [s.inputs for s in again.steps] == [s.inputs for s in run.steps]
    assert [s.outputs for s in again.steps][:3] == [s.outputs for s in run.steps][:3]
    assert again.steps[0].reason == f"inherited from run {run.id}"
    assert again.step("polish").reason == f"cache hit: same inputs as run {run.id}"
    assert [rw.state_at(s) for s in again.steps[:3]] == [rw.state_at(s) for s in run.steps[:3]]
    rw.close()


def test_a_no_edit_fork_adds_under_4kb_on_disk(tmp_path):
    """The benchmark's figure on a smaller scale: file growth per no-edit fork, after a checkpoint."""
    path = str(tmp_path / "size.db")
    rw = Rewind(path, pipelines=[PIPELINE])
    run = rw.run(PIPELINE, {"topic": "t" * 2000})
    rw.fork(run.id, at="draft")

    def size() -> int:
        assert rw.store.checkpoint_wal("TRUNCATE")[0] == 0  # the whole log copied in
        import os

        return os.path.getsize(path)

    before = size()
    for _ in range(100):
        assert rw.fork(run.id, at="draft").total_tokens == 0
    assert (size() - before) / 100 < 4096
    rw.close()


def test_forks_of_forks_resolve_through_pointers_and_keep_edits(db_url):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    a = rw.run(PIPELINE, {"topic": "chain"})
    f1 = rw.fork(a.id, at="draft", edit={"plan": "an edited plan"})
    f2 = rw.fork(f1.id, at="draft")  # no edit, at its parent's fork node: keeps the edit
    f3 = rw.fork(f2.id, at="polish")
    f4 = rw.fork(f3.id, at="draft")
    for f in (f2, f3, f4):
        got = rw.get_run(f.id)
        assert _full(got) == _full(f)
        assert got.step("draft").inputs == {"plan": "an edited plan"}
        assert got.total_tokens == 0
    assert [s.output_hash for s in f4.steps] == [s.output_hash for s in f1.steps]
    # resume of a fork interrupted before its first own step continues from the right state
    rw.close()


def test_gc_keeps_blobs_only_docs_refer_to_and_materializes_pointers(db_url):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    a = rw.run(PIPELINE, {"topic": "old root"})
    f1 = rw.fork(a.id, at="polish", params={"tone": "warm"})
    f2 = rw.fork(f1.id, at="publish")
    before = {f.id: (_full(rw.get_run(f.id)), [s.inputs for s in rw.get_run(f.id).steps],
                     [rw.state_at(s) for s in rw.get_run(f.id).steps]) for f in (f1, f2)}
    age(rw.store, "runs", "created_at", 30, "id = ?", (a.id,))
    dry = rw.gc(older_than_days=7, dry_run=True)
    report = rw.gc(older_than_days=7)
    assert report["runs"] == 1 and dry["blobs"] == report["blobs"]
    assert not any(is_pointer(r) for r in rw.store.raw_node_rows(f1.id))
    fresh = Rewind(db_url, pipelines=[PIPELINE])  # no blob memory: everything from the database
    for f in (f1, f2):
        got = fresh.get_run(f.id)
        # steps, values and saved states are unchanged by the purge (the inherited reason
        # still names the purged parent)
        assert (_full(got), [s.inputs for s in got.steps], [fresh.state_at(s) for s in got.steps]) \
            == before[f.id]
        assert [s.outputs for s in got.steps]
    CALLS.clear()
    again = fresh.fork(f2.id, at="draft")  # at an inherited step whose parent's rows are gone
    assert again.status == "completed" and again.total_tokens == 0 and CALLS == []
    # a second gc finds nothing more to drop: every doc and what it refers to is referenced
    assert fresh.gc(older_than_days=7)["blobs"] == 0
    fresh.close()
    rw.close()


def test_export_import_carries_docs_and_resolves_pointers(db_url, tmp_path):
    src = Rewind(str(tmp_path / "src.db"), pipelines=[PIPELINE])
    a = src.run(PIPELINE, {"topic": "portable compact"})
    f1 = src.fork(a.id, at="polish", params={"tone": "dry"})
    f2 = src.fork(f1.id, at="draft")
    ids = [a.id, f1.id, f2.id]
    expected = describe(src, ids)
    doc = json.loads(json.dumps(src.export_run(f2.id)))
    assert all(n.get("doc") for n in doc["nodes"])  # inherited steps exported resolved
    dst = Rewind(db_url, pipelines=[PIPELINE])
    assert dst.import_run(doc) == ids
    assert dst.import_run(doc) == ids  # idempotent
    assert describe(dst, ids) == expected
    CALLS.clear()
    replay = dst.fork(f2.id, at="polish")
    assert replay.total_tokens == 0 and CALLS == []
    src.close()
    dst.close()


def test_rows_of_the_first_layout_still_read(db_url):
    """Step rows with their JSON columns and state rows with the refs map inline (as the first
    schema wrote them) read, diff and fork as before."""
    rw = Rewind(db_url, pipelines=[PIPELINE])
    run = rw.run(PIPELINE, {"topic": "legacy"})
    expected = rw.get_run(run.id)
    states = [rw.state_at(s) for s in expected.steps]
    store = rw.store
    with store.transaction():
        for s in expected.steps:
            store.execute(
                "UPDATE nodes SET field_hashes = ?, params = ?, inputs = ?, outputs = ?, "
                "output_hash = ?, state_app_id = ?, reason = ?, doc = NULL WHERE run_id = ? AND idx = ?",
                (json.dumps(s.field_hashes), json.dumps(s.params), json.dumps(s.input_refs),
                 json.dumps(s.output_refs), s.output_hash, s.state_app_id, s.reason, run.id, s.index),
            )
        for app_id, seq, pos in store.query(
            "SELECT app_id, sequence_id, position FROM burr_state WHERE app_id = ?", (run.id,)
        ):
            data = store.load_state_refs(app_id, seq)
            store.execute(
                "UPDATE burr_state SET state = ? WHERE app_id = ? AND sequence_id = ? AND position = ?",
                (json.dumps(data, sort_keys=True), app_id, seq, pos),
            )
    fresh = Rewind(db_url, pipelines=[PIPELINE])
    got = fresh.get_run(run.id)
    assert _full(got) == _full(expected)
    assert [fresh.state_at(s) for s in got.steps] == states
    CALLS.clear()
    fork = fresh.fork(run.id, at="polish")
    assert fork.total_tokens == 0 and CALLS == []
    assert trajectory(fork)[:3] == [(n, o, "inherited" if i < 2 else "cached", ih, oh, 0)
                                    for i, (n, o, _, ih, oh, _t) in enumerate(trajectory(got)[:3])]
    assert fresh.diff(run.id, fork.id).first_divergence is None
    fresh.close()
    rw.close()


def test_an_old_database_gets_the_doc_column(tmp_path):
    path = str(tmp_path / "old.db")
    Rewind(path).close()
    conn = sqlite3.connect(path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(nodes)")]
    conn.execute("ALTER TABLE nodes RENAME TO nodes_new")
    keep = [c for c in cols if c != "doc"]
    conn.execute(f"CREATE TABLE nodes AS SELECT {', '.join(keep)} FROM nodes_new")
    conn.execute("DROP TABLE nodes_new")
    conn.execute("UPDATE schema_version SET version = 1")  # as the first layout recorded it
    conn.commit()
    conn.close()
    rw = Rewind(path, pipelines=[PIPELINE])
    run = rw.run(PIPELINE, {"topic": "migrated"})
    assert rw.get_run(run.id).step("polish").outputs["report"].startswith("(neutral)")
    rw.close()
