"""A commit that fails for real (issue 38, point 3): a full disk, a locked database, a lost
PostgreSQL connection. The process that saw it treats the run as `interrupted` at once (in every
handle it has on the database: list, get and resume), the error names the cause (never "cannot
rollback"), nothing but Rewind's error reaches stderr (no Burr banner, no traceback), and the
advice matches what was written: a run whose first commit failed does not exist, so nobody is
told to resume it.

The full disk is SQLite's own: `PRAGMA max_page_count` caps the file at its current size, and
SQLite raises SQLITE_FULL ("database or disk is full") on the same paths a full disk takes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import CommitError, Pipeline, Rewind, StoreError
from rewind.cli import main
from rewind.store.sqlite import SQLiteStore

BIG = 300_000  # characters: more than a full database has room for
FAULT: dict = {"at": None, "do": None}


@rewind.tool(name="lookup")
def lookup(topic: str) -> str:
    return "L" * BIG  # its result goes to the tool cache from inside the node


@rewind.action(reads=["topic"], writes=["plan"])
def plan(state):
    rewind.record_usage(10, 5)
    return state.update(plan=f"plan of {state['topic']}")


@rewind.action(reads=["plan"], writes=["body"])
def write(state):
    if FAULT["at"] == "write":  # the fault starts while this node runs
        FAULT["at"] = None
        FAULT["do"]()
    return state.update(body="x" * BIG)


@rewind.action(reads=["body"], writes=["summary"])
def summarize(state):
    return state.update(summary=f"{len(state['body'])} characters")


@rewind.action(reads=["plan"], writes=["found"])
def research(state):
    if FAULT["at"] == "research":
        FAULT["at"] = None
        FAULT["do"]()
    return state.update(found=len(lookup(state["plan"])))


PIPELINE = Pipeline("diskfill", GraphBuilder().with_actions(
    plan=plan, write=write, summarize=summarize).with_transitions(
    ("plan", "write"), ("write", "summarize")).build(), "plan")
TOOLS = Pipeline("diskfill-tools", GraphBuilder().with_actions(plan=plan, research=research)
                 .with_transitions(("plan", "research")).build(), "plan")


@pytest.fixture(autouse=True)
def _no_fault():
    FAULT.update(at=None, do=None)
    yield
    FAULT.update(at=None, do=None)


class DiskFull:
    """Every SQLite connection this process opens, capped by `PRAGMA max_page_count` once
    `fill()` is called: the database cannot grow by one page. `free()` lifts the cap."""

    def __init__(self, monkeypatch):
        self.full, self.conns = False, []
        real = SQLiteStore._open

        def _open(store):
            conn = real(store)
            self.conns.append(conn)
            if self.full:
                self._cap(conn)
            return conn

        monkeypatch.setattr(SQLiteStore, "_open", _open)

    @staticmethod
    def _cap(conn) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")

    def fill(self) -> None:
        self.full = True
        for conn in self.conns:
            try:
                self._cap(conn)
            except sqlite3.ProgrammingError:  # closed
                pass

    def free(self) -> None:
        self.full = False
        for conn in self.conns:
            try:
                conn.execute("PRAGMA max_page_count = 1073741823")
            except sqlite3.ProgrammingError:
                pass


def _status_in_a_new_process(url: str, run_id: str) -> str:
    code = ("import sys; from rewind import Rewind; "
            "print(Rewind(sys.argv[1]).get_run(sys.argv[2]).status)")
    out = subprocess.run([sys.executable, "-c", code, url, run_id], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _quiet(err: str) -> None:
    assert "Oh no an error" not in err and "Traceback" not in err, err
    assert "cannot rollback" not in err, err


def _counts(url: str) -> tuple:
    with Rewind(url) as rw:
        q = rw.store.query
        return tuple(q(f"SELECT COUNT(*) FROM {t}")[0][0] for t in ("runs", "nodes", "burr_state"))


# --- a full disk -------------------------------------------------------------------------------

def test_a_full_disk_mid_run_names_the_disk_and_leaves_the_run_interrupted(tmp_path, monkeypatch,
                                                                            capfd):
    db = str(tmp_path / "rewind.db")
    disk = DiskFull(monkeypatch)
    rw = Rewind(db, pipelines=[PIPELINE])
    FAULT.update(at="write", do=disk.fill)
    with pytest.raises(CommitError) as e:
        rw.run(PIPELINE, {"topic": "full"})
    message = str(e.value)
    assert "disk is full" in message and "cannot rollback" not in message, message
    assert "resume" in message and e.value.run_id
    run_id = e.value.run_id
    # the disk is still full: this process already reads the run as interrupted, everywhere
    assert rw.get_run(run_id).status == "interrupted"
    assert [(r.id, r.status) for r in rw.list_runs()] == [(run_id, "interrupted")]
    assert [r.id for r in rw.list_runs(status="interrupted")] == [run_id]
    assert rw.list_runs(status="running") == []
    with Rewind(db, pipelines=[PIPELINE]) as other:  # another handle of this process
        assert other.get_run(run_id).status == "interrupted"
    assert [s.node for s in rw.get_run(run_id).steps] == ["plan"]  # what was committed
    _quiet(capfd.readouterr().err)
    disk.free()
    done = rw.resume(run_id)
    assert done.status == "completed", done.error
    assert done.step("summarize").outputs == {"summary": f"{BIG} characters"}
    rw.close()
    assert _status_in_a_new_process(db, run_id) == "completed"


def test_a_transaction_sqlite_rolled_back_itself_reports_the_full_disk(tmp_path, monkeypatch):
    """On a full disk SQLite may roll the whole transaction back by itself (a one-row INSERT
    that finds no page); the error must then be the full disk, not the "cannot rollback - no
    transaction is active" of a ROLLBACK sent after it (3 of 8 errors said so)."""
    disk = DiskFull(monkeypatch)
    rw = Rewind(str(tmp_path / "rewind.db"))
    store = rw.store
    with store.transaction():
        store.execute("CREATE TABLE filler (x BLOB)")
    disk.fill()
    with pytest.raises(sqlite3.OperationalError) as e:
        with store.transaction():
            for _ in range(1000):
                store.execute("INSERT INTO filler VALUES (?)", (b"x" * 3000,))
    assert str(e.value) == "database or disk is full", str(e.value)
    assert store.describe_failure(e.value)[0].startswith("the disk holding the database is full")
    assert not store.connection.in_transaction
    disk.free()
    with store.transaction():  # the connection goes on
        store.execute("INSERT INTO filler VALUES (?)", (b"y",))
    assert store.query("SELECT COUNT(*) FROM filler") == [(1,)]
    rw.close()


def test_a_full_disk_before_the_first_commit_writes_nothing_and_advises_no_resume(
        tmp_path, monkeypatch, capfd):
    db = str(tmp_path / "rewind.db")
    disk = DiskFull(monkeypatch)
    Rewind(db, pipelines=[PIPELINE]).close()  # the graph is stored; the run is not
    before = _counts(db)
    disk.fill()
    rw = Rewind(db, pipelines=[PIPELINE])
    with pytest.raises(CommitError) as e:
        rw.run(PIPELINE, {"topic": "y" * BIG})  # its first state does not fit
    message = str(e.value)
    assert "disk is full" in message and "nothing was written" in message, message
    assert "resume" not in message and "cannot rollback" not in message
    assert rw.list_runs() == []
    _quiet(capfd.readouterr().err)
    rw.close()
    disk.free()
    assert _counts(db) == before


def test_the_cli_says_one_line_and_advises_what_was_written(tmp_path, monkeypatch, capfd):
    db = str(tmp_path / "rewind.db")
    disk = DiskFull(monkeypatch)
    Rewind(db, pipelines=[PIPELINE]).close()
    disk.fill()
    state = json.dumps({"topic": "y" * BIG})
    code = main(["--db", db, "run", "--quiet", "--pipeline", "test_commit_failures:PIPELINE",
                 "--state", state])
    out, err = capfd.readouterr()
    assert code == 1
    assert err.startswith("rewind: error: ") and err.count("\n") == 1, err
    assert "disk is full" in err and "nothing was written" in err and "resume" not in err, err
    disk.free()
    assert _counts(db)[0] == 0

    FAULT.update(at="write", do=disk.fill)  # now mid-run: the run exists and resumes
    code = main(["--db", db, "run", "--quiet", "--pipeline", "test_commit_failures:PIPELINE",
                 "--state", json.dumps({"topic": "mid"})])
    out, err = capfd.readouterr()
    assert code == 1
    assert err.startswith("rewind: error: ") and err.count("\n") == 1, err
    assert "disk is full" in err and "rewind resume" in err, err
    run_id = err.split("rewind resume ")[1].split()[0].strip("`').;")
    disk.free()
    monkeypatch.setenv("REWIND_PIPELINES", "test_commit_failures:PIPELINE")
    assert main(["--db", db, "resume", run_id, "--quiet"]) == 0
    _quiet(capfd.readouterr().err)


def test_a_full_disk_inside_a_node_is_named_and_no_banner_is_logged(tmp_path, monkeypatch, capfd):
    db = str(tmp_path / "rewind.db")
    disk = DiskFull(monkeypatch)
    rw = Rewind(db, pipelines=[TOOLS])
    FAULT.update(at="research", do=disk.fill)  # the tool's cache write is the one that fails
    try:
        run = rw.run(TOOLS, {"topic": "tool"})
        status, error = run.status, run.error
    except CommitError as e:
        status, error = rw.get_run(e.run_id).status, str(e)
    assert status == "interrupted", (status, error)
    assert "disk is full" in error and "cannot rollback" not in error, error
    _quiet(capfd.readouterr().err)
    disk.free()
    (stored,) = rw.list_runs()
    assert rw.resume(stored.id).status == "completed"
    rw.close()


_SCRIPT = """
import sys
import test_commit_failures as t
from rewind import CommitError, Rewind


class Patch:  # what DiskFull needs of pytest's monkeypatch
    setattr = staticmethod(setattr)


disk = t.DiskFull(Patch())
rw = Rewind(sys.argv[1], pipelines=[t.TOOLS, t.PIPELINE])
t.FAULT.update(at=sys.argv[2], do=disk.fill)
try:
    run = rw.run(t.TOOLS if sys.argv[2] == "research" else t.PIPELINE, {"topic": "api"})
    print(run.status, run.error)
except CommitError as e:
    print("raised", e)
"""


@pytest.mark.parametrize("at", ["research", "write"], ids=["in-a-node", "a-commit"])
def test_a_program_using_the_api_gets_no_banner_on_stderr(tmp_path, at):
    """Outside pytest (no log capture) nothing is written to stderr: no Burr banner, no
    traceback, no warning per attempt; the program gets the run, or the CommitError."""
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "rewind.db"), at],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert "disk is full" in out.stdout and "cannot rollback" not in out.stdout, out.stdout


# --- a locked database: writes fail, reads go on ----------------------------------------------

def test_a_locked_database_mid_run_leaves_the_run_interrupted_in_this_process(tmp_path,
                                                                              monkeypatch, capfd):
    import rewind.store.sqlite as sqlite_backend

    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT_MS", 200)  # wait 0.2 s for the lock, not 30
    db = str(tmp_path / "rewind.db")
    locker = sqlite3.connect(db, isolation_level=None)

    def lock():
        locker.execute("BEGIN IMMEDIATE")  # another writer holds the lock from now on

    rw = Rewind(db, pipelines=[PIPELINE])
    FAULT.update(at="write", do=lock)
    with pytest.raises(CommitError) as e:
        rw.run(PIPELINE, {"topic": "locked"})
    assert "locked" in str(e.value) and "cannot rollback" not in str(e.value), str(e.value)
    run_id = e.value.run_id
    # the mark could not be written either: another process still reads `running`...
    assert _status_in_a_new_process(db, run_id) == "running"
    # ...but every handle of this one reads it as interrupted, and resume says why it cannot
    assert rw.get_run(run_id).status == "interrupted"
    assert [r.status for r in rw.list_runs()] == ["interrupted"]
    assert rw.count_runs(status="interrupted") == 1 and rw.count_runs(status="running") == 0
    with Rewind(db, pipelines=[PIPELINE]) as other:
        assert other.get_run(run_id).status == "interrupted"
        with pytest.raises(CommitError) as refused:
            other.resume(run_id)
        assert "locked" in str(refused.value) and "is running" not in str(refused.value)
    _quiet(capfd.readouterr().err)
    locker.execute("ROLLBACK")  # the other writer is done
    assert [r.status for r in rw.list_runs()] == ["interrupted"]  # and now it is written
    assert _status_in_a_new_process(db, run_id) == "interrupted"
    assert rw.resume(run_id).status == "completed"
    locker.close()
    rw.close()


def test_while_writes_fail_every_read_of_this_process_says_interrupted(store_url):
    """Both backends: the commits of a handle keep failing after its run row was written (the
    mark too). Listing, filtering, counting and reading it say `interrupted` meanwhile; a new
    handle of this process, whose writes go through, marks it as it opens."""
    from test_commit_faults import FlakyCommits

    rw = Rewind(store_url, pipelines=[PIPELINE])
    flaky = FlakyCommits(rw.store)
    flaky.fail_at = set(range(2, 10_000))
    with pytest.raises(CommitError) as e:
        rw.run(PIPELINE, {"topic": "flaky"})
    run_id = e.value.run_id
    assert rw.store.query("SELECT status FROM runs WHERE id = ?", (run_id,)) == [("running",)]
    assert rw.get_run(run_id).status == "interrupted"
    assert [r.id for r in rw.list_runs(status="interrupted")] == [run_id]
    assert rw.list_runs(status="running") == [] and rw.count_runs(status="running") == 0
    assert rw.count_runs(status="interrupted") == 1
    assert rw.store.get_run_rows([run_id])[run_id]["status"] == "interrupted"
    with Rewind(store_url, pipelines=[PIPELINE]) as other:
        assert other.get_run(run_id).status == "interrupted"
        assert rw.store.query("SELECT status FROM runs WHERE id = ?", (run_id,)) == [("interrupted",)]
    flaky.fail_at = set()
    assert rw.resume(run_id).status == "completed"
    rw.close()


# --- PostgreSQL: a lost connection ------------------------------------------------------------

def _admin(url: str):
    from rewind.store.pg_admin import _admin_connect

    from conftest import postgres_base_url

    conn = _admin_connect(postgres_base_url())
    conn.autocommit = True
    return conn


def test_a_lost_connection_mid_run_names_it_and_leaves_the_run_interrupted(pg_url, capfd):
    from rewind.store.pg_admin import _dbname

    name = _dbname(pg_url)
    admin = _admin(pg_url)

    def outage(allow: bool) -> None:
        with admin.cursor() as cur:
            cur.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allow).lower()}')
            if not allow:  # every session of the database is terminated
                cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))

    rw = Rewind(pg_url, pipelines=[PIPELINE])
    FAULT.update(at="write", do=lambda: outage(False))
    try:
        with pytest.raises(CommitError) as e:
            rw.run(PIPELINE, {"topic": "outage"})
        message = str(e.value)
        assert "connection" in message and "lost" in message, message
        assert "cannot rollback" not in message
        run_id = e.value.run_id
        with pytest.raises(StoreError):  # nothing can be read meanwhile
            rw.get_run(run_id)
        _quiet(capfd.readouterr().err)
    finally:
        outage(True)
    # the server is back: the first call of this process marks it
    assert rw.get_run(run_id).status == "interrupted"
    with Rewind(pg_url, pipelines=[PIPELINE]) as other:
        assert other.get_run(run_id).status == "interrupted"
    assert _status_in_a_new_process(pg_url, run_id) == "interrupted"
    assert rw.resume(run_id).status == "completed"
    rw.close()
    admin.close()
