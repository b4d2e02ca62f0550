"""A batch before it runs: which source runs, which pipelines (by import spec), the one change,
all checked in the caller's process, so bad input is refused before any fork is written.

`prepare(...)` turns the arguments of `batch_fork` into a `BatchRequest` (what every worker gets,
plain and picklable) and the ordered list of source run ids. `plan_batch(...)` also reads each
source run to say how many reach the fork node, which nodes may re-run and an upper bound on
the tokens: the fork plan the dashboard and `rewind batch --plan` show first.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Optional

from ..keys import SIDE_EFFECT
from ..engine import Pipeline
from ..errors import InvalidRequest, RewindError
from ..keys import canonical_hash
from .spec import pipeline_from_spec, resolve_spec

PAGE = 500
MAX_RUNS = 1_000_000
MAX_NOISE_SAMPLES = 200


@dataclasses.dataclass
class BatchRequest:
    """The change, and how a worker finds the store and the pipelines (no live objects)."""

    url: str
    at: str
    edit: dict
    params: dict
    outcome: Optional[str]
    noise_samples: int
    specs: dict        # pipeline name -> import spec
    graph_ids: dict    # pipeline name -> graph id the caller saw
    outcome_fields: dict  # pipeline name -> fields compared when `outcome` is None
    # the caller's handle class (`rewind.Rewind` or a subclass), pickled by its qualified name:
    # a worker opens the store with the same class, and this package never imports the API
    opener: Any = None


def _roots(rw: Any, pipeline: str, status: Optional[str], limit: Optional[int]) -> list:
    """Original runs (no forks: a second batch must select the same runs), newest first."""
    out, offset = [], 0
    want = MAX_RUNS if limit is None else limit
    while len(out) < want:
        page = rw.list_runs(pipeline=pipeline, status=status, limit=PAGE, offset=offset)
        out.extend(r for r in page if r.parent_id is None)
        if len(page) < PAGE:
            break
        offset += PAGE
    return out[:want]


def _check_limit(limit: Any) -> Optional[int]:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_RUNS:
        raise InvalidRequest(f"limit must be a positive integer up to {MAX_RUNS:,}, not {limit!r}",
                             field="limit")
    return limit


def select_runs(rw: Any, runs: Optional[list], pipeline: Any, status: Optional[str],
                limit: Optional[int]) -> tuple:
    """(run summaries in batch order, {pipeline name: Pipeline}) for the batch's sources."""
    limit = _check_limit(limit)
    chosen: Optional[Pipeline] = None
    if pipeline is not None:
        if isinstance(pipeline, str) and ":" in pipeline:
            chosen = pipeline_from_spec(rw, pipeline)
        else:
            chosen = rw.pipeline(pipeline)
    if runs is not None:
        if isinstance(runs, str) or not all(isinstance(r, str) and r for r in runs):
            raise InvalidRequest("runs must be a list of run ids (strings)", field="runs")
        ids = list(dict.fromkeys(runs))[:limit] if limit else list(dict.fromkeys(runs))
        if not ids:
            raise InvalidRequest("runs is empty: name at least one run id", field="runs")
        summaries = [rw.get_run(i) for i in ids]  # NotFound names the missing run
        if chosen is not None:
            other = [r.id for r in summaries if r.pipeline != chosen.name]
            if other:
                raise InvalidRequest(f"run {other[0]} is a run of another pipeline than "
                                     f"{chosen.name!r}; drop it or the pipeline filter", run_id=other[0])
    elif chosen is not None:
        summaries = _roots(rw, chosen.name, status, limit)
    else:
        raise InvalidRequest("name the source runs: runs=[ids] or pipeline=NAME "
                             "(the CLI: --runs ID,... or --pipeline P)", field="runs")
    pipelines = {}
    for name in dict.fromkeys(r.pipeline for r in summaries):
        pipelines[name] = chosen if chosen is not None and chosen.name == name else rw.pipeline(name)
    return summaries, pipelines


def default_outcome_fields(pipeline: Pipeline) -> list:
    """The writes of the pipeline's last non-side-effect node in graph order: a side effect is
    dry-run in a fork, so its writes say nothing about the run's result."""
    last = None
    for node in pipeline.actions:
        if pipeline.policy(node).determinism != SIDE_EFFECT:
            last = node
    return pipeline.writes(last) if last else []


def _check_change(pipeline: Pipeline, at: str, edit: dict, params: dict) -> None:
    reads = set(pipeline.reads(at))  # NotFound names the node and the pipeline's nodes
    not_read = sorted(set(edit) - reads)
    if not_read:
        raise InvalidRequest(f"node {at!r} of pipeline {pipeline.name!r} does not read "
                             f"{', '.join(map(repr, not_read))}; it reads {sorted(reads) or 'nothing'}",
                             node=at, field=not_read[0])
    unknown = sorted(set(params) - pipeline.param_names(at))
    if unknown:
        raise InvalidRequest(f"node {at!r} has no parameter {', '.join(map(repr, unknown))}; its "
                             f"parameters are {sorted(pipeline.param_names(at)) or 'none'}",
                             node=at, field=unknown[0])


def _checked_values(values: Any, what: str) -> dict:
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise InvalidRequest(f"{what} must be a dict, not {type(values).__name__}", field=what)
    for k, v in values.items():
        canonical_hash(v, f"{what}.{k}")  # UnhashableValue names the field
    try:
        pickle.dumps(values)
    except Exception as e:
        raise InvalidRequest(f"{what} cannot be sent to worker processes ({type(e).__name__}: "
                             f"{e}); use plain values", field=what) from None
    return dict(values)


def prepare(rw: Any, at: str, *, runs=None, pipeline=None, status="completed", limit=None,
            edit=None, params=None, outcome=None, noise_samples=0) -> tuple:
    """(BatchRequest, source runs in order); raises `RewindError` on bad input, writing nothing."""
    if not isinstance(at, str) or not at:
        raise InvalidRequest("at must name the node to fork at", field="at")
    edit, params = _checked_values(edit, "edit"), _checked_values(params, "params")
    if isinstance(noise_samples, bool) or not isinstance(noise_samples, int) \
            or not 0 <= noise_samples <= MAX_NOISE_SAMPLES:
        raise InvalidRequest(f"noise_samples must be an integer from 0 to {MAX_NOISE_SAMPLES}, "
                             f"not {noise_samples!r}", field="noise_samples")
    if outcome is not None and (not isinstance(outcome, str) or not outcome):
        raise InvalidRequest("outcome must name a state field", field="outcome")
    summaries, pipelines = select_runs(rw, runs, pipeline, status, limit)
    for p in pipelines.values():
        _check_change(p, at, edit, params)
        if outcome is not None and not any(outcome in p.writes(n) for n in p.actions):
            raise InvalidRequest(f"no node of pipeline {p.name!r} writes {outcome!r}: it cannot be "
                                 "the outcome", field="outcome")
    specs = {name: resolve_spec(p) for name, p in pipelines.items()}
    request = BatchRequest(
        url=rw.url, at=at, edit=edit, params=params, outcome=outcome,
        noise_samples=noise_samples, specs=specs,
        graph_ids={n: p.graph_id for n, p in pipelines.items()},
        outcome_fields={n: default_outcome_fields(p) for n, p in pipelines.items()},
        opener=type(rw),
    )
    return request, summaries


# --- the fork plan -------------------------------------------------------------------------------

@dataclasses.dataclass
class BatchPlan:
    """What a batch would do, read from the source runs (nothing is forked)."""

    at: str
    run_ids: list                 # every selected source run, in batch order
    reaching: list                # those that reached `at`
    skipped: dict                 # run id -> why it would be skipped
    nodes: list                   # nodes that may re-run: `at` and whatever ran after it
    estimated_tokens: int         # upper bound: what the steps from `at` on first cost
    full_rerun_tokens: int        # what re-running every selected run from scratch cost
    specs: dict

    @property
    def runs(self) -> int:
        return len(self.run_ids)


def _original_cost(step: Any) -> int:
    return int(step.tokens or 0) + int(step.tokens_saved or 0)


def plan_batch(rw: Any, at: str, *, runs=None, pipeline=None, status="completed", limit=None,
               edit=None, params=None, outcome=None) -> BatchPlan:
    """The fork plan of a batch: checked exactly as `batch_fork` checks it, nothing written."""
    request, summaries = prepare(rw, at, runs=runs, pipeline=pipeline, status=status, limit=limit,
                                 edit=edit, params=params, outcome=outcome)
    reaching, skipped, nodes = [], {}, {}
    estimated = full = 0
    for summary in summaries:
        try:
            run = rw.get_run(summary.id)
        except RewindError as e:
            skipped[summary.id] = str(e)
            continue
        full += sum(_original_cost(s) for s in run.steps)
        index = next((i for i, s in enumerate(run.steps) if s.node == at), None)
        if index is None:
            skipped[run.id] = f"run {run.id} never reached {at!r}"
            continue
        reaching.append(run.id)
        for s in run.steps[index:]:
            nodes[s.node] = True
            estimated += _original_cost(s)
    return BatchPlan(at=at, run_ids=[s.id for s in summaries], reaching=reaching, skipped=skipped,
                     nodes=list(nodes), estimated_tokens=estimated, full_rerun_tokens=full,
                     specs=request.specs)
