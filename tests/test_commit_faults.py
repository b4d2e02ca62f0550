"""Nothing lost under a failed commit (issue 12): a commit is made to fail at every write point
of a run and of a fork, once (the retry on a fresh connection goes through) and twice in a row
(the run is left interrupted, or a fork raises and leaves nothing). Afterwards every committed
step is readable, the run resumes to completion, and no row points at nothing."""

from __future__ import annotations

import contextlib
import threading

import pytest

from rewind import CommitError, Rewind

import shapes


class FlakyCommits:
    """Makes chosen top-level commits of a store fail after their statements ran (so the
    transaction is rolled back, as when the server goes away or the disk fills up)."""

    def __init__(self, store):
        self.store, self.real = store, store.transaction
        self.count, self.fail_at = 0, set()
        self.depth = threading.local()
        store.transaction = self.transaction

    @contextlib.contextmanager
    def transaction(self):
        depth = getattr(self.depth, "n", 0)
        self.depth.n = depth + 1
        try:
            with self.real():
                yield
                if depth == 0:
                    self.count += 1
                    if self.count in self.fail_at:
                        raise self.store.write_errors[0]("injected: disk I/O error")
        finally:
            self.depth.n = depth


def _orphans(store) -> dict:
    q = store.query
    return {
        "steps without a run": q("SELECT COUNT(*) FROM nodes WHERE run_id NOT IN (SELECT id FROM runs)")[0][0],
        "running runs": q("SELECT COUNT(*) FROM runs WHERE status = 'running'")[0][0],
        "cache rows without their blobs": sum(
            1 for (outputs,) in q("SELECT outputs FROM cache")
            for h in __import__("json").loads(outputs).values()
            if h and not q("SELECT 1 FROM blobs WHERE hash = ?", (h,))),
    }


def _all_readable(url) -> list:
    with Rewind(url, pipelines=[shapes.linear()]) as rw:
        runs = [rw.get_run(r.id) for r in rw.list_runs(limit=1000)]
        for run in runs:
            for s in run.steps:
                s.inputs, s.outputs  # noqa: B018  (reading is the check)
        return runs


def _commits_of(url, action) -> int:
    rw = Rewind(url, pipelines=[shapes.linear()])
    flaky = FlakyCommits(rw.store)
    action(rw)
    rw.close()
    return flaky.count


@pytest.mark.parametrize("failures", [1, 2], ids=["once", "twice"])
def test_a_failed_commit_at_any_point_of_a_run_loses_nothing(store_url, tmp_path, failures):
    total = _commits_of(store_url, lambda rw: rw.run(shapes.linear(), {"topic": "count"}))
    assert total >= 2
    for n in range(1, total + 1):
        rw = Rewind(store_url, pipelines=[shapes.linear()])
        flaky = FlakyCommits(rw.store)
        flaky.fail_at = set(range(n, n + failures))
        topic = f"fault {failures}x at commit {n}"
        try:
            run = rw.run(shapes.linear(), {"topic": topic})
        except CommitError:
            run = None
        flaky.fail_at = set()
        assert _orphans(rw.store) == {"steps without a run": 0, "running runs": 0,
                                      "cache rows without their blobs": 0}, n
        runs = {r.summary: r for r in _all_readable(store_url)}
        if failures == 1:  # the retry went through: nothing to see
            assert run is not None and run.status == "completed", (n, run and run.error)
        stored = runs.get(topic)
        if stored is None:  # the very first commit failed: the run never existed
            assert run is None or n == 1
        elif stored.status != "completed":
            assert stored.status == "interrupted", (n, stored.status, stored.error)
            # its totals are those of the steps it kept (a full disk once left 0 tokens here)
            summary = next(r for r in rw.list_runs(limit=1000) if r.id == stored.id)
            assert summary.total_tokens == sum(s.tokens for s in stored.steps), n
            done = rw.resume(stored.id)
            assert done.status == "completed", (n, done.error)
        rw.close()


@pytest.mark.parametrize("failures", [1, 2], ids=["once", "twice"])
def test_a_failed_commit_of_a_fork_returns_a_readable_run_or_leaves_nothing(store_url, failures):
    with Rewind(store_url, pipelines=[shapes.linear()]) as rw:
        parent = rw.run(shapes.linear(), {"topic": "parent"})
    edit_fork = lambda rw: rw.fork(parent.id, at="draft", edit={"plan": "a new plan"})  # noqa: E731
    total = _commits_of(store_url, edit_fork)
    for n in range(1, total + 1):
        rw = Rewind(store_url, pipelines=[shapes.linear()])
        before = {r.id for r in rw.list_runs(limit=1000)}
        flaky = FlakyCommits(rw.store)
        flaky.fail_at = set(range(n, n + failures))
        try:
            fork = edit_fork(rw)
        except CommitError:
            fork = None
        flaky.fail_at = set()
        after = {r.id for r in rw.list_runs(limit=1000)}
        assert _orphans(rw.store)["steps without a run"] == 0, n
        if fork is not None:
            assert fork.id in after and rw.get_run(fork.id).status in ("completed", "interrupted")
            if rw.get_run(fork.id).status == "interrupted":
                assert rw.resume(fork.id).status == "completed"
        else:  # raised: nothing of it was left behind, or it was left resumable
            for new in after - before:
                assert rw.resume(new).status == "completed"
        _all_readable(store_url)
        rw.close()


def test_an_outage_that_outlasts_the_run_leaves_it_interrupted_once_the_database_is_back(store_url):
    """The server goes away for the rest of a run (its last commits and the mark after them
    all fail) while the process lives on, like the dashboard: once the database answers again,
    this process marks the run `interrupted` (no other process would: its owner is alive),
    and it resumes to completion. Before, it stayed `running` for as long as the process lived."""
    rw = Rewind(store_url, pipelines=[shapes.linear()])
    flaky = FlakyCommits(rw.store)
    flaky.fail_at = set(range(2, 1000))  # the first commit writes the run row; then the outage
    with pytest.raises(CommitError):
        rw.run(shapes.linear(), {"topic": "outage"})
    flaky.fail_at = set()  # the server is back
    (stuck_id, status), = rw.store.query("SELECT id, status FROM runs WHERE summary = 'outage'")
    assert status == "running"  # not written yet: another process cannot tell (the owner lives)
    runs = {r.summary: r for r in rw.list_runs(limit=1000)}  # any call of the owner's handle
    assert runs["outage"].status == "interrupted", runs["outage"].status
    other = Rewind(store_url, pipelines=[shapes.linear()])
    assert other.get_run(stuck_id).status == "interrupted"
    stuck = other.get_run(stuck_id)
    assert rw.resume(stuck.id).status == "completed"
    other.close()
    rw.close()


def test_the_heartbeat_marks_a_run_an_outage_left_running(store_url):
    """A process that makes no further call (a worker that idles) marks it too: every beat of
    its heartbeat tries, and the first after the outage succeeds."""
    from rewind.engine.liveness import Heartbeat

    rw = Rewind(store_url, pipelines=[shapes.linear()])
    flaky = FlakyCommits(rw.store)
    flaky.fail_at = set(range(2, 1000))
    with pytest.raises(CommitError):
        rw.run(shapes.linear(), {"topic": "idle outage"})
    beat = Heartbeat(rw.store)
    beat.beat()  # still away: kept for the next beat
    # as stored (a handle of this process would read it as interrupted, and mark it: issue 38)
    stored = "SELECT status FROM runs WHERE summary = 'idle outage'"
    assert rw.store.query(stored) == [("running",)]
    flaky.fail_at = set()
    beat.beat()
    assert rw.store.query(stored) == [("interrupted",)]
    rw.close()
