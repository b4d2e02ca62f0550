"""A process killed with SIGKILL in the middle of a run, on both backends.

The database stays readable (SQLite's own integrity check passes), the next store to open marks
the run `interrupted` (never while its process is still alive), its finished steps stay readable
and forkable, and `rw.resume` carries it to completion. A second test kills a busy writer again
and again at whatever point it has reached and checks nothing is ever lost or left half-written.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import children
import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, action
from rewind.errors import InvalidRequest

BLOCK_ENV = "REWIND_TEST_BLOCK_FILE"
SLOW_ENV = "REWIND_CRASH_SLOW_LAST_NODE"


# --- the pipeline: its third node blocks when the child is told to ------------------------------
@action(reads=["topic"], writes=["plan"])
def one(state):
    rewind.record_usage(3, 2)
    return state.update(plan=f"plan: {state['topic']}")


@action(reads=["plan"], writes=["draft"])
def two(state):
    rewind.record_usage(4, 4)
    return state.update(draft={"text": state["plan"].title(), "n": len(state["plan"])})


@action(reads=["draft"], writes=["report"])
def three(state):
    block = os.environ.get(BLOCK_ENV)
    if block:  # wait for a file that never appears; bounded, so a stray child cannot live forever
        with open(block + ".entered", "w"):  # the test kills the child once this exists
            pass
        deadline = time.monotonic() + 300
        while not os.path.exists(block) and time.monotonic() < deadline:
            time.sleep(0.01)
    rewind.record_usage(5, 6)
    return state.update(report=state["draft"]["text"] + "!")


@action(reads=["report"], writes=["summary"])
def four(state, words: int = 3):
    if os.environ.get(SLOW_ENV):  # the busy writer lingers in its last node: kills land mid-run
        time.sleep(0.03)
    return state.update(summary=" ".join(state["report"].split()[:words]))


@action(reads=["plan"], writes=["draft"])
def two_cheap(state):  # no tokens, well under 20 ms: a step that rides the next commit
    return state.update(draft={"text": state["plan"].upper(), "n": len(state["plan"])})


def crashy(name: str, second) -> Pipeline:
    return Pipeline(
        name=name,
        graph=GraphBuilder()
        .with_actions(one=one, two=second, three=three, four=four)
        .with_transitions(("one", "two"), ("two", "three"), ("three", "four"))
        .build(),
        entrypoint="one",
    )


PIPELINE = crashy("crashy", two)
CHEAP_PIPELINE = crashy("crashy-cheap", two_cheap)
NODES = ["one", "two", "three", "four"]


def child_main(argv: list) -> None:
    mode, url = argv[0], argv[1]
    rw = Rewind(url, pipelines=[PIPELINE, CHEAP_PIPELINE])
    if mode == "run":
        rw.run(PIPELINE, {"topic": "a run that will be killed"})
    elif mode == "cheap":
        rw.run(CHEAP_PIPELINE, {"topic": "a cheap step before a long one"})
    elif mode == "busy":  # runs and forks until killed (bounded)
        last = None
        for i in range(500):
            if last is None or i % 3 == 0:
                last = rw.run(PIPELINE, {"topic": f"busy {i}"}).id
            elif i % 3 == 1:
                last = rw.fork(last, at="two", edit={"plan": f"edited {i}"}).id
            else:
                last = rw.fork(last, at="four", params={"words": 1 + i % 4}).id


def spawn(mode: str, url: str, env: dict) -> children.Child:
    return children.start("test_crash:child_main", [mode, url], env)


def poll(check, child: subprocess.Popen, what: str, timeout: float = 90):
    """Call `check` until it returns something truthy; bounded, and fails fast if the child died."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if child.poll() is not None:
            pytest.fail(f"the child exited ({child.returncode}) before {what}: {child.stderr()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def kill(child: subprocess.Popen) -> None:
    child.kill()
    child.wait(timeout=30)  # reaped: a zombie would still look alive to kill(pid, 0)
    assert child.returncode == -signal.SIGKILL


@contextlib.contextmanager
def reaped(child: subprocess.Popen):
    """The child, killed and reaped on the way out whatever the test did (never left running)."""
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def check_database(url: str) -> None:
    if url.startswith("postgres"):
        import psycopg2

        conn = psycopg2.connect(url)
        try:
            with conn.cursor() as cur:
                for table in ("runs", "nodes", "blobs", "burr_state", "cache"):
                    cur.execute(f"SELECT COUNT(*) FROM {table}")
                    cur.fetchone()
        finally:
            conn.close()
        return
    conn = sqlite3.connect(url)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def step_rows(store, run_id: str) -> list:
    return store.query("SELECT idx, node, status FROM nodes WHERE run_id = ? ORDER BY idx", (run_id,))


# --- tests -------------------------------------------------------------------------------------
def test_sigkill_after_two_steps_then_recover_fork_and_resume(db_url, tmp_path):
    child = spawn("run", db_url, {BLOCK_ENV: str(tmp_path / "never-appears")})
    with reaped(child):
        watcher = Rewind(db_url)

        def two_steps_done():
            rows = watcher.store.query("SELECT run_id, COUNT(*) FROM nodes GROUP BY run_id")
            return next((r for r, n in rows if n >= 2), None)

        run_id = poll(two_steps_done, child, "the 2nd step row")
        # alive in another process: opening stores here never marks it
        assert watcher.store.recover_interrupted() == []
        again = Rewind(db_url)
        assert again.get_run(run_id).status == "running"
        again.close()
        kill(child)

    check_database(db_url)
    assert watcher.get_run(run_id).status == "running"  # nobody has looked yet
    watcher.close()

    rw = Rewind(db_url, pipelines=[PIPELINE])  # opening marks the dead run
    run = rw.get_run(run_id)
    assert run.status == "interrupted"
    assert "died" in (run.error or "")
    assert [(s.node, s.status) for s in run.steps] == [("one", "executed"), ("two", "executed")]
    assert run.step_count == 2 and run.total_tokens == 5 + 8
    assert run.step("two").outputs == {"draft": {"text": "Plan: A Run That Will Be Killed", "n": 31}}
    assert run.step("two").inputs == {"plan": "plan: a run that will be killed"}

    # forkable at a finished step and at the node it never reached
    f1 = rw.fork(run_id, at="two")
    assert f1.status == "completed", f1.error
    assert [s.status for s in f1.steps] == ["inherited", "cached", "executed", "executed"]
    assert f1.step("two").output_hash == run.step("two").output_hash
    f2 = rw.fork(run_id, at="three")
    assert f2.status == "completed", f2.error
    assert [s.status for s in f2.steps] == ["inherited", "inherited", "cached", "cached"]
    assert f2.step("four").outputs == {"summary": "Plan: A Run"}

    # resume carries the interrupted run itself to completion
    resumed = rw.resume(run_id)
    assert resumed.status == "completed", resumed.error
    assert [s.node for s in resumed.steps] == NODES
    assert resumed.step("two").output_hash == run.step("two").output_hash
    assert [r[0] for r in step_rows(rw.store, run_id)] == [0, 1, 2, 3]
    got = rw.get_run(run_id)
    assert got.status == "completed" and got.step("four").outputs == {"summary": "Plan: A Run"}
    assert got.step("one").status == "executed" and got.step("two").status == "executed"
    with pytest.raises(InvalidRequest):
        rw.resume(run_id)
    print(f"\n[{'postgres' if db_url.startswith('postgres') else 'sqlite'}] SIGKILL after step 2: "
          "interrupted, 2 steps readable, forked twice, resumed to 4/4 steps")
    rw.close()


def test_a_cheap_step_is_durable_before_a_long_one_starts(db_url, tmp_path):
    """Step two spends no tokens and takes no time, so it may ride along with a later commit;
    but step three blocks, and a SIGKILL while it does must not lose step two (a resume would
    have to compute it again, perhaps differently)."""
    block = tmp_path / "never-appears"
    child = spawn("cheap", db_url, {BLOCK_ENV: str(block)})
    with reaped(child):
        poll(lambda: os.path.exists(str(block) + ".entered"), child, "step three to start")
        kill(child)
    check_database(db_url)
    rw = Rewind(db_url, pipelines=[CHEAP_PIPELINE])
    (run,) = rw.list_runs(pipeline="crashy-cheap")
    run = rw.get_run(run.id)
    assert run.status == "interrupted"
    assert [(s.node, s.status) for s in run.steps] == [("one", "executed"), ("two", "executed")]
    assert run.step("two").outputs == {"draft": {"text": "PLAN: A CHEAP STEP BEFORE A LONG ONE", "n": 36}}
    assert rw.state_at(run.step("two"))["draft"]["n"] == 36  # Burr's state row is there too
    resumed = rw.resume(run.id)
    assert resumed.status == "completed", resumed.error
    assert [(s.node, s.status) for s in resumed.steps][:2] == [("one", "executed"), ("two", "executed")]
    rw.close()


def test_a_live_run_elsewhere_is_never_marked(db_url):
    """Owner pid alive on this host, or a fresh heartbeat from another host: left running."""
    rw = Rewind(db_url, pipelines=[PIPELINE])
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        from rewind.store import HOST, process_started

        now = time.time()
        rows = {
            "alive-here": dict(owner_host=HOST, owner_pid=sleeper.pid,
                               owner_started=process_started(sleeper.pid), heartbeat_at=now - 3600),
            "other-host-fresh": dict(owner_host="elsewhere", owner_pid=1, owner_started=1.0,
                                     heartbeat_at=now),
            "other-host-stale": dict(owner_host="elsewhere", owner_pid=1, owner_started=1.0,
                                     heartbeat_at=now - 3600),
        }
        with rw.store.transaction():
            for rid, owner in rows.items():
                rw.store.insert_run({"id": rid, "pipeline": "crashy", "status": "running",
                                     "created_at": now, **owner})
        Rewind(db_url).close()
        status = {rid: rw.store.get_run_row(rid)["status"] for rid in rows}
        assert status == {"alive-here": "running", "other-host-fresh": "running",
                          "other-host-stale": "interrupted"}
        sleeper.kill()
        sleeper.wait()
        Rewind(db_url).close()
        assert rw.store.get_run_row("alive-here")["status"] == "interrupted"
        assert rw.store.get_run_row("other-host-fresh")["status"] == "running"
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    rw.close()


def test_a_process_forked_after_import_is_the_owner_of_its_runs():
    """gunicorn --preload, a forkserver, a prefork worker: the child must not record its
    parent's pid, or its runs stay `running` after it dies while the parent lives."""
    from rewind.engine.liveness import owner_fields

    parent = owner_fields()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it would record, and leave without cleanup
        os.write(write, json.dumps(owner_fields()).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        child = json.loads(f.read())
    assert parent["owner_pid"] == os.getpid()
    assert child["owner_pid"] == pid and child["owner_started"] != parent["owner_started"]


def test_a_process_forked_with_an_open_store_opens_its_own_connection(tmp_path):
    """A connection belongs to the process that opened it (`SQLBase._slot`, which knows the
    pid without a syscall per statement, from a fork hook): a child forked from a process with
    an open store writes through a connection of its own, and the parent's still works."""
    rw = Rewind(str(tmp_path / "r.db"), pipelines=[PIPELINE])
    parent_conn = rw.store.connection
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        ok = rw.store.connection is not parent_conn
        with rw.store.transaction():
            rw.store.execute("CREATE TABLE IF NOT EXISTS from_child (x INTEGER)")
            rw.store.execute("INSERT INTO from_child VALUES (1)")
        os.write(write, b"ok" if ok else b"shared")
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        assert f.read() == "ok"
    assert rw.store.connection is parent_conn
    assert rw.store.query("SELECT x FROM from_child") == [(1,)]
    rw.close()


KILLS = 5


def test_repeated_sigkill_of_a_busy_writer(db_url):
    """Kill a process that runs and forks non-stop, at a different point each time; after every
    kill the database is whole, nothing is left `running`, every step reads back and every
    interrupted run resumes to completion."""
    rw = Rewind(db_url, pipelines=[PIPELINE])
    seen_interrupted = 0
    points = []
    for k in range(KILLS):
        before = int(rw.store.query("SELECT COUNT(*) FROM nodes")[0][0])
        target = before + 3 + 2 * k  # a different depth into the writer's work each time
        child = spawn("busy", db_url, {SLOW_ENV: "1"})
        try:
            # past `target` rows, and inside a run whose first steps are committed
            poll(lambda: int(rw.store.query("SELECT COUNT(*) FROM nodes")[0][0]) >= target
                 and rw.store.query(
                     "SELECT 1 FROM runs r WHERE r.status = 'running' AND EXISTS "
                     "(SELECT 1 FROM nodes n WHERE n.run_id = r.id AND n.status = 'executed')"),
                 child, f"{target} step rows inside a running run")
            kill(child)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        points.append(int(rw.store.query("SELECT COUNT(*) FROM nodes")[0][0]) - before)
        check_database(db_url)
        fresh = Rewind(db_url, pipelines=[PIPELINE])
        store = fresh.store
        statuses = dict(store.query("SELECT id, status FROM runs"))
        assert "running" not in statuses.values(), statuses
        for run_id, status in statuses.items():
            run = fresh.get_run(run_id)
            idxs = [r[0] for r in step_rows(store, run_id)]
            assert idxs == list(range(len(idxs)))  # no gap, no duplicate
            for s in run.steps:  # every value a step refers to is there and intact
                assert isinstance(s.outputs, dict) and isinstance(s.inputs, dict)
                if s.sequence_id is not None and s.state_app_id is not None:
                    assert fresh.state_at(s) is not None
            if status == "completed":
                assert [s.node for s in run.steps] == NODES
            elif status == "interrupted":
                seen_interrupted += 1
                resumed = fresh.resume(run_id)
                assert resumed.status == "completed", resumed.error
                assert [s.node for s in resumed.steps] == NODES
        dup = store.query("SELECT node, input_hash, COUNT(*) FROM cache GROUP BY node, input_hash "
                          "HAVING COUNT(*) > 1")
        assert dup == []
        fresh.close()
    assert seen_interrupted >= 1  # at least one kill landed inside a run
    total_runs = rw.store.query("SELECT COUNT(*) FROM runs")[0][0]
    print(f"\n[{'postgres' if db_url.startswith('postgres') else 'sqlite'}] {KILLS} SIGKILLs "
          f"survived (step rows written before each kill: {points}); {seen_interrupted} runs "
          f"interrupted, all resumed; {total_runs} runs, 0 rows lost")
    rw.close()
