"""`batch_fork`: one change replayed across N stored runs, on a process pool or Ray.

Checks everything in the caller's process first (`plan.prepare`), then hands the runs to an
executor, collects one row per run in source order, and computes the metric (any callable: it
runs here, on each pair's final states, never in a worker). Resumable by construction: a fork
replays from the content-addressed cache, so re-running a batch re-serves every fork that
finished (0 tokens) and re-executes only what never completed.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Optional

from ..errors import InvalidRequest
from .plan import prepare
from .report import CHANGED, SAME, BatchReport, BatchRow, summarize_metric

EXECUTORS = ("local", "ray")
MAX_WORKERS = 256


def _workers(workers: Any, n_runs: int) -> int:
    if workers is None:
        return max(1, min(os.cpu_count() or 1, n_runs))
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise InvalidRequest(f"workers must be an integer from 1 to {MAX_WORKERS}, not {workers!r}",
                             field="workers")
    return workers


def _final_state(rw: Any, run_id: str) -> dict:
    run = rw.get_run(run_id)
    if not run.steps:
        return {}
    state = rw.state_at(run.steps[-1]) or {}
    return {k: v for k, v in state.items() if not k.startswith("__")}


def _measure(rw: Any, metric: Callable, row: BatchRow) -> None:
    if row.outcome not in (SAME, CHANGED) or not row.fork_id:
        return
    try:
        a = float(metric(_final_state(rw, row.run_id)))
        b = float(metric(_final_state(rw, row.fork_id)))
    except Exception as e:  # the caller's metric: say where it failed, keep the batch
        row.reason = (row.reason + "; " if row.reason else "") + \
            f"metric raised {type(e).__name__}: {e}"
        return
    if math.isfinite(a) and math.isfinite(b):
        row.metric_a, row.metric_b = a, b
    else:
        row.reason = (row.reason + "; " if row.reason else "") + f"metric not finite ({a}, {b})"


def batch_fork(rw: Any, at: str, *, runs: Optional[list] = None, pipeline: Any = None,
               status: Optional[str] = "completed", limit: Optional[int] = None,
               edit: Optional[dict] = None, params: Optional[dict] = None,
               outcome: Optional[str] = None, noise_samples: int = 0, executor: str = "local",
               workers: Optional[int] = None, address: Optional[str] = None,
               metric: Optional[Callable[[dict], float]] = None,
               on_progress: Optional[Callable[[int, int, BatchRow], None]] = None) -> BatchReport:
    """Fork each source run at `at` with one change and say, per run, whether its outcome
    changed. `runs` is a list of run ids; else the original runs (not forks) of `pipeline`
    (a name, a Pipeline or `module:attr`) with `status`, newest first, at most `limit`. `edit`/
    `params` as in `fork`; with neither, the batch re-validates the current code. `outcome`
    names the state field that is the run's result (default: the writes of the pipeline's last
    non-side-effect node). Side effects are always dry-run. Bad input raises `RewindError`
    before anything is forked."""
    if executor not in EXECUTORS:
        raise InvalidRequest(f"executor must be one of {', '.join(EXECUTORS)}, not {executor!r}",
                             field="executor")
    if metric is not None and not callable(metric):
        raise InvalidRequest("metric must be a callable(state) -> float", field="metric")
    if address is not None and executor != "ray":
        raise InvalidRequest("address= is for executor='ray' (a Ray cluster)", field="address")
    rw.store.require_writable("run a batch of forks")  # once, not as a failure in every row
    request, sources = prepare(rw, at, runs=runs, pipeline=pipeline, status=status, limit=limit,
                               edit=edit, params=params, outcome=outcome,
                               noise_samples=noise_samples)
    run_ids = [s.id for s in sources]
    n_workers = _workers(workers, len(run_ids))
    rows: list = [None] * len(run_ids)
    done = [0]

    def on_row(index: int, row: BatchRow) -> None:
        if metric is not None:
            _measure(rw, metric, row)
        rows[index] = row
        done[0] += 1
        if on_progress is not None:
            on_progress(done[0], len(run_ids), row)

    started = time.perf_counter()
    if run_ids:
        if executor == "ray":
            from .ray_executor import run_ray

            run_ray(request, run_ids, n_workers, address, on_row)
        else:
            from .local import run_local

            run_local(request, run_ids, n_workers, on_row)
    report = BatchReport(at=at, rows=rows, edit=request.edit, params=request.params,
                         executor=executor, workers=n_workers, noise_samples=noise_samples,
                         elapsed_s=time.perf_counter() - started)
    if metric is not None:
        report.metric = summarize_metric(rows)
    return report
