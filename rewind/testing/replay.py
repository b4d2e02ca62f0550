"""Replaying a snapshot against today's code, offline: `replay(path) -> ReplayResult`.

Walks the recorded trajectory node by node on a state rebuilt from the snapshot (its initial
state, each step's recorded edit, then what each replayed step wrote), outside Burr, as the
audit does. At each step, with today's code and the step's recorded params and runtime inputs:

  - the current graph must lead to the recorded node (else the trajectory diverged there);
  - a side-effect node is never performed: its recorded outputs stand in (a dry run);
  - a step whose input hash is unchanged is served its recorded outputs (a cache hit);
  - any other step is re-executed, with its model and tool calls served from the snapshot
    (`Cassette`), and judged: a deterministic node must reproduce its recorded output hash
    exactly; a nondeterministic one (the snapshot's audit found it unstable, or a `metric` is
    given for it) must fall within the noise band of its recorded samples (`rewind.analysis.
    noise`'s judgement) or pass the metric.

Why a step re-ran is named as the engine names a miss (the changed code unit, read field,
param or input). A node that raises, a call the snapshot lacks (record mode none) or a graph
that goes elsewhere stops the replay there. In record modes `new` and `all` the replay's
trajectory becomes the new snapshot (`ReplayResult.document`): re-executed steps get their new
hashes, outputs, calls and a fresh audit through the configured model.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Optional

from burr.core import State

from ..keys import SIDE_EFFECT, changed_fields, policy_of
from ..analysis import noise
from ..analysis.audit import Outcome
from ..engine import load_pipeline_spec
from ..engine.keys import node_spec
from ..engine.node import execute_node
from ..errors import RewindError
from ..model.metering import StepMeter
from . import format as fmt
from .capture import audit_step, merge_calls, merge_tools
from .cassette import ALL, NONE, Cassette, call_key, snapshot_call

SAME, WITHIN, DIVERGED, FAILED, NOT_COMPARED = (
    "same", "within noise", "diverged", "failed", "not compared")


@dataclasses.dataclass
class NodeReport:
    """What happened to one recorded step in the replay."""

    node: str
    occurrence: int
    index: int
    action: str                   # served | executed | dry-run | not reached
    verdict: str                  # same | within noise | diverged | failed | not compared
    reason: str = ""              # why it re-ran (or did not)
    detail: str = ""              # the judgement: noise band, metric, error
    recorded_hash: Optional[str] = None
    replayed_hash: Optional[str] = None
    recorded_outputs: dict = dataclasses.field(default_factory=dict)
    outputs: dict = dataclasses.field(default_factory=dict)
    new_calls: list = dataclasses.field(default_factory=list)      # made now, not recorded
    dropped_calls: list = dataclasses.field(default_factory=list)  # recorded, not made now
    missing: list = dataclasses.field(default_factory=list)        # MissingCall errors
    noise: dict = dataclasses.field(default_factory=dict)
    entry: dict = dataclasses.field(default_factory=dict, repr=False)  # the snapshot step now
    # (spec, readable, runtime) of a re-executed step: what a re-recording audits it on
    rerun: Optional[tuple] = dataclasses.field(default=None, repr=False)
    entry_was: dict = dataclasses.field(default_factory=dict, repr=False)  # as recorded

    @property
    def ok(self) -> bool:
        return self.verdict in (SAME, WITHIN, NOT_COMPARED)


@dataclasses.dataclass
class ReplayResult:
    path: Optional[str]
    mode: str
    nodes: list
    steps_total: int = 0
    problem: str = ""             # a trajectory-level failure (graph, pipeline), if any
    document: Optional[dict] = None   # the re-recorded snapshot (record modes)
    state: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No divergence; in a record mode only an error (not a changed output) is a failure."""
        if self.problem:
            return False
        if self.mode == NONE:
            return all(n.ok for n in self.nodes)
        return all(n.verdict != FAILED for n in self.nodes)

    @property
    def first_divergence(self) -> Optional[NodeReport]:
        return next((n for n in self.nodes if not n.ok), None)

    @property
    def changed(self) -> bool:
        """Did the replay behave differently from the recording anywhere?"""
        return bool(self.problem) or any(
            n.verdict != SAME or n.new_calls or n.dropped_calls for n in self.nodes if n.action != "served")

    def node(self, name: str, occurrence: int = 1) -> NodeReport:
        for n in self.nodes:
            if n.node == name and n.occurrence == occurrence:
                return n
        raise KeyError(f"the replay of {self.path or 'the snapshot'} has no step {name}#{occurrence}")

    def outputs(self, name: str, occurrence: int = 1) -> dict:
        """What the step wrote in the replay (served or re-executed)."""
        return self.node(name, occurrence).outputs

    def report(self) -> str:
        from .report import render

        return render(self)

    def check(self) -> "ReplayResult":
        """Raise AssertionError with the report unless the replay passed."""
        if not self.ok:
            raise AssertionError(self.report())
        return self


def load_pipeline(doc: dict, where: str) -> Any:
    spec = doc["pipeline"]["spec"]
    try:
        found = load_pipeline_spec(spec)
    except RewindError as e:
        raise fmt.SnapshotError(f"{where}: cannot load pipeline {spec!r}: {e}") from None
    name = doc["pipeline"].get("name")
    for p in found:
        if name is None or p.name == name:
            return p
    raise fmt.SnapshotError(f"{where}: {spec!r} holds no pipeline named {name!r}")


def _why(step: dict, fields: dict, units: dict, mode: str) -> str:
    parts = changed_fields(step.get("fields") or {}, fields, step.get("units") or {}, units)
    if parts:
        return f"{step['node']} ran again because " + "; ".join(parts)
    if mode == ALL:
        return f"{step['node']} re-executed: record mode all"
    return f"{step['node']} ran again: its input hash differs from the recorded one"


def _calls_delta(recorded: list, made: list) -> tuple:
    def key(c: dict) -> tuple:
        return (call_key(c.get("api") or "", c.get("model") or "", c.get("messages"),
                         c.get("params") or {}), c.get("response_text"))

    rec, now = [key(c) for c in recorded], [key(c) for c in made]
    return [c for c, k in zip(made, now) if k not in rec], [c for c, k in zip(recorded, rec) if k not in now]


def _judge(step: dict, spec: Any, outputs: dict, replayed_hash: str, recorded: dict,
           metric: Optional[Callable], method: Optional[str], margin: float) -> tuple:
    """(verdict, detail, noise detail) of a re-executed step."""
    if replayed_hash == step.get("output_hash"):
        return SAME, "reproduced its recorded output hash exactly", {}
    audit = step.get("audit") or {}
    baseline = [fmt.decode_values(b) for b in audit.get("baseline") or []]
    if metric is not None:
        return _by_metric(step["node"], metric, recorded, outputs, baseline, margin)
    if audit.get("stable") is not False:
        why = ("the snapshot's audit found it deterministic" if audit.get("stable")
               else "no audit marks it nondeterministic")
        return DIVERGED, f"deterministic node: its output hash changed ({why})", {}

    def outcome(values: dict, key: Optional[str] = None) -> Outcome:
        return Outcome(key=key or spec.output_hash(values),
                       field_hashes=spec.output_field_hashes(values), outputs=values)

    a = outcome(recorded, step.get("output_hash"))
    b = outcome(outputs, replayed_hash)
    # one judgement of the noise band for the whole product (the diff's `noise_samples`)
    label, detail = noise._judge(a, b, [outcome(v) for v in baseline], spec.writes,
                                 noise.resolve_method(method), margin)
    if label == "within noise":
        return WITHIN, _noise_text(detail, len(baseline), "within"), detail
    return DIVERGED, _noise_text(detail, len(baseline), "beyond"), detail


def _noise_text(detail: dict, samples: int, where: str) -> str:
    sim, field = detail.get("b_similarity"), detail.get("field")
    if sim is not None:
        low = min(detail.get("baseline_similarities") or [0.0])
        return (f"nondeterministic node, {where} the noise band of {samples} recorded samples: "
                f"`{field}` is {sim:.3f} similar to the recording; the samples were at least "
                f"{low:.3f} (margin {detail.get('margin')}, {detail.get('method')})")
    reason = detail.get("reason") or f"{where} the noise band"
    return f"nondeterministic node, {where} the noise band of {samples} recorded samples: {reason}"


def _by_metric(node: str, metric: Callable, recorded: dict, outputs: dict, baseline: list,
               margin: float) -> tuple:
    score = metric(recorded, outputs)
    if isinstance(score, bool):
        verdict = WITHIN if score else DIVERGED
        return verdict, f"metric {getattr(metric, '__name__', 'metric')} returned {score}", {"metric": score}
    if not baseline:
        return FAILED, (f"metric for node {node!r} returned a number ({score!r}) but the snapshot "
                        "holds no baseline samples to compare it with; return a bool, or re-take "
                        "the snapshot with repeats > 0"), {}
    scores = [float(metric(recorded, b)) for b in baseline]
    threshold = min(scores) - margin
    verdict = WITHIN if float(score) >= threshold else DIVERGED
    return verdict, (f"metric {getattr(metric, '__name__', 'metric')} = {float(score):.3f}; recorded "
                     f"samples scored at least {min(scores):.3f} (threshold {threshold:.3f})"), {
        "metric": float(score), "baseline_scores": scores, "threshold": threshold}


def replay(source: Any, *, record: str = NONE, metrics: Optional[dict] = None,
           metric_for: Optional[Callable[[str], Optional[Callable]]] = None,
           method: Optional[str] = None, margin: float = noise.DEFAULT_MARGIN) -> ReplayResult:
    """Replay a snapshot (a path or a loaded document) against the current code."""
    path = None if isinstance(source, dict) else str(source)
    doc = fmt.check(source, "snapshot") if isinstance(source, dict) else fmt.load(source)
    where = path or "snapshot"
    pipeline = load_pipeline(doc, where)
    cassette = Cassette(doc["steps"], record)
    state = fmt.decode_values(doc.get("initial_state") or {})
    result = ReplayResult(path=path, mode=record, nodes=[], steps_total=len(doc["steps"]))
    prior: Optional[str] = None
    with cassette.active():
        for index, step in enumerate(doc["steps"]):
            problem = _next_node_problem(pipeline, prior, state, step["node"])
            if problem:
                result.problem = problem
                break
            report = _replay_step(pipeline, step, index, state, cassette, record,
                                  _metric(metrics, metric_for, step["node"]), method, margin)
            result.nodes.append(report)
            prior = step["node"]
            if report.verdict == FAILED:
                break
    if not result.problem and len(result.nodes) == len(doc["steps"]) and (
            (doc.get("run") or {}).get("status") == "completed"):
        extra = _next_node_problem(pipeline, prior, state, None)
        if extra:
            result.problem = extra
    result.state = state
    if record != NONE and result.ok:
        result.document = _rerecorded(doc, result, state, int((doc.get("audit") or {}).get("repeats") or 0))
    return result


def _metric(metrics: Optional[dict], metric_for: Optional[Callable], node: str) -> Optional[Callable]:
    got = (metrics or {}).get(node)
    if got is None and metric_for is not None:
        got = metric_for(node)
    return got


def _next_node_problem(pipeline: Any, prior: Optional[str], state: dict, expected: Optional[str]) -> str:
    if expected is not None and expected not in pipeline.actions:
        return (f"the recorded trajectory runs node {expected!r}, which pipeline "
                f"{pipeline.name!r} no longer has (its nodes: {', '.join(pipeline.actions)})")
    try:
        nxt = pipeline.graph.get_next_node(prior, State(dict(state)), pipeline.entrypoint)
    except Exception as e:  # a transition condition that cannot be evaluated on this state
        return f"after {prior or 'the start'}, the graph's transitions failed: {type(e).__name__}: {e}"
    got = nxt.name if nxt is not None else None
    if got == expected:
        return ""
    where = f"after {prior!r}" if prior else "at the start"
    if expected is None:
        return (f"the recording ended {where}, but the current graph goes on to {got!r} "
                "(a transition changed)")
    return (f"trajectory diverged {where}: the recording ran {expected!r} next, the current "
            f"graph {'goes to ' + repr(got) if got else 'stops there'} (a transition or an "
            "upstream output changed)")


def _apply(state: dict, outputs: dict, writes: list, deleted: list) -> None:
    state.update({k: v for k, v in outputs.items() if k in writes})
    for k in deleted:
        state.pop(k, None)


def _replay_step(pipeline: Any, step: dict, index: int, state: dict, cassette: Cassette,
                 record: str, metric: Optional[Callable], method: Optional[str],
                 margin: float) -> NodeReport:
    node, occurrence = step["node"], int(step.get("occurrence") or 1)
    state.update(fmt.decode_values(step.get("edit") or {}))
    inner = pipeline.action(node)
    recorded = fmt.decode_values(step.get("outputs") or {})
    report = NodeReport(node, occurrence, index, "served", SAME, recorded_hash=step.get("output_hash"),
                        recorded_outputs=recorded, entry=step, entry_was=step)
    spec = node_spec(node, inner, fmt.decode_values(step.get("overrides") or {}))
    readable = spec.readable(state)
    runtime = fmt.decode_values(step.get("runtime_inputs") or {})
    try:
        fields = spec.field_hashes(readable, None, runtime)
    except RewindError as e:
        report.action, report.verdict, report.detail = "not reached", FAILED, str(e)
        return report
    input_hash = spec.input_hash(fields)
    deleted = step.get("deleted") or []
    if spec.output_hash(recorded, None, deleted) != step.get("output_hash"):
        # served as recorded, they would stand for outputs the node never produced
        report.action, report.verdict = "not reached", FAILED
        report.detail = (f"the snapshot is inconsistent at {node}#{occurrence}: its recorded "
                         "outputs do not hash to its output_hash (edited by hand?); re-record "
                         "it with `rewind snapshot`")
        return report
    if policy_of(inner).determinism == SIDE_EFFECT:
        report.action, report.verdict = "dry-run", NOT_COMPARED
        report.reason = ("side effect: never performed in a replay; its recorded outputs stand in"
                         + ("" if input_hash == step.get("input_hash") else
                            " (" + _why(step, fields, spec.units, record) + ")"))
        report.outputs, report.replayed_hash = recorded, step.get("output_hash")
        _apply(state, recorded, spec.writes, deleted)
        return report
    if input_hash == step.get("input_hash") and record != ALL:
        report.reason = "same inputs and code as recorded: served from the snapshot"
        report.outputs, report.replayed_hash = recorded, step.get("output_hash")
        _apply(state, recorded, spec.writes, deleted)
        return report

    report.action, report.reason = "executed", _why(step, fields, spec.units, record)
    seen_misses = len(cassette.misses)
    meter = StepMeter(node=node, tool_store=cassette)
    done, error = None, None
    with cassette.step(node, occurrence) as tools:
        try:
            done = execute_node(node, spec.runner, readable, spec.reads, spec.writes, runtime,
                                meter=meter)
        except Exception as e:  # the node's own failure: reported, and the replay stops
            error = e
    made = [snapshot_call(c) for c in meter.calls if not c.error]
    report.new_calls, report.dropped_calls = _calls_delta(step.get("calls") or [], made)
    report.missing = cassette.misses[seen_misses:]
    if done is None or report.missing:
        report.verdict = FAILED
        report.detail = (str(report.missing[0]) if report.missing
                         else f"raised {type(error).__name__}: {error}")
        return report
    outputs = done.outputs
    report.outputs = outputs
    report.replayed_hash = spec.output_hash(outputs, None, done.deleted)
    report.verdict, report.detail, report.noise = _judge(
        step, spec, outputs, report.replayed_hash, recorded, metric, method, margin)
    report.entry = {
        **step, "input_hash": input_hash, "output_hash": report.replayed_hash, "fields": fields,
        "units": dict(spec.units), "params": spec.params_doc,
        "outputs": fmt.encode_values(outputs, node), "deleted": sorted(done.deleted),
        "calls": merge_calls(made), "tools": merge_tools(tools),
    }
    report.rerun = (spec, readable, runtime)
    _apply(state, outputs, spec.writes, done.deleted)
    return report


def _rerecorded(doc: dict, result: ReplayResult, state: dict, repeats: int) -> dict:
    """The snapshot of this replay: re-executed steps re-audited through the configured model."""
    steps = []
    for n in result.nodes:
        entry = dict(n.entry)
        unchanged = n.verdict == SAME and entry.get("input_hash") == n.entry_was.get("input_hash")
        if n.rerun is not None and not unchanged:
            spec, readable, runtime = n.rerun
            entry["audit"] = {"stable": None, "samples": 0}
            if repeats:
                audit, calls, tools = audit_step(spec, readable, runtime, entry["output_hash"],
                                                 spec.output_field_hashes(n.outputs), repeats)
                entry["audit"] = audit
                entry["calls"] = merge_calls(entry["calls"], calls)
                entry["tools"] = merge_tools(entry["tools"], tools)
        steps.append(entry)
    return {**doc, "steps": steps}


def write_rerecorded(result: ReplayResult, path: Optional[str] = None) -> Optional[Path]:
    """Write a record-mode replay's snapshot over the file it came from (when it changed)."""
    if result.document is None:
        return None
    target = Path(path or result.path)
    if target.exists() and target.read_text(encoding="utf-8") == fmt.dumps(result.document):
        return None
    return fmt.write(result.document, target)
