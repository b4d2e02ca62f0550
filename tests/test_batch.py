"""Batch counterfactuals on both backends: an edit flips exactly the runs it should (known by
construction in test_batch_pipeline), nodes the change never reaches are never called, the same
batch twice costs 0 tokens the second time, and a SIGKILLed worker loses only its fork."""

from __future__ import annotations

import pytest

import rewind
from rewind.batch import batch_fork, plan_batch

import test_batch_pipeline as app

JUDGE, TALLY, SUMMARIZE = app.TOKENS["judge"], app.TOKENS["tally"], app.TOKENS["summarize"]
REACHING = [n for n in range(app.N_RUNS) if n % 10 != 9]
FLIPPED = app.flips_at(20)


def make_runs(rw, calls_log=None) -> dict:
    """30 stored runs, n = 0..29; {run id: n}. Their own calls are not the batch's: the log
    starts empty after them."""
    by_id = {}
    for n in range(app.N_RUNS):
        run = rw.run(app.pipeline, {"n": n})
        assert run.status == "completed"
        by_id[run.id] = n
    if calls_log is not None:
        calls_log.unlink(missing_ok=True)
    return by_id


def table_by_n(report, by_id: dict) -> dict:
    """The report's rows keyed by the source run's n (ids differ between stores)."""
    return {by_id[r.run_id]: (r.outcome, r.status, r.first_divergence, r.tokens_spent,
                              r.tokens_saved, tuple(r.executed)) for r in report.rows}


@pytest.fixture
def calls_log(tmp_path, monkeypatch):
    path = tmp_path / "calls.log"
    monkeypatch.setenv("REWIND_BATCH_CALLS", str(path))
    return path


def check_first_batch(report, by_id: dict) -> None:
    outcomes = {by_id[r.run_id]: r.outcome for r in report.rows}
    assert {n for n, o in outcomes.items() if o == "changed"} == FLIPPED == {15, 16, 17, 18}
    assert {n for n, o in outcomes.items() if o == "skipped"} == {9, 19, 29}
    assert {n for n, o in outcomes.items() if o == "same"} == set(REACHING) - FLIPPED
    for r in report.rows:
        n = by_id[r.run_id]
        if r.outcome == "skipped":
            assert r.fork_id is None and "never reached 'judge'" in r.reason
        elif r.outcome == "changed":
            assert r.first_divergence == "judge" and r.executed == ["judge", "summarize"]
            assert r.reason == "summary changed" and r.tokens_spent == JUDGE + SUMMARIZE
        else:
            assert r.first_divergence is None and r.executed == ["judge"], n
            assert r.tokens_spent == JUDGE and r.tokens_saved == TALLY + SUMMARIZE
    assert report.counts == {"same": 23, "changed": 4, "failed": 0, "skipped": 3}
    assert report.tokens_spent == len(REACHING) * JUDGE + len(FLIPPED) * SUMMARIZE


def test_batch_flips_exactly_the_constructed_runs_and_reruns_free(store_url, calls_log):
    rw = rewind.Rewind(store_url)
    by_id = make_runs(rw, calls_log)
    rows_before = rw.count_runs()
    newest_first = [r.id for r in rw.list_runs(pipeline="batch-test", limit=100)]

    report = batch_fork(rw, "judge", pipeline="batch-test", params={"threshold": 20}, workers=2)
    assert [r.run_id for r in report.rows] == newest_first
    check_first_batch(report, by_id)
    # unreached nodes are never called: not what precedes the fork, not `tally` (it reads only
    # the score), not the shortcut; `summarize` only where the verdict flipped
    called = app.calls(calls_log)
    assert sorted(n for node, n in called if node == "judge") == REACHING
    assert sorted(n for node, n in called if node == "summarize") == sorted(FLIPPED)
    assert {node for node, _ in called} == {"judge", "summarize"}
    assert rw.count_runs() == rows_before + len(REACHING)

    # the same batch again: every fork is served from the cache
    calls_log.unlink()
    again = batch_fork(rw, "judge", pipeline="batch-test", params={"threshold": 20}, workers=1)
    assert again.tokens_spent == 0 and app.calls(calls_log) == []
    assert {by_id[r.run_id]: r.outcome for r in again.rows} == \
        {by_id[r.run_id]: r.outcome for r in report.rows}
    assert again.tokens_saved == report.tokens_saved + report.tokens_spent
    rw.close()


def test_killed_worker_loses_only_the_fork_in_flight(store_url, calls_log, tmp_path, monkeypatch):
    rw = rewind.Rewind(store_url)
    by_id = make_runs(rw, calls_log)
    marker = tmp_path / "killed"
    monkeypatch.setenv("REWIND_BATCH_KILL", str(marker))  # judge on n == 7 SIGKILLs its worker once

    report = batch_fork(rw, "judge", pipeline="batch-test", params={"threshold": 20}, workers=2)
    assert marker.exists()
    lost = [r for r in report.rows if r.outcome == "failed"]
    assert [by_id[r.run_id] for r in lost] == [7]
    assert "killed by SIGKILL" in lost[0].reason and "re-run the batch" in lost[0].reason
    rest = {by_id[r.run_id]: r.outcome for r in report.rows if by_id[r.run_id] != 7}
    assert {n for n, o in rest.items() if o == "changed"} == FLIPPED
    assert sum(1 for o in rest.values() if o == "same") == 22
    assert report.tokens_spent == (len(REACHING) - 1) * JUDGE + len(FLIPPED) * SUMMARIZE

    # re-running redoes the lost fork only: one judge, nothing else
    calls_log.unlink()
    again = batch_fork(rw, "judge", pipeline="batch-test", params={"threshold": 20}, workers=1)
    assert app.calls(calls_log) == [("judge", 7)]
    assert again.tokens_spent == JUDGE
    assert {by_id[r.run_id]: r.outcome for r in again.rows}[7] == "same"
    assert again.counts == {"same": 23, "changed": 4, "failed": 0, "skipped": 3}
    rw.close()


def test_explicit_runs_noise_verdict_and_metric(tmp_path, calls_log):
    rw = rewind.Rewind(str(tmp_path / "rewind.db"))
    by_id = make_runs(rw)
    ids = list(by_id)[5:25]  # n = 5..24: 18 reach judge, 4 flip
    report = batch_fork(rw, "judge", runs=ids, params={"threshold": 20}, noise_samples=2,
                        workers=1, outcome="verdict",
                        metric=lambda state: 1.0 if state.get("verdict") == "pass" else 0.0)
    assert [r.run_id for r in report.rows] == ids
    assert {by_id[r.run_id] for r in report.changed} == FLIPPED
    for r in report.rows:
        if r.outcome == "changed":  # judge is deterministic: every sample reproduces A
            assert r.verdict == "beyond noise" and r.reason == "verdict changed"
        elif r.outcome == "same":
            assert r.verdict == "within noise"
        else:
            assert r.verdict is None
    assert report.verdict_counts == {"within noise": 14, "beyond noise": 4}
    m = report.metric
    assert m.n == 18 and m.mean_diff == pytest.approx(-4 / 18)
    assert m.ci_low <= m.mean_diff <= m.ci_high < 0 and m.significant
    assert "metric diff" in report.summary and "4 beyond noise" in report.summary
    rw.close()


def test_plan_reads_the_runs_and_forks_nothing(tmp_path):
    rw = rewind.Rewind(str(tmp_path / "rewind.db"))
    make_runs(rw)
    before = rw.count_runs()
    plan = plan_batch(rw, "judge", pipeline="batch-test", params={"threshold": 20})
    assert plan.runs == 30 and len(plan.reaching) == 27 and len(plan.skipped) == 3
    assert plan.nodes == ["judge", "tally", "summarize"]
    assert plan.estimated_tokens == 27 * (JUDGE + TALLY + SUMMARIZE)
    assert plan.full_rerun_tokens == 27 * 25 + 3 * 14
    assert plan.specs == {"batch-test": "test_batch_pipeline:pipeline"}
    assert rw.count_runs() == before
    rw.close()


def _local_pipeline():
    from burr.core.graph import GraphBuilder

    @rewind.action(reads=["n"], writes=["score"])
    def only(state):
        return state.update(score=state["n"])

    graph = GraphBuilder().with_actions(only=only).build()
    return rewind.Pipeline(name="not-importable", graph=graph, entrypoint="only")


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(pipeline="batch-test", params={"nope": 1}), rewind.InvalidRequest, "no parameter 'nope'"),
    (dict(pipeline="batch-test", edit={"n": 1}), rewind.InvalidRequest, "does not read 'n'"),
    (dict(pipeline="batch-test", at="nowhere"), rewind.NotFound, "no node 'nowhere'"),
    (dict(runs=["no-such-run"]), rewind.NotFound, "no-such-run"),
    (dict(), rewind.InvalidRequest, "name the source runs"),
    (dict(pipeline="batch-test", executor="dask"), rewind.InvalidRequest, "executor"),
    (dict(pipeline="batch-test", workers=0), rewind.InvalidRequest, "workers"),
    (dict(pipeline="batch-test", noise_samples=-1), rewind.InvalidRequest, "noise_samples"),
    (dict(pipeline="batch-test", outcome="nothing"), rewind.InvalidRequest, "writes 'nothing'"),
    (dict(pipeline="no_such_module:pipeline"), rewind.NotFound, "no_such_module"),
])
def test_bad_input_is_refused_before_any_fork(tmp_path, kwargs, error, words):
    rw = rewind.Rewind(str(tmp_path / "rewind.db"))
    rw.run(app.pipeline, {"n": 3})
    before = rw.count_runs()
    kwargs = {"at": "judge", **kwargs}
    with pytest.raises(error, match=words.replace("(", r"\(")):
        batch_fork(rw, kwargs.pop("at"), **kwargs)
    assert rw.count_runs() == before
    rw.close()


def test_a_pipeline_workers_cannot_import_is_refused_before_any_fork(tmp_path):
    rw = rewind.Rewind(str(tmp_path / "rewind.db"))
    local = _local_pipeline()
    run = rw.run(local, {"n": 1})
    with pytest.raises(rewind.InvalidRequest, match="not importable by workers.*module:attribute"):
        batch_fork(rw, "only", runs=[run.id], params=None, edit={"n": 2})
    assert rw.count_runs() == 1
    rw.close()


def test_a_read_only_store_refuses_the_batch_once_and_plans_still(tmp_path):
    """A stranger's find: on a read-only store every row failed with the read-only message,
    where fork, resume and gc refuse once, up front."""
    path = str(tmp_path / "rewind.db")
    with rewind.Rewind(path) as rw:
        rw.run(app.pipeline, {"n": 3})
    ro = rewind.Rewind(f"sqlite:///{path}?mode=ro")
    assert ro.store.read_only
    with pytest.raises(rewind.ReadOnlyError, match="run a batch of forks"):
        batch_fork(ro, "judge", pipeline=app.pipeline, params={"threshold": 20})
    assert plan_batch(ro, "judge", pipeline=app.pipeline, params={"threshold": 20}).runs == 1
    assert ro.count_runs() == 1
    ro.close()
