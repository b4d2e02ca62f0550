"""A commit re-checks that the blobs it refers to (known to this store) are still there only
when something may have removed them: on SQLite, another connection committed since this one
last wrote (PRAGMA data_version), or this connection ran a DELETE. Otherwise the check is one
PRAGMA, not a query over the hashes."""

from __future__ import annotations

import sqlite3

import rewind
from bench import workload as W


def _presence_checks(store, fn) -> int:
    seen: list = []
    raw = store.connection._conn
    raw.set_trace_callback(seen.append)
    try:
        fn()
    finally:
        raw.set_trace_callback(None)
    return sum(1 for s in seen if s.lstrip().upper().startswith("SELECT HASH FROM BLOBS"))


def test_no_presence_query_when_nobody_else_wrote(tmp_path):
    rw = rewind.Rewind(str(tmp_path / "a.db"))
    p = W.make_pipeline("presence")
    root = rw.run(p, {"topic": W.topic(1)})
    rw.fork(root.id, at=W.FORK_AT)
    assert _presence_checks(rw.store, lambda: rw.fork(root.id, at=W.FORK_AT)) == 0
    rw.close()


def test_another_connections_delete_is_seen_and_the_blob_written_again(tmp_path):
    path = str(tmp_path / "b.db")
    rw = rewind.Rewind(path)
    p = W.make_pipeline("presence2")
    root = rw.run(p, {"topic": W.topic(2)})
    rw.fork(root.id, at=W.FORK_AT)
    ref = root.steps[4].output_refs[W.FIELDS[W.NODES[4]]]
    other = sqlite3.connect(path)  # a gc in another process, as far as this store can tell
    other.execute("DELETE FROM blobs WHERE hash = ?", (ref,))
    other.commit()
    other.close()
    assert _presence_checks(rw.store, lambda: rw.fork(root.id, at=W.FORK_AT)) == 1
    assert rw.store.existing_blobs([ref]) == {ref}
    # and once more nobody else wrote: no check
    assert _presence_checks(rw.store, lambda: rw.fork(root.id, at=W.FORK_AT)) == 0
    fresh = rewind.Rewind(path)  # no memory: the value reads back from the database
    assert fresh.store.get_blobs([ref])[ref].startswith(W.NODES[4] + ":")
    fresh.close()
    rw.close()


def test_a_delete_on_this_connection_makes_the_next_commit_check(tmp_path):
    rw = rewind.Rewind(str(tmp_path / "c.db"))
    p = W.make_pipeline("presence3")
    root = rw.run(p, {"topic": W.topic(3)})
    ref = root.steps[5].output_refs[W.FIELDS[W.NODES[5]]]
    rw.fork(root.id, at=W.FORK_AT)
    with rw.store.transaction():
        rw.store.execute("DELETE FROM blobs WHERE hash = ?", (ref,))
    assert _presence_checks(rw.store, lambda: rw.fork(root.id, at=W.FORK_AT)) == 1
    assert rw.store.existing_blobs([ref]) == {ref}
    rw.close()
