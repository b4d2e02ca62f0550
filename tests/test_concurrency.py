"""Several writers on one database, on both backends: processes see each other's runs, and 16
forks of one run (8 threads in each of 2 processes) started at the same instant all complete
with exactly the rows they should have written: no lost or duplicated step rows, exactly one
cache row per (node, input_hash), and never "database is locked" on SQLite.

Run with `pytest -s` to see the figures.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import defaultdict

import children
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, action

THREADS = 8
PROCESSES = 2  # this process and one child, THREADS forks each






def backend(url: str) -> str:
    return "postgres" if url.startswith("postgres") else "sqlite"


# --- the pipeline ------------------------------------------------------------------------------
@action(reads=["topic"], writes=["plan"])
def plan(state):
    rewind.record_usage(10, 5)
    return state.update(plan=f"plan for {state['topic']}")


@action(reads=["plan"], writes=["draft"])
def draft(state):
    rewind.record_usage(20, 10)
    return state.update(draft={"text": state["plan"].upper(), "len": len(state["plan"])})


@action(reads=["draft", "topic"], writes=["report"])
def report(state, style: str = "plain"):
    rewind.record_usage(5, 5)
    return state.update(report=f"[{style}] {state['draft']['text']} / {state['topic']}")


@action(reads=["report"], writes=["receipt"], determinism="side-effect")
def publish(state):
    return state.update(receipt={"chars": len(state["report"])})


PIPELINE = Pipeline(
    name="concurrent",
    graph=GraphBuilder()
    .with_actions(plan=plan, draft=draft, report=report, publish=publish)
    .with_transitions(("plan", "draft"), ("draft", "report"), ("report", "publish"))
    .build(),
    entrypoint="plan",
)
NODES = 4

# four kinds of fork, each made by several writers at once, so they race on the same cache keys
SPECS = [
    {"at": "draft"},                                          # no edit: all from cache
    {"at": "draft", "edit": {"plan": "edited plan A"}},        # re-executes draft, report
    {"at": "draft", "edit": {"plan": "edited plan B"}},
    {"at": "report", "params": {"style": "loud"}},             # re-executes report only
]


def spec_for(k: int) -> dict:
    return SPECS[k % len(SPECS)]


def fork_many(rw: Rewind, base_id: str, ks: list, start: threading.Barrier) -> list:
    """Fork `base_id` once per k in `ks`, one thread each, all released by `start`."""
    results: list = [None] * len(ks)

    def work(i: int, k: int) -> None:
        start.wait()
        try:
            run = rw.fork(base_id, **spec_for(k))
            results[i] = {"k": k, "id": run.id, "status": run.status, "error": run.error,
                          "hashes": [s.output_hash for s in run.steps],
                          "statuses": [s.status for s in run.steps], "tokens": run.total_tokens}
        except Exception as e:  # recorded, asserted on by the test
            results[i] = {"k": k, "id": None, "status": "raised", "error": f"{type(e).__name__}: {e}"}

    threads = [threading.Thread(target=work, args=(i, k)) for i, k in enumerate(ks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a fork thread hung"
    return results


def child_main(argv: list) -> None:
    """Entry point of the child process (python -c ... test_concurrency.child_main)."""
    mode, url = argv[0], argv[1]
    rw = Rewind(url, pipelines=[PIPELINE])
    if mode == "run":
        run = rw.run(PIPELINE, {"topic": argv[2]})
        print(json.dumps({"id": run.id, "status": run.status}))
    elif mode == "list":
        print(json.dumps({"ids": [r.id for r in rw.list_runs(limit=100)]}))
    elif mode == "fork-one":
        run = rw.fork(argv[2], at="report", params={"style": "from child"})
        print(json.dumps({"id": run.id, "status": run.status}))
    elif mode == "fork-many":
        base_id, ready, gate = argv[2], argv[3], argv[4]
        ks = [int(k) for k in argv[5].split(",")]
        barrier = threading.Barrier(len(ks) + 1)
        out: list = []
        runner = threading.Thread(target=lambda: out.extend(fork_many(rw, base_id, ks, barrier)))
        runner.start()
        open(ready, "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(gate):  # the parent opens the gate for both processes at once
            if time.monotonic() > deadline:
                sys.exit("the gate never opened")
            time.sleep(0.002)
        barrier.wait()
        runner.join()
        print(json.dumps(out))
    rw.close()


def run_child(*args: str, timeout: float = 300) -> dict:
    child = children.run("test_concurrency:child_main", list(args), timeout=timeout)
    assert child.returncode == 0, child.stderr()[-3000:]
    return json.loads(child.stdout().strip().splitlines()[-1])


# --- tests -------------------------------------------------------------------------------------
def test_two_processes_see_each_others_runs(db_url):
    rw = Rewind(db_url, pipelines=[PIPELINE])  # opened before the other process writes
    theirs = run_child("run", db_url, "written by the child")
    assert theirs["status"] == "completed"
    got = rw.get_run(theirs["id"])
    assert got.status == "completed" and len(got.steps) == NODES
    assert got.step("report").outputs["report"].endswith("/ written by the child")
    assert theirs["id"] in [r.id for r in rw.list_runs(search="written by the child")]

    mine = rw.run(PIPELINE, {"topic": "written by the parent"})
    listed = run_child("list", db_url)["ids"]
    assert mine.id in listed and theirs["id"] in listed
    # a fork made in the other process, of a run made in this one
    child_fork = run_child("fork-one", db_url, mine.id)
    fork = rw.get_run(child_fork["id"])
    assert fork.parent_id == mine.id and fork.status == "completed"
    assert [s.status for s in fork.steps] == ["inherited", "inherited", "executed", "dry-run"]
    assert [r.id for r in rw.list_runs(parent_id=mine.id)] == [fork.id]
    rw.close()


def test_sixteen_forks_of_one_run_at_once(db_url, tmp_path):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    base = rw.run(PIPELINE, {"topic": "contention"})
    assert base.status == "completed"
    ks_parent = list(range(0, THREADS))
    ks_child = list(range(THREADS, THREADS * PROCESSES))
    ready, gate = str(tmp_path / "ready"), str(tmp_path / "gate")

    child = children.start("test_concurrency:child_main",
                           ["fork-many", db_url, base.id, ready, gate, ",".join(map(str, ks_child))])
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(ready):  # bounded: the child imports, opens, starts its threads
            assert child.poll() is None, child.stderr()[-3000:]
            assert time.monotonic() < deadline, "the child never got ready"
            time.sleep(0.005)
        barrier = threading.Barrier(THREADS + 1)
        results: list = []
        runner = threading.Thread(target=lambda: results.extend(fork_many(rw, base.id, ks_parent, barrier)))
        runner.start()
        open(gate, "w").close()
        barrier.wait()
        runner.join()
        child.wait(timeout=300)
        out, err = child.stdout(), child.stderr()
    finally:
        child.kill()
    assert child.returncode == 0, err[-3000:]
    results += json.loads(out.strip().splitlines()[-1])

    # every fork completed, none saw a lock error
    forks = len(results)
    assert forks == THREADS * PROCESSES
    problems = [r for r in results if r["status"] != "completed"]
    assert not problems, problems
    locked = [r for r in results if "locked" in (r["error"] or "").lower()]
    assert not locked and "database is locked" not in err

    # forks of the same kind agree with each other
    by_spec = defaultdict(set)
    for r in results:
        by_spec[r["k"] % len(SPECS)].add(tuple(r["hashes"]))
    assert all(len(v) == 1 for v in by_spec.values()), by_spec
    no_edit = [r for r in results if r["k"] % len(SPECS) == 0]
    assert all(r["tokens"] == 0 for r in no_edit)
    assert all(r["statuses"] == ["inherited", "cached", "cached", "dry-run"] for r in no_edit)
    assert list(by_spec[0])[0] == tuple(s.output_hash for s in base.steps)

    # the rows: nothing lost, nothing doubled
    store = rw.store
    q = lambda sql, *p: store.query(sql, p)  # noqa: E731
    runs = q("SELECT COUNT(*) FROM runs")[0][0]
    step_rows = q("SELECT COUNT(*) FROM nodes")[0][0]
    expected_steps = NODES * (1 + forks)
    assert runs == 1 + forks
    assert step_rows == expected_steps
    per_run = defaultdict(list)
    for run_id, idx in q("SELECT run_id, idx FROM nodes"):
        per_run[run_id].append(idx)
    assert all(sorted(v) == list(range(NODES)) for v in per_run.values())
    assert set(per_run) == {base.id} | {r["id"] for r in results}
    dup_cache = q("SELECT node, input_hash, COUNT(*) FROM cache GROUP BY node, input_hash HAVING COUNT(*) > 1")
    assert dup_cache == []
    # exactly the distinct cacheable (node, input_hash) pairs that ran: base 3, edit A 2,
    # edit B 2, style 1
    keys = q("SELECT DISTINCT node, input_hash FROM nodes WHERE status IN ('executed', 'cached') "
             "AND node <> 'publish'")
    cache_rows = q("SELECT COUNT(*) FROM cache")[0][0]
    assert cache_rows == len(keys) == 8
    dup_states = q("SELECT app_id, sequence_id, COUNT(*) FROM burr_state "
                   "GROUP BY app_id, sequence_id HAVING COUNT(*) > 1")
    assert dup_states == []
    # every step of every fork reads back, values and all (no blob lost)
    for r in results:
        run = rw.get_run(r["id"])
        assert [s.output_hash for s in run.steps] == r["hashes"]
        assert all(isinstance(s.outputs, dict) for s in run.steps)
    # every writer's hits counted once, in its own commit: the total is the cached step rows
    hits = rw.cache_stats()["hits"]
    assert hits == q("SELECT COUNT(*) FROM nodes WHERE status = 'cached'")[0][0]
    print(f"\n[{backend(db_url)}] {forks} concurrent forks held ({THREADS} threads x {PROCESSES} "
          f"processes): {runs} runs, {step_rows}/{expected_steps} step rows, {cache_rows} cache rows "
          f"(1 per node+input_hash), {int(hits)} cache hits, 0 duplicates, 0 lock errors")
    rw.close()
