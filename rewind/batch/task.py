"""One fork of a batch, as a worker does it: fork the source run, diff it, judge its outcome.

The same function serves the local process pool and the Ray tasks. Each worker process keeps one
`Rewind` handle per store URL and imports each pipeline once, by its spec, and checks it is the
graph the caller saw. Everything returned is a plain dict (a `BatchRow`), and nothing raises out
of `fork_one`: a refusal or a bug becomes a `failed` or `skipped` row naming the run.
"""

from __future__ import annotations

import os
import resource
import socket
import time
from typing import Any, Optional

from ..errors import ForkError, RewindError
from ..keys import canonical_hash
from .report import BEYOND, CHANGED, FAILED, SAME, SKIPPED, WITHIN, BatchRow
from .spec import check_spec

_handles: dict = {}
_loaded: dict = {}


def worker_handle(request: Any) -> Any:
    """This process's handle on the request's store, with the request's pipelines registered."""
    rw = _handles.get(request.url)
    if rw is None:
        rw = _handles[request.url] = request.opener(request.url)
    for name, spec in request.specs.items():
        key = (request.url, name, spec)
        if key not in _loaded:
            rw.register(check_spec(spec, name, request.graph_ids[name]))
            _loaded[key] = True
    return rw


def close_handles() -> None:
    for rw in _handles.values():
        rw.close()
    _handles.clear()
    _loaded.clear()


def peak_rss_kb() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux


def _last_values(run: Any, fields: list) -> dict:
    """{field: hash of the value the run last wrote to it}; a dry-run step wrote no real value,
    so it counts only when no real step wrote the field."""
    out, fallback = {}, {}
    for step in run.steps:
        written = [f for f in fields if f in step.output_refs]
        if not written:
            continue
        target = fallback if step.status == "dry-run" else out
        values = step.outputs
        for f in written:
            target[f] = canonical_hash(values.get(f), f)
    return {**{f: h for f, h in fallback.items() if f not in out}, **out}


def _verdict(diff: Any, outcome: str) -> Optional[str]:
    if outcome == SAME:
        return WITHIN
    labels = [r.noise for r in diff.rows if r.identical is False and r.noise]
    if BEYOND in labels:
        return BEYOND
    return WITHIN if labels else None


def _row(run_id: str, started: float, **fields: Any) -> dict:
    row = BatchRow(run_id=run_id, elapsed_ms=round((time.perf_counter() - started) * 1000, 3),
                   worker=f"{socket.gethostname()} pid {os.getpid()}", worker_rss_kb=peak_rss_kb(),
                   **fields)
    return row.to_dict()


def fork_one(request: Any, run_id: str) -> dict:
    """Fork `run_id` at `request.at` with the request's change; a `BatchRow` as a dict."""
    started = time.perf_counter()
    try:
        rw = worker_handle(request)
        source = rw.get_run(run_id)
    except RewindError as e:
        return _row(run_id, started, outcome=FAILED, reason=str(e))
    if source.status == "completed" and not any(s.node == request.at for s in source.steps):
        path = " → ".join(s.node for s in source.steps) or "no steps"
        return _row(run_id, started, outcome=SKIPPED,
                    reason=f"run {run_id} never reached {request.at!r} (it ran {path})")
    try:
        fork = rw.fork(run_id, at=request.at, edit=request.edit or None,
                       params=request.params or None)
    except ForkError as e:  # stopped before the node, or an edit that steers Burr elsewhere
        return _row(run_id, started, outcome=SKIPPED, reason=str(e))
    except RewindError as e:
        return _row(run_id, started, outcome=FAILED, reason=str(e))
    except Exception as e:  # a bug, not the user's input: keep the batch going, name it
        return _row(run_id, started, outcome=FAILED,
                    reason=f"fork of run {run_id} raised {type(e).__name__}: {e}")
    base = dict(run_id=run_id, fork_id=fork.id, status=str(fork.status),
                tokens_spent=int(fork.total_tokens), tokens_saved=int(fork.tokens_saved),
                executed=[s.node for s in fork.steps if s.status == "executed"])
    try:
        diff = rw.diff(run_id, fork.id, noise_samples=request.noise_samples)
    except RewindError as e:
        return _row(started=started, outcome=FAILED, reason=f"diff failed: {e}", **base)
    base["first_divergence"] = diff.first_divergence
    if fork.status != "completed":
        failed = next((s for s in fork.steps if s.status == "failed"), None)
        why = (f"{failed.node} failed: {failed.error}" if failed is not None
               else fork.error or f"the fork ended {fork.status}")
        return _row(started=started, outcome=FAILED, reason=why, **base)
    fields = [request.outcome] if request.outcome else list(request.outcome_fields.get(source.pipeline, []))
    a, b = _last_values(source, fields), _last_values(fork, fields)
    changed = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
    outcome = CHANGED if changed else SAME
    reason = f"{', '.join(changed)} changed" if changed else ""
    verdict = _verdict(diff, outcome) if request.noise_samples else None
    return _row(started=started, outcome=outcome, reason=reason, verdict=verdict,
                outcome_fields=fields, **base)
