"""Batch counterfactuals: one change replayed across N stored runs, with a verdict per run.

    from rewind.batch import batch_fork
    report = batch_fork(rw, "critique", pipeline="research", params={"temperature": 0.7},
                        workers=2)                      # or executor="ray"
    report.counts, report.tokens_spent, report.rows[0].outcome

Modules: `plan` (selecting and checking the runs and the change; the fork plan), `spec` (how a
pipeline reaches a worker: its import spec), `task` (one fork as a worker does it), `local`
and `worker` (the process pool), `ray_executor` (Ray tasks), `report` (rows, counts, the
bootstrap interval), `runner` (`batch_fork` itself).
"""

from .plan import BatchPlan, BatchRequest, plan_batch
from .report import (
    BEYOND, CHANGED, FAILED, OUTCOMES, SAME, SKIPPED, WITHIN, BatchReport, BatchRow, MetricSummary,
    bootstrap_mean,
)
from .runner import EXECUTORS, batch_fork

__all__ = [
    "batch_fork", "plan_batch", "BatchPlan", "BatchRequest", "BatchReport", "BatchRow",
    "MetricSummary", "bootstrap_mean", "OUTCOMES", "SAME", "CHANGED", "FAILED", "SKIPPED",
    "WITHIN", "BEYOND", "EXECUTORS",
]
