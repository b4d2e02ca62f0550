"""Opening a SQLite store for reading never writes: a read-only file, or a read-only folder, opens
read-only (`store.read_only`, with the reason), reads everything, refuses writes with a clear
`StoreError`, and leaves the file byte for byte as it was.

The file-permission cases run in a child process without CAP_DAC_OVERRIDE, so that permissions
apply even when the tests run as root.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from rewind import Rewind
from rewind.errors import StoreError
from rewind.store import open_store

from test_maintenance import PIPELINE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def _fingerprint(folder: str) -> dict:
    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            out[name] = (hashlib.sha256(f.read()).hexdigest(), os.stat(path).st_mtime_ns)
    return out


def _database(folder) -> tuple:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "rewind.db")
    rw = Rewind(path, pipelines=[PIPELINE])
    run = rw.run(PIPELINE, {"topic": "read me"})
    run.report = run.step("polish").outputs["report"]  # read now: a closed handle would reopen
    rw.close()  # the last connection checkpoints: no -wal, no -shm left
    return path, run


def _without_dac_override() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


_READER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {root!r})
    sys.path.insert(0, {tests!r})
    from rewind import Rewind
    from rewind.errors import StoreError
    from test_maintenance import PIPELINE

    rw = Rewind(sys.argv[1], pipelines=[PIPELINE])
    run = rw.get_run(sys.argv[2])
    out = {{"read_only": rw.store.read_only, "reason": rw.store.read_only_reason,
           "runs": len(rw.list_runs()), "status": run.status,
           "report": run.step("polish").outputs["report"],
           "state": sorted(rw.state_at(run.steps[-1]))}}
    try:
        rw.run(PIPELINE, {{"topic": "a write"}})
        out["write"] = "allowed"
    except StoreError as e:
        out["write"] = str(e)
    print(json.dumps(out))
""")


def _read_as_user(path: str, run_id: str, *extra) -> subprocess.CompletedProcess:
    code = _READER.format(root=ROOT, tests=os.path.join(ROOT, "tests"))
    return subprocess.run([sys.executable, "-c", code, path, run_id, *extra], capture_output=True,
                          text=True, preexec_fn=_without_dac_override, timeout=120)


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_read_only_sqlite_file_opens_for_reading(tmp_path, what):
    folder = str(tmp_path / "ro")
    path, run = _database(folder)
    os.chmod(path, 0o444)
    if what == "folder":
        os.chmod(folder, 0o555)
    before = _fingerprint(folder)
    try:
        p = _read_as_user(path, run.id)
        cli = subprocess.run([sys.executable, "-m", "rewind", "--db", path, "runs"], cwd=ROOT,
                             capture_output=True, text=True, preexec_fn=_without_dac_override,
                             timeout=120)
    finally:
        os.chmod(folder, 0o755)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["read_only"] is True and "not writable" in got["reason"]
    assert got["runs"] == 1 and got["status"] == "completed"
    assert got["report"] == run.report
    assert "topic" in got["state"]
    assert "read-only" in got["write"] and path in got["write"]
    assert cli.returncode == 0 and run.id in cli.stdout, cli.stderr
    after = _fingerprint(folder)
    assert after.get("rewind.db") == before["rewind.db"]  # not one byte written
    if what == "folder":
        assert after == before  # not even a -shm: nothing could be created
    print(f"\n[sqlite] read-only {what}: opened, read, write refused, file unchanged")


def test_read_only_on_request_writes_nothing(tmp_path):
    folder = str(tmp_path / "asked")
    path, run = _database(folder)
    before = _fingerprint(folder)["rewind.db"]
    for store in (open_store(path, read_only=True), open_store(f"sqlite:///{path}?mode=ro")):
        assert store.read_only and store.read_only_reason == "asked to open it read-only"
        assert store.get_run_row(run.id)["status"] == "completed"
        assert store.count_runs() == 1
        store.put_graph("a-graph-not-stored", ["x"], [])  # registering a pipeline: no write
        with pytest.raises(StoreError, match="read-only"):
            with store.transaction():
                pass
        store.close()
    assert _fingerprint(folder)["rewind.db"] == before
    writable = open_store(path)
    assert writable.read_only is False and writable.read_only_reason == ""
    writable.close()


def test_read_only_needs_an_existing_current_database(tmp_path):
    with pytest.raises(StoreError, match="no such file"):
        open_store(str(tmp_path / "missing.db"), read_only=True)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(StoreError, match="has no Rewind schema and is open read-only"):
        open_store(str(empty), read_only=True)
    assert empty.stat().st_size == 0
    assert not stat.S_ISDIR(empty.stat().st_mode)


def test_a_read_only_store_refuses_a_run_or_fork_before_anything_runs(tmp_path, capsys):
    """On a store open read-only, `run`, `fork` and `resume` are refused at once, in one
    `ReadOnlyError` line naming the store, before a node runs or a commit is tried (before, the
    run executed, each commit was retried with a logged warning, and the error advised resuming
    a run that was never written). The CLI prints that one line."""
    import logging

    from rewind.cli import main
    from rewind.errors import ReadOnlyError

    folder = str(tmp_path / "ro")
    path, run = _database(folder)
    calls = []
    rw = Rewind(f"sqlite:///{path}?mode=ro", pipelines=[PIPELINE])
    assert rw.store.read_only
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("rewind").addHandler(handler)
    try:
        for what, call in (("run", lambda: rw.run(PIPELINE, {"topic": "x"})),
                           ("fork", lambda: rw.fork(run.id, at="draft")),
                           ("resume", lambda: rw.resume(run.id))):
            with pytest.raises(ReadOnlyError, match="read-only") as e:
                call()
            assert what in str(e.value) and path in str(e.value), str(e.value)
            calls.append(what)
    finally:
        logging.getLogger("rewind").removeHandler(handler)
    assert calls == ["run", "fork", "resume"]
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
    rw.close()
    capsys.readouterr()
    code = main(["--db", f"sqlite:///{path}?mode=ro", "fork", run.id, "--at", "draft"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "read-only" in err, err
