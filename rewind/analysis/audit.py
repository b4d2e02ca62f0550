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

import dataclasses
import logging
from typing import Any, Callable, Optional

from ..keys import SIDE_EFFECT, policy_of
from ..engine.keys import NodeSpec, node_spec, recorded_overrides
from ..engine.node import execute_node
from ..errors import InvalidRequest, RewindError
from ..model.metering import StepMeter
from ..models import AuditReport, AuditRow, Run, Step

logger = logging.getLogger("rewind")

MAX_REPEATS = 1000
ERROR_FIELD_HASH = "<error>"   # prefix of the per-field "hash" of each write of a failed attempt
MISSING_FIELD_HASH = "<missing>"


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


def _output_spec(policy: Any, node: str) -> NodeSpec:
    return NodeSpec(node, None, policy, {}, None, "", {}, "{}", {})


def output_hash_of(outputs: dict, policy: Any, node: str = "") -> str:
    """The output hash the engine records for these written fields under this policy."""
    return _output_spec(policy, node).output_hash(outputs)


def outcome_of(step: Step, policy: Any, writes: list) -> Outcome:
    """The recorded outcome of a step (its output hash, or its error)."""
    if step.status == "failed" or (step.output_hash is None and step.error):
        return _failure(step.error or "failed", writes)
    outputs = step.outputs
    spec = _output_spec(policy, step.node)
    return Outcome(key=step.output_hash or spec.output_hash(outputs),
                   field_hashes=spec.output_field_hashes(outputs), outputs=outputs)


# --- executing one node outside the engine, through the engine's own key and execution ------

def sample_spec(node: str, inner: Any, params: dict) -> NodeSpec:
    """The node's spec with a step's recorded params re-applied, as the engine binds a fork's."""
    return node_spec(node, inner, recorded_overrides(inner, params))


def recomputed_input_hash(spec: NodeSpec, readable: dict, runtime: Optional[dict] = None) -> tuple:
    """(input_hash, code fingerprint) the engine would compute for these recorded values."""
    fields = spec.field_hashes(readable, None, runtime)
    return spec.input_hash(fields), fields["code"]


def runtime_recorded(step: Step, inner: Any) -> bool:
    """Whether a step can be executed again: every runtime input it took was recorded and it
    needs nothing only a live Burr application has (`__context`, `__tracer`)."""
    required, optional = getattr(inner, "optional_and_required_inputs", (set(), set()))
    if any(str(k).startswith("__") for k in set(required) | set(optional)):
        return False
    took = {k.split(":", 1)[1] for k in (step.field_hashes or {}) if k.startswith("input:")}
    return took <= set(step.runtime_refs or {})


def sample_node(spec: NodeSpec, readable: dict, runtime: Optional[dict] = None) -> Outcome:
    """Execute the node once on a private copy of its recorded values, with no node cache and
    no tool cache, as the engine executes it. Never raises for a node failure."""
    meter = StepMeter(node=spec.node, tool_store=None)
    try:
        done = execute_node(spec.node, spec.runner, readable, spec.reads, spec.writes,
                            runtime, meter=meter)
        key = spec.output_hash(done.outputs)
        fields = spec.output_field_hashes(done.outputs)
    except Exception as e:  # a failed attempt is an outcome, counted with its error
        return _failure(f"{type(e).__name__}: {e}", spec.writes, meter.tokens)
    return Outcome(key=key, field_hashes=fields, outputs=done.outputs, tokens=meter.tokens)


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
        elif not runtime_recorded(step, inner):
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

        spec = sample_spec(step.node, inner, step.params)
        runtime = step.runtime_inputs
        status = "audited"
        try:
            input_hash, code = recomputed_input_hash(spec, inputs, runtime)
        except RewindError:
            input_hash, code = None, None
        if step.input_hash and input_hash != step.input_hash:
            recorded_code = (step.field_hashes or {}).get("code")
            status = "code-changed" if recorded_code and recorded_code != code else "inputs-differ"

        outcomes = [recorded]
        for _ in range(repeats):
            outcomes.append(sample_node(spec, inputs, runtime))
            progress.advance(step.node)
        distinct = len({o.key for o in outcomes})
        rows.append(AuditRow(
            node=step.node, occurrence=step.occurrence, stable=distinct == 1,
            distinct_outputs=distinct,
            unstable_fields=varying_fields(outcomes, writes) if distinct > 1 else [],
            status=status, samples=repeats,
        ))
    return AuditReport(run_id=run.id, repeats=repeats, rows=rows)
