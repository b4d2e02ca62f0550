"""Issue 39: blame finds the step that decided a failed run by re-rolling it from its steps.
Pinned on both backends with faults injected at known steps (tests/blame_shapes.py): a bad
sample at step k; a bad sample at j that only shows as an error at a later k (the cause is
named, not the symptom); a failure no re-roll fixes. Each verdict, the trial runs, their tokens,
the budget and the refusals."""

from __future__ import annotations

import pytest

import rewind
from rewind.analysis.blame_stats import decisive_index, wilson
from rewind.errors import InvalidRequest, UserError

from bench import blame_shapes as shapes


@pytest.fixture
def rw(store_url):
    shapes.reseed(0)
    handle = rewind.Rewind(store_url)
    yield handle
    handle.close()


@pytest.mark.parametrize("strategy", ["each", "bisect"])
def test_the_step_with_the_bad_sample_is_decisive(rw, strategy):
    pipe = shapes.chain(6, fault_at=2)
    run = shapes.failed_run(rw, pipe)
    assert run.status == "completed" and not shapes.succeeded(rw.state_at(run.steps[-1]))
    report = rw.blame(run.id, shapes.succeeded, samples=16, strategy=strategy)
    assert report.decisive == ("s2", 1), [(r.node, r.successes, r.trials) for r in report.steps]
    verdict = {r.node: r.verdict for r in report.steps}
    assert verdict["s2"] == "decisive" and verdict["s3"] == "locked"
    assert report.tokens == sum(rw.get_run(t).total_tokens for t in report.trial_runs) > 0
    for trial_id in report.trial_runs:  # nothing before the re-rolled step executed
        trial = rw.get_run(trial_id)
        at = [s.node for s in trial.steps].index(trial.fork_node)
        assert all(str(s.status) == "inherited" for s in trial.steps[:at])
        assert str(trial.steps[at].status) == "executed"


def test_bisect_tries_fewer_steps_than_each(rw):
    pipe = shapes.chain(16, fault_at=11)
    run = shapes.failed_run(rw, pipe)
    each = rw.blame(run.id, shapes.succeeded, samples=16, strategy="each")
    bisect = rw.blame(run.id, shapes.succeeded, samples=16, strategy="bisect")
    assert each.decisive == bisect.decisive == ("s11", 1)
    assert len(bisect.trial_runs) <= 0.5 * len(each.trial_runs)
    assert bisect.tokens_each_estimate == each.tokens_each_estimate
    assert sum(r.verdict == "not tried" for r in bisect.steps) > 0


def test_the_cause_is_named_not_the_symptom(rw):
    pipe = shapes.chain(6, fault_at=1, symptom_at=4)
    run = shapes.failed_run(rw, pipe)
    assert run.status == "failed" and run.steps[-1].node == "s4"
    report = rw.blame(run.id, shapes.succeeded, samples=16, strategy="each")
    assert report.decisive == ("s1", 1)
    assert {r.node: r.verdict for r in report.steps}["s4"] == "locked"


def test_a_failure_no_re_roll_fixes_has_no_decisive_step(rw):
    pipe = shapes.chain(5, fault_at=2)
    run = shapes.failed_run(rw, pipe, doomed=True)
    report = rw.blame(run.id, shapes.succeeded, samples=4, strategy="each")
    assert report.decisive is None and report.deterministic
    assert "deterministic" in report.summary
    assert all(r.verdict == "locked" for r in report.steps if r.resampled)


def test_a_budget_stops_before_a_trial_that_would_pass_it(rw):
    pipe = shapes.chain(6, fault_at=2)
    run = shapes.failed_run(rw, pipe)
    report = rw.blame(run.id, shapes.succeeded, samples=8, strategy="each", budget_tokens=100)
    assert report.budget_exhausted and report.tokens <= 100
    assert any(r.verdict == "not tried" for r in report.steps if r.resampled)
    assert report.tokens == sum(rw.get_run(t).total_tokens for t in report.trial_runs)


def test_bad_requests_are_refused_naming_the_thing(rw):
    pipe = shapes.chain(3, fault_at=1)
    run = shapes.failed_run(rw, pipe)
    with pytest.raises(InvalidRequest, match="passes the outcome"):
        rw.blame(run.id, lambda s: True)
    with pytest.raises(UserError, match="KeyError"):
        rw.blame(run.id, lambda s: s["missing"])
    with pytest.raises(InvalidRequest, match="samples"):
        rw.blame(run.id, shapes.succeeded, samples=0)
    with pytest.raises(InvalidRequest, match="strategy"):
        rw.blame(run.id, shapes.succeeded, strategy="guess")
    with pytest.raises(InvalidRequest, match="no node 'nope'"):
        rw.blame(run.id, shapes.succeeded, resample=["nope"])
    with pytest.raises(InvalidRequest, match="no re-sampled node"):
        rw.blame(run.id, shapes.succeeded, params={"temperature": 0.9})
    with pytest.raises(rewind.NotFound):
        rw.blame("no-such-run", shapes.succeeded)
    assert len(rw.list_runs(limit=100)) == 1  # nothing was written


def test_blame_many_counts_the_decisive_nodes(rw):
    pipe = shapes.chain(4, fault_at=1)
    runs = [shapes.failed_run(rw, pipe).id for _ in range(2)]
    doomed = shapes.failed_run(rw, pipe, doomed=True).id
    table = rw.blame_many(runs + [doomed], shapes.succeeded, samples=12, strategy="each")
    assert table["decisive"] == {"s1": 2} and table["none"] == 1


def test_wilson_intervals_and_the_decisive_rule():
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(8, 16)
    assert 0.27 < low < 0.29 and 0.71 < high < 0.73
    assert wilson(0, 16)[0] == 0.0 and 0.19 < wilson(0, 16)[1] < 0.2
    assert all(wilson(0, n)[0] == 0.0 and wilson(n, n)[1] == 1.0 for n in range(1, 200))
    # latest step clearly above the one after it; the last one is compared with no re-roll
    assert decisive_index([(12, 16), (11, 16), (0, 16), (0, 16)]) == 1
    assert decisive_index([(12, 16), (12, 16), (12, 16)]) == 2
    assert decisive_index([(1, 16), (0, 16)]) is None


def test_an_executor_other_than_local_is_refused(rw):
    run = shapes.failed_run(rw, shapes.chain(3, fault_at=1))
    with pytest.raises(InvalidRequest, match="executor='local'"):
        rw.blame(run.id, shapes.succeeded, executor="ray")


def test_a_field_outcome_naming_a_missing_field_is_refused_before_any_trial(rw):
    from rewind.analysis.blame import field_outcome

    run = shapes.failed_run(rw, shapes.chain(3, fault_at=1))
    with pytest.raises(UserError, match="no field 'okay' in the final state"):
        rw.blame(run.id, field_outcome("okay", True))
    assert len(rw.list_runs(limit=100)) == 1  # no trial was run


def test_recovering_steps_without_a_decisive_one_say_to_sample_more():
    from rewind.analysis.blame import BlameReport, BlameRow

    rows = [BlameRow("a", 1, 0, trials=3, successes=3, verdict="recovers", resampled=True),
            BlameRow("b", 1, 1, trials=3, successes=1, verdict="recovers", resampled=True)]
    report = BlameReport("r", 3, "each", ["a", "b"], None, rows, [], 0, 0)
    assert "more samples" in report.summary and not report.deterministic

