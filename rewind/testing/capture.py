"""Taking a snapshot of a stored run: `snapshot_run(rw, run_id, repeats=3) -> dict`.

Owns what goes into the file beside the recorded values: the initial state (rebuilt from the
first step: the state after it, less what it wrote, plus what it read), the edits a fork made
along the way (a read value the recorded trajectory did not produce), each step's model calls
(a cache hit made none, so they come from the run that executed it), and the determinism audit.

The audit re-executes every step `repeats` times on its recorded inputs, as `rw.audit` does
(no node cache; side-effect nodes never run), through the configured model. A step whose
samples all reproduce the recorded output hash is stable, and the model and tool calls of a
reproducing sample are valid recordings for it (this is how a cache-hit step gets its tool
calls). An unstable step keeps its distinct sampled outputs as the noise band's baseline.
Nothing is written to the store.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any, Callable, Optional

from ..keys import SIDE_EFFECT, policy_of
from ..analysis.audit import ProgressCounter, runtime_recorded, sample_spec, varying_fields
from ..engine.node import execute_node
from ..errors import RewindError
from ..keys import canonical_hash
from ..model.metering import StepMeter
from ..models import RunStatus, Step
from .cassette import call_key, snapshot_call
from .format import FORMAT, VERSION, SnapshotError, encode_value, encode_values

SNAPSHOT_STATUSES = (RunStatus.COMPLETED, RunStatus.HALTED)
DEFAULT_REPEATS = 3


class ToolRecorder:
    """A step meter's `tool_store` that runs every tool and keeps what it returned."""

    def __init__(self) -> None:
        self.calls: list = []

    def tool_cache_get(self, tool: str, args_hash: str, ttl: Any, now: float):
        return None

    def tool_cache_put(self, tool: str, args_hash: str, result: Any, now: float) -> None:
        self.calls.append({"tool": tool, "args_hash": args_hash,
                           "result": encode_value(result, tool)})


def pipeline_spec_of(pipeline: Any) -> Optional[str]:
    """`module:attribute` of an imported module that holds this very Pipeline object."""
    found = []
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            if value is pipeline and not attr.startswith("_"):
                found.append((attr != "pipeline", len(name), f"{name}:{attr}"))
    return min(found)[2] if found else None


def initial_state(rw: Any, first: Step) -> dict:
    """The state the run started from: after the first step, less its writes, plus its reads."""
    after = rw.state_at(first) or {}
    written = set(first.outputs) | set(first.deleted)
    state = {k: v for k, v in after.items() if not k.startswith("__") and k not in written}
    state.update(first.inputs)
    return state


def _hash(value: Any) -> Optional[str]:
    try:
        return canonical_hash(value)
    except RewindError:
        return None


def sample_step(spec: Any, readable: dict, runtime: dict) -> dict:
    """One execution of a node on recorded values: its output hash, outputs, calls and tools
    (`error` for a failed attempt)."""
    tools = ToolRecorder()
    meter = StepMeter(node=spec.node, tool_store=tools)
    try:
        done = execute_node(spec.node, spec.runner, readable, spec.reads, spec.writes,
                            runtime, meter=meter)
        key = spec.output_hash(done.outputs, None, done.deleted)
    except Exception as e:  # a failed attempt is a sample too: the node is not stable
        return {"key": f"error:{type(e).__name__}: {e}", "outputs": None, "calls": [],
                "tools": [], "fields": {}}
    return {"key": key, "outputs": done.outputs, "calls": [snapshot_call(c) for c in meter.calls],
            "tools": tools.calls, "fields": spec.output_field_hashes(done.outputs)}


def audit_step(spec: Any, readable: dict, runtime: dict, recorded_hash: str, recorded_fields: dict,
               repeats: int, progress: Optional[ProgressCounter] = None) -> tuple:
    """(audit entry, calls, tools) of `repeats` samples of one step."""
    samples = []
    for _ in range(repeats):
        samples.append(sample_step(spec, readable, runtime))
        if progress is not None:
            progress.advance(spec.node)
    same = [s for s in samples if s["key"] == recorded_hash]
    calls = [c for s in same for c in s["calls"]]
    tools = [t for s in same for t in s["tools"]]
    distinct = {recorded_hash} | {s["key"] for s in samples}
    entry: dict = {"samples": repeats, "stable": len(distinct) == 1, "distinct": len(distinct)}
    if len(distinct) > 1:
        outcomes = [SimpleNamespace(field_hashes=recorded_fields)] + [
            SimpleNamespace(field_hashes=s["fields"]) for s in samples]
        entry["unstable_fields"] = varying_fields(outcomes, spec.writes)
        seen, baseline = {recorded_hash}, []
        for s in samples:
            if s["outputs"] is not None and s["key"] not in seen:
                seen.add(s["key"])
                baseline.append(encode_values(s["outputs"], f"{spec.node}.baseline"))
        entry["baseline"] = baseline
    return entry, calls, tools


def merge_calls(*groups: list) -> list:
    """Calls in order, each distinct request once per recorded answer."""
    out, seen = [], set()
    for group in groups:
        for c in group:
            ident = (call_key(c.get("api") or "", c.get("model") or "", c.get("messages"),
                              c.get("params") or {}), c.get("response_text"))
            if ident not in seen:
                seen.add(ident)
                out.append(c)
    return out


def merge_tools(*groups: list) -> list:
    out, seen = [], set()
    for group in groups:
        for t in group:
            if (t["tool"], t["args_hash"]) not in seen:
                seen.add((t["tool"], t["args_hash"]))
                out.append(t)
    return out


class _SourceCalls:
    """The model calls of the execution a cache-hit (or inherited) step reused."""

    def __init__(self, rw: Any):
        self.rw, self.runs = rw, {}

    def of(self, step: Step) -> list:
        if step.calls or not step.source_run:
            return [snapshot_call(c) for c in step.calls]
        if step.source_run not in self.runs:
            try:
                self.runs[step.source_run] = self.rw.get_run(step.source_run)
            except RewindError:
                self.runs[step.source_run] = None
        run = self.runs[step.source_run]
        for s in (run.steps if run is not None else []):
            if s.node == step.node and s.input_hash == step.input_hash and s.calls:
                return [snapshot_call(c) for c in s.calls]
        return []


def snapshot_run(rw: Any, run_id: str, *, repeats: int = DEFAULT_REPEATS,
                 pipeline_spec: Optional[str] = None,
                 on_progress: Optional[Callable[[int, int, str], None]] = None) -> dict:
    """The snapshot document of a completed or halted run (write it with `format.write`)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 0:
        raise SnapshotError(f"repeats must be a non-negative integer, not {repeats!r}")
    run = rw.get_run(run_id)
    if run.status not in SNAPSHOT_STATUSES:
        raise SnapshotError(f"run {run_id} is {run.status}: snapshot a completed or halted run "
                            "(a regression test needs a trajectory that ended well)", run_id=run_id)
    pipeline = rw.pipeline(run.pipeline)
    spec_text = pipeline_spec or pipeline_spec_of(pipeline)
    if not spec_text:
        raise SnapshotError(f"cannot tell which module holds pipeline {pipeline.name!r}; pass "
                            "pipeline_spec='package.module:attribute' (--pipeline on the CLI)",
                            run_id=run_id)
    steps = [s for s in run.steps if s.status != "failed"]  # failed attempts were retried
    world = initial_state(rw, steps[0]) if steps else {}
    doc: dict = {
        "format": FORMAT, "version": VERSION,
        "pipeline": {"name": pipeline.name, "spec": spec_text, "entrypoint": pipeline.entrypoint,
                     "nodes": list(pipeline.actions), "edges": [list(e) for e in pipeline.edges]},
        "run": {"id": run.id, "status": str(run.status)},
        "audit": {"repeats": repeats},
        "initial_state": encode_values(world, "initial_state"),
        "steps": [],
    }
    sources = _SourceCalls(rw)
    progress = ProgressCounter(on_progress, len(steps) * repeats)
    for s in steps:
        inner = pipeline.action(s.node)
        policy = policy_of(inner)
        inputs = s.inputs
        edit = {k: v for k, v in inputs.items() if k not in world or _hash(world[k]) != _hash(v)}
        world.update(edit)
        outputs = s.outputs
        entry = {
            "node": s.node, "occurrence": s.occurrence, "determinism": policy.determinism,
            "input_hash": s.input_hash, "output_hash": s.output_hash,
            "fields": dict(s.field_hashes or {}), "units": dict(s.units or {}),
            "params": s.params, "overrides": encode_values(run.params.get(s.node) or {}, "params"),
            "runtime_inputs": encode_values(s.runtime_inputs, f"{s.node}.inputs"),
            "edit": encode_values(edit, f"{s.node}.edit"),
            "outputs": encode_values(outputs, s.node), "deleted": sorted(s.deleted),
            "calls": sources.of(s), "tools": [], "audit": {"stable": None, "samples": 0},
        }
        if repeats and policy.determinism != SIDE_EFFECT and runtime_recorded(s, inner):
            spec = sample_spec(s.node, inner, s.params)
            audit, calls, tools = audit_step(spec, dict(inputs), s.runtime_inputs, s.output_hash,
                                             spec.output_field_hashes(outputs), repeats, progress)
            entry["audit"] = audit
            entry["calls"] = merge_calls(entry["calls"], calls)
            entry["tools"] = merge_tools(tools)
        else:
            progress.advance(s.node, repeats)
        doc["steps"].append(entry)
        world.update({k: v for k, v in outputs.items() if k in inner.writes})
        for k in s.deleted:
            world.pop(k, None)
    return doc
