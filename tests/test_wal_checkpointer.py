"""The SQLite store's WAL is checkpointed on a thread of its own (rewind/store/checkpointer.py):
commits never pay the checkpoint's fsync, the log stays bounded, a fork() child is safe, and
nothing is lost or left behind when the store closes."""

from __future__ import annotations

import os
import sqlite3

from rewind import Rewind
from rewind.store import checkpointer
from tests.shapes import linear


def _commit_many(store, n: int) -> None:
    for i in range(n):
        with store.transaction():
            store.execute("INSERT INTO edges (graph_id, ord, src) VALUES (?, ?, ?)", (f"g{i}", 0, "a"))


def test_writers_leave_checkpoints_to_the_thread(tmp_path):
    rw = Rewind(str(tmp_path / "c.db"))
    store = rw.store
    conn = store.connection
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == checkpointer.VALVE_PAGES
    assert store.checkpointer.passes == 0
    _commit_many(store, checkpointer.COMMITS_PER_CHECKPOINT)
    assert store.checkpointer.checkpointed.wait(30), "the background checkpoint never ran"
    assert store.checkpointer.passes >= 1
    # the thread copied the log into the file: a reader of the file alone sees the rows
    store.checkpoint_wal("PASSIVE")
    rw.close()
    assert not os.path.exists(str(tmp_path / "c.db-wal"))  # the last close removed the log
    plain = sqlite3.connect(str(tmp_path / "c.db"))
    assert plain.execute("SELECT COUNT(*) FROM edges").fetchone()[0] == checkpointer.COMMITS_PER_CHECKPOINT


def test_runs_survive_checkpoints_and_a_reopen(tmp_path):
    path = str(tmp_path / "r.db")
    pipeline = linear()
    with Rewind(path) as rw:
        runs = [rw.run(pipeline, {"topic": f"t{i}"}) for i in range(12)]
        assert rw.store.checkpointer.passes >= 1
    with Rewind(path) as again:
        for run in runs:
            back = again.get_run(run.id)
            assert [s.output_hash for s in back.steps] == [s.output_hash for s in run.steps]


def test_a_forked_child_can_write_while_the_parent_checkpoints(tmp_path):
    rw = Rewind(str(tmp_path / "f.db"))
    _commit_many(rw.store, checkpointer.COMMITS_PER_CHECKPOINT)
    pid = os.fork()
    if pid == 0:  # the child: its own store, its own thread
        code = 1
        try:
            child = Rewind(str(tmp_path / "child.db"))
            _commit_many(child.store, 2 * checkpointer.COMMITS_PER_CHECKPOINT)
            code = 0 if child.store.checkpointer.checkpointed.wait(30) else 3
            child.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    rw.close()


def test_an_explicit_truncate_empties_the_log(tmp_path):
    rw = Rewind(str(tmp_path / "t.db"))
    _commit_many(rw.store, 3 * checkpointer.COMMITS_PER_CHECKPOINT)
    busy, _, _ = rw.store.checkpoint_wal("TRUNCATE")
    assert busy == 0
    assert os.path.getsize(str(tmp_path / "t.db-wal")) == 0
    rw.close()
