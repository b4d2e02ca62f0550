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


_SCRIPT_WITHOUT_CLOSE = """
import sys
from rewind import Rewind
from tests.shapes import linear
rw = Rewind(sys.argv[1])
for i in range(int(sys.argv[2])):
    rw.run(linear(), {"topic": f"t{i}"})
print(len(rw.list_runs()))
"""  # and no rw.close(): a short script as a user writes it


def _run_script(path: str, runs: int) -> int:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _SCRIPT_WITHOUT_CLOSE, path, str(runs)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_a_script_that_never_closes_leaves_its_runs_in_the_file_itself(tmp_path):
    path = str(tmp_path / "rewind.db")
    watcher = Rewind(path)  # another process has the store open meanwhile (the dashboard)
    assert _run_script(path, 3) == 3
    assert _run_script(path, 2) == 5
    assert os.path.getsize(path + "-wal") == 0, "the exiting script left its commits in the log"
    # a copy of rewind.db alone (a backup, a file sent to a colleague) holds every run
    os.makedirs(tmp_path / "copy")
    with open(path, "rb") as src, open(tmp_path / "copy" / "rewind.db", "wb") as dst:
        dst.write(src.read())
    plain = sqlite3.connect(str(tmp_path / "copy" / "rewind.db"))
    assert plain.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 5
    plain.close()
    assert len(watcher.list_runs()) == 5
    watcher.close()


def test_an_exit_blocked_by_another_writer_loses_nothing(tmp_path):
    path = str(tmp_path / "rewind.db")
    Rewind(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN")
    holder.execute("SELECT COUNT(*) FROM runs").fetchone()  # a reader pins the log's start
    try:
        assert _run_script(path, 2) == 2  # exits (the checkpoint gives up), does not hang
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Rewind(path) as again:
        assert len(again.list_runs()) == 2
