"""rewind_ui.redact: a cache hit's reason names the run its entry came from; for a viewer who
cannot see that run, the id (and Step.source_run) is replaced before a page draws it."""

from __future__ import annotations

from rewind.models import DiffRow, Run, Step, TrajectoryDiff
from rewind_ui import redact

MINE, THEIRS = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"


def visible(run_id: str) -> bool:
    return run_id == MINE


def test_reasons_and_source_runs_of_invisible_runs_are_replaced():
    run = Run(id=MINE, pipeline="p", status="completed", steps=[
        Step(node="a", status="cached", input_hash="i", output_hash="o", reason=f"cache hit: same inputs as run {THEIRS}", source_run=THEIRS),
        Step(node="b", status="cached", input_hash="i", output_hash="o", reason=f"cache hit: same inputs as run {MINE}", source_run=MINE),
        Step(node="c", status="executed", input_hash="i", output_hash="o", reason=f"x; nondeterministic: these inputs gave a different "
                                                  f"output before (run {THEIRS})"),
    ])
    out = redact.run(run, visible)
    assert out.steps[0].reason == "cache hit: same inputs as an earlier run" and out.steps[0].source_run is None
    assert out.steps[1] is run.steps[1]  # a visible run is named as before
    assert THEIRS not in out.steps[2].reason
    assert run.steps[0].source_run == THEIRS  # the cached original is untouched


def test_diff_reasons_are_replaced():
    d = TrajectoryDiff(a=MINE, b=MINE, rows=[DiffRow(node="a", occurrence=1, a_hash="1", b_hash="1", identical=True,
                                                     a_status="cached", b_status="cached",
                                                     a_reason=f"same inputs as run {THEIRS}", b_reason="")],
                       first_divergence=None, tokens_a=0, tokens_b=0)
    out = redact.diff(d, visible)
    assert THEIRS not in out.rows[0].a_reason and d.rows[0].a_reason.endswith(THEIRS)
