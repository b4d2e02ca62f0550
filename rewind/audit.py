"""Determinism audit: re-execute every step of a run on its exact recorded inputs.

`audit_run(rw, run, repeats)` runs each step of the trajectory (inherited steps included)
`repeats` more times on the read values and effective params it recorded, with no node cache
and no tool cache (`StepMeter(tool_store=None)`, so `rewind.tool` calls really execute), and
counts how many distinct outputs the recorded output plus the samples gave. Output hashes are
computed exactly as the engine computes them (the node policy's `ignore=` respected), so a
node that only leaks an ignored timestamp is stable, and one that leaks a counter is not.

Nothing is written: no run, no step row, no cache or tool-cache entry, no blob, no alarm. The
audit never builds a Burr application; it calls the pipeline's action on a `_ReadGuard` like the
engine's wrapper does, outside any `ExecutionContext`.

`AuditRow.status`:
  - `audited`       re-executed on inputs that hash exactly to the recorded input hash
  - `code-changed`  re-executed, but the node's code fingerprint differs from the one recorded:
                    the samples test today's code on the recorded inputs
  - `inputs-differ` re-executed, but the recomputed input hash differs from the recorded one
                    for another reason (a param that did not round-trip through JSON)
  - `dry-run`       a side-effect node: never executed (`stable` None, one distinct output)
  - `unavailable`   the recorded inputs cannot be loaded (purged blobs) or the step took
                    runtime inputs that are not recorded; nothing was executed

The sampling helpers (`sample_node`, `outcome_of`, `output_hash_of`) are shared with
`rewind.noise`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Any, Callable, Optional

from burr.core import State

from .action import SIDE_EFFECT, node_params, policy_of
from .engine import _ReadGuard
from .errors import InvalidRequest, RewindError
from .hashing import (
    canonical_hash, canonical_parts, code_fingerprint, combine, join_parts, sha256_hex,
    strip_ignored,
)
from .metering import StepMeter, metering
from .models import AuditReport, AuditRow, Run, Step

logger = logging.getLogger("rewind")

MAX_REPEATS = 1000
ERROR_FIELD_HASH = "<error>"   # prefix of the per-field "hash" of each write of a failed attempt
MISSING_FIELD_HASH = "<missing>"


# --- hashing, exactly as the engine does --------------------------------------------------------

def output_hash_of(outputs: dict, policy: Any, node: str = "") -> str:
    """The output hash the engine records for these written fields under this policy."""
    if policy.ignore:
        stripped = {k: v for k, v in outputs.items() if k not in policy.ignore}
        return canonical_hash(strip_ignored(stripped, policy.ignore))
    return sha256_hex(join_parts(canonical_parts(outputs, node)))


def output_field_hashes(outputs: dict, policy: Any) -> dict:
    """Per-field hashes consistent with `output_hash_of`: ignored fields (top level) are left
    out and ignored sub-keys stripped, so a field varies here iff the output hash varies."""
    if policy.ignore:
        stripped = {k: v for k, v in outputs.items() if k not in policy.ignore}
        stripped = strip_ignored(stripped, policy.ignore)
    else:
        stripped = dict(outputs)
    return {k: canonical_hash(v, k) for k, v in stripped.items() if not k.startswith("__")}


@dataclasses.dataclass
class Outcome:
    """One execution (or the recorded one) of a node: its output identity and values."""

    key: str                 # the output hash, or "error:<message>" for a failed attempt
    field_hashes: dict       # per written field; "<error>message" for each write of a failure
    outputs: Optional[dict]  # the written values (None for a failure)
    error: Optional[str] = None
    tokens: int = 0

    @property
    def failed(self) -> bool:
        return self.error is not None


def _failure(error: str, writes: list, tokens: int = 0) -> Outcome:
    return Outcome(
        key=f"error:{error}", field_hashes={w: f"{ERROR_FIELD_HASH}{error}" for w in writes},
        outputs=None, error=error, tokens=tokens,
    )


def outcome_of(step: Step, policy: Any, writes: list) -> Outcome:
    """The recorded outcome of a step (its output hash, or its error)."""
    if step.status == "failed" or (step.output_hash is None and step.error):
        return _failure(step.error or "failed", writes)
    outputs = step.outputs
    return Outcome(
        key=step.output_hash or output_hash_of(outputs, policy, step.node),
        field_hashes=output_field_hashes(outputs, policy), outputs=outputs,
    )


# --- executing one node outside the engine ----------------------------------------------------

def _fn_of(inner: Any) -> Callable:
    fn = getattr(inner, "_originating_fn", None) or getattr(inner, "fn", None)
    return fn if fn is not None else type(inner)  # a class-based action: its class source


def bind_params(inner: Any, params: dict) -> tuple:
    """(runner, effective params): `inner` bound with the recorded params that differ from its
    defaults (canonically), as the engine binds a fork's overrides with `with_params`."""
    defaults = node_params(inner)
    overrides = {}
    for k, v in (params or {}).items():
        if k in defaults:
            try:
                if canonical_hash(defaults[k]) == canonical_hash(v):
                    continue
            except RewindError:
                pass
        overrides[k] = v
    effective = {**defaults, **overrides}
    runner = inner.with_params(**overrides) if overrides else inner
    return runner, effective


def input_hash_for(node: str, inner: Any, read_values: dict, params: dict) -> tuple:
    """(input_hash, code fingerprint) the engine would compute for these reads and params."""
    policy = policy_of(inner)
    code = code_fingerprint(_fn_of(inner), policy.version)
    read_hashes = {}
    for k, v in read_values.items():
        if policy.ignore:
            if k in policy.ignore:
                continue
            v = strip_ignored(v, [n.split(".", 1)[1] if n.startswith(k + ".") else n for n in policy.ignore])
        read_hashes[f"read:{k}"] = canonical_hash(v, k)
    param_hashes = {f"param:{k}": canonical_hash(v, f"{node}.{k}") for k, v in params.items()}
    fields = {"code": code, **read_hashes, **param_hashes}
    return combine({"node": node, "fields": fields}), code


def sample_node(node: str, inner: Any, runner: Any, inputs: dict) -> Outcome:
    """Execute the node once on a private copy of `inputs`, with no node cache and no tool
    cache, through the same `_ReadGuard` the engine uses. Never raises for a node failure."""
    policy = policy_of(inner)
    reads, writes = list(inner.reads), list(inner.writes)
    values = copy.deepcopy(inputs)  # a node mutating a nested input must not leak into the next sample
    guard = _ReadGuard(values, node, reads, values.keys())
    meter = StepMeter(node=node, tool_store=None)
    try:
        with metering(meter):
            if getattr(runner, "single_step", False):
                out = runner.run_and_update(guard)
            else:  # a class-based Burr action: run, then its reducer (as the engine does)
                out = runner.update(runner.run(guard), guard)
        new_state = out[1] if isinstance(out, tuple) and len(out) == 2 else out
        if not isinstance(new_state, State):
            raise RewindError(
                f"node {node!r} returned {type(new_state).__name__}; return a burr State "
                "(state.update(...)) or (result, state)"
            )
        outputs = {w: new_state[w] for w in writes if w in new_state}
        key = output_hash_of(outputs, policy, node)
        fields = output_field_hashes(outputs, policy)
    except Exception as e:  # a failed attempt is an outcome, counted with its error
        return _failure(f"{type(e).__name__}: {e}", writes, meter.tokens)
    return Outcome(key=key, field_hashes=fields, outputs=outputs, tokens=meter.tokens)


def varying_fields(outcomes: list, writes: list) -> list:
    """Written fields whose per-field hash is not the same across all outcomes."""
    names = []
    seen = set()
    for name in list(writes) + sorted({k for o in outcomes for k in o.field_hashes}):
        if name in seen:
            continue
        seen.add(name)
        hashes = {o.field_hashes.get(name, MISSING_FIELD_HASH) for o in outcomes}
        # a field absent from every successful outcome (e.g. ignored) never varies
        if hashes == {MISSING_FIELD_HASH}:
            continue
        if len(hashes) > 1:
            names.append(name)
    return names


# --- the audit ----------------------------------------------------------------------------------

class ProgressCounter:
    """Counts samples done toward `total` for an `on_progress(done, total, node)` display; a
    failing display never breaks the work it reports on."""

    def __init__(self, on_progress: Optional[Callable[[int, int, str], None]], total: int):
        self.on_progress, self.total, self.done = on_progress, total, 0

    def advance(self, node: str, n: int = 1) -> None:
        self.done += n
        if self.on_progress is None:
            return
        try:
            self.on_progress(self.done, self.total, node)
        except Exception:
            logger.exception("on_progress callback failed")


def audit_run(rw: Any, run: Run, repeats: int = 3,
              on_progress: Optional[Callable[[int, int, str], None]] = None) -> AuditReport:
    """Re-execute every step of `run` `repeats` times on its recorded inputs; write nothing."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InvalidRequest(f"repeats must be a positive integer, not {repeats!r}")
    if repeats > MAX_REPEATS:
        raise InvalidRequest(f"repeats must be at most {MAX_REPEATS}, not {repeats}")
    pipeline = rw.pipeline(run.pipeline)
    steps = list(run.steps)
    progress = ProgressCounter(on_progress, len(steps) * repeats)

    rows = []
    for step in steps:
        inner = pipeline.action(step.node)
        policy = policy_of(inner)
        writes = list(inner.writes)
        skipped = None
        if policy.determinism == SIDE_EFFECT:
            skipped = "dry-run"
        elif any(k.startswith("input:") for k in step.field_hashes or {}):
            skipped = "unavailable"  # ran on runtime inputs that were not recorded
        else:
            try:
                inputs = dict(step.inputs)
                recorded = outcome_of(step, policy, writes)
            except RewindError as e:
                logger.warning("audit: step %s#%s of run %s unavailable: %s",
                               step.node, step.occurrence, run.id, e)
                skipped = "unavailable"
        if skipped:
            rows.append(AuditRow(step.node, step.occurrence, None, 1, [], skipped, 0))
            progress.advance(step.node, repeats)
            continue

        runner, params = bind_params(inner, step.params)
        status = "audited"
        try:
            input_hash, code = input_hash_for(step.node, inner, inputs, params)
        except RewindError:
            input_hash, code = None, None
        if step.input_hash and input_hash != step.input_hash:
            recorded_code = (step.field_hashes or {}).get("code")
            status = "code-changed" if recorded_code and recorded_code != code else "inputs-differ"

        outcomes = [recorded]
        for _ in range(repeats):
            outcomes.append(sample_node(step.node, inner, runner, inputs))
            progress.advance(step.node)
        distinct = len({o.key for o in outcomes})
        rows.append(AuditRow(
            node=step.node, occurrence=step.occurrence, stable=distinct == 1,
            distinct_outputs=distinct,
            unstable_fields=varying_fields(outcomes, writes) if distinct > 1 else [],
            status=status, samples=repeats,
        ))
    return AuditReport(run_id=run.id, repeats=repeats, rows=rows)
