"""The Ray executor: each fork is a Ray task running the same `fork_one` as the local pool.

`address=None` starts a local Ray (`ray.init(num_cpus=workers, include_dashboard=False)`) and
shuts it down after the batch; `address="ray://…"` or `"auto"` joins an existing cluster, which is
left running. The tasks reach the store through its URL, so on a cluster of several machines it
must be PostgreSQL (a SQLite file is one machine's), and `rewind` plus the pipeline's module
must be importable on every node. Ray's own task retry is off: as with the local pool, a dead
worker loses exactly its fork, reported `failed`; re-running the batch redoes it from cache.
At most `2 × workers` tasks are in flight, so a batch of a million runs does not queue a million.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from ..errors import InvalidRequest, OperationError
from .report import FAILED, BatchRow


def _task(request: Any, run_id: str) -> dict:
    from .task import fork_one

    return fork_one(request, run_id)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise OperationError("executor='ray' needs Ray: `pip install ray` (or use executor='local')") from None
    return ray


def _start(ray: Any, workers: int, address: Optional[str]) -> bool:
    """Connect to Ray; True when this call started it (and so must shut it down)."""
    if ray.is_initialized():
        return False
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    if address:
        if os.path.exists(str(address)):
            raise InvalidRequest(f"address {address!r} looks like a path; give a Ray address "
                                 "such as ray://head:10001 or auto", field="address")
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    else:
        ray.init(num_cpus=workers, **quiet)
    return True


def run_ray(request: Any, run_ids: list, workers: int, address: Optional[str],
            on_row: Callable[[int, BatchRow], None]) -> None:
    ray = _import_ray()
    started = _start(ray, workers, address)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_task)
        shared = ray.put(request)
        pending = list(enumerate(run_ids))[::-1]
        window = max(1, 2 * workers)
        flight: dict = {}

        def submit() -> None:
            while pending and len(flight) < window:
                index, run_id = pending.pop()
                flight[remote.remote(shared, run_id)] = (index, run_id)

        submit()
        while flight:
            done, _ = ray.wait(list(flight), num_returns=1)
            for ref in done:
                index, run_id = flight.pop(ref)
                try:
                    row = BatchRow.from_dict(ray.get(ref))
                except Exception as e:  # the worker died, or Ray could not run the task
                    row = BatchRow(run_id=run_id, outcome=FAILED, reason=(
                        f"Ray task for run {run_id} failed ({type(e).__name__}: "
                        f"{' '.join(str(e).split())[:300]}); re-run the batch to redo this fork"))
                on_row(index, row)
            submit()
    finally:
        if started:
            ray.shutdown()
