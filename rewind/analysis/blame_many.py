"""Blame across many failed runs of a pipeline, and how often each node was decisive.

Each run is blamed as `rewind.analysis.blame.blame` does, on the batch executors: in this
process one after another (`executor="local"`, no `workers`), on fresh worker interpreters,
N at a time (`executor="local", workers=N`: `python -m rewind.analysis.blame_many`), or as Ray tasks (`executor="ray"`, `address=` joins a
cluster; see `rewind.batch.ray_executor`). A worker opens its own handle on the store's URL and
imports each pipeline by its spec (`package.module:attr`, `rewind.batch.spec`), so the outcome
must pickle: a module-level function, or `field_outcome(field, value)`. A run that is refused
(it passes the outcome, made no model call...) is reported with its one-line reason.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import subprocess
import sys
from typing import Any, Callable, Iterable, Optional

from ..errors import InvalidRequest, RewindError
from .blame import blame

EXECUTORS = ("local", "ray")


def _blame_one(opener: Any, url: str, specs: dict, run_id: str, outcome: Any, kwargs: dict) -> Any:
    """In a worker: blame one run through a handle of its own (`opener`: the caller's handle
    class, pickled by name, so this package never imports the API); a refusal as its message."""
    from ..batch.spec import check_spec

    with opener(url) as rw:
        for name, (spec, graph_id) in specs.items():
            rw.register(check_spec(spec, name, graph_id))
        try:
            return blame(rw, run_id, outcome, **kwargs)
        except RewindError as e:
            return f"{type(e).__name__}: {e}"


def _table(reports: dict) -> dict:
    counts: dict = {}
    none = 0
    for report in reports.values():
        if isinstance(report, str):
            continue
        if report.decisive is None:
            none += 1
        else:
            counts[report.decisive[0]] = counts.get(report.decisive[0], 0) + 1
    return {"reports": reports, "decisive": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
            "none": none}


def blame_many(rw: Any, run_ids: Iterable[str], outcome: Callable[[dict], bool], *,
               executor: str = "local", workers: Optional[int] = None,
               address: Optional[str] = None, **kwargs: Any) -> dict:
    """{"reports": {run_id: BlameReport, or the refusal's message}, "decisive": {node: how many
    runs it decided}, "none": runs with no decisive step}."""
    run_ids = [rw.resolve_run_id(r) for r in run_ids]
    if executor not in EXECUTORS:
        raise InvalidRequest(f"executor must be one of {', '.join(EXECUTORS)}, not {executor!r}",
                             field="executor")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256):
        raise InvalidRequest(f"workers must be an integer from 1 to 256, not {workers!r}", field="workers")
    if executor == "local" and (workers or 1) == 1:
        reports: dict = {}
        for run_id in run_ids:
            try:
                reports[run_id] = blame(rw, run_id, outcome, **kwargs)
            except RewindError as e:
                reports[run_id] = f"{type(e).__name__}: {e}"
        return _table(reports)
    kwargs.pop("on_progress", None)  # a worker's progress does not reach this process
    from ..batch.spec import resolve_spec

    names = {rw.get_run(r).pipeline for r in run_ids}
    specs = {n: (resolve_spec(rw.pipeline(n)), rw.pipeline(n).graph_id) for n in names}
    try:
        pickle.dumps(outcome)
    except Exception:  # noqa: BLE001 - a lambda or a closure: name what to use instead
        raise InvalidRequest("with workers the outcome goes to other processes: give a module-level "
                             "function or rewind.analysis.blame.field_outcome(field, value)",
                             field="outcome") from None
    if executor == "ray":
        return _table(_on_ray(type(rw), rw.url, specs, run_ids, outcome, kwargs, workers or 2, address))
    # fresh interpreters (`python -m rewind.analysis.blame_many`), as the batch pool's: never a
    # fork or spawn of the caller, whose __main__ (a script, pytest, Streamlit) plays no part
    from ..batch.local import worker_env

    env = worker_env()

    def one(run_id: str) -> Any:
        args = pickle.dumps((type(rw), rw.url, specs, run_id, outcome, kwargs))
        done = subprocess.run([sys.executable, "-m", "rewind.analysis.blame_many"], input=args,
                              capture_output=True, env=env, cwd=os.getcwd())
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            return f"the worker blaming run {run_id} failed (exit {done.returncode}): {tail[0]}"
        return pickle.loads(done.stdout)

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return _table(dict(zip(run_ids, pool.map(one, run_ids))))

def _on_ray(opener: Any, url: str, specs: dict, run_ids: list, outcome: Any, kwargs: dict,
            workers: int, address: Optional[str]) -> dict:
    from ..batch.ray_executor import _import_ray, _start

    ray = _import_ray()
    started = _start(ray, workers, address)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_blame_one)
        refs = {r: remote.remote(opener, url, specs, r, outcome, kwargs) for r in run_ids}
        return {r: ray.get(ref) for r, ref in refs.items()}
    finally:
        if started:
            ray.shutdown()


if __name__ == "__main__":  # a pool worker: one run's arguments in on stdin, its report out
    _args = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(pickle.dumps(_blame_one(*_args)))
