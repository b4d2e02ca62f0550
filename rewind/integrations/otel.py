"""Rewind runs as OpenTelemetry traces over OTLP/HTTP, following the GenAI semantic conventions.

One trace per run: an `invoke_workflow {pipeline}` span, a child span per step it ran (named
after the node), and under a step a `chat {model}` client span per model call it made and an
`execute_tool {tool}` span per tool call it recorded. Token usage is `gen_ai.usage.input_tokens`
/ `output_tokens` on the model-call spans (on the step span when a step metered tokens without
recording calls, so nothing is counted twice). Message content (`gen_ai.input.messages`,
`gen_ai.output.messages`, tool arguments and results) is off unless `capture_content=True` or
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`. Rewind's facts are `rewind.*`
attributes (status, cache hit, hashes, re-run reason).

A fork's run span links to its parent's run span and each step it ran links to the parent's span
of the same visit; the link targets are also attributes (`rewind.parent_*`), since some backends
(Phoenix) drop links. Span and trace ids are derived from run ids, so a stored run exports with
the same ids it had live, and a fork can link to a parent exported by another process.

The timing of model calls inside a step is approximate: their order and durations are recorded,
their start offsets are not, so they are laid end to end from the step's start.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import urllib.parse
from typing import Any, Optional

from ..errors import InvalidRequest, OperationError
from ..models import Run, Step, StepStatus
from ..redaction import redact_url

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
TRACES_PATH = "/v1/traces"
_REQUEST_PARAMS = {"temperature": "gen_ai.request.temperature", "max_tokens": "gen_ai.request.max_tokens",
                   "top_p": "gen_ai.request.top_p", "seed": "gen_ai.request.seed",
                   "max_output_tokens": "gen_ai.request.max_tokens"}


def _id(bits: int, *parts: Any) -> int:
    digest = hashlib.sha256("/".join(str(p) for p in ("rewind",) + parts).encode("utf-8")).hexdigest()
    return int(digest[: bits // 4], 16) or 1


def trace_id(run_id: str) -> int:
    return _id(128, "trace", run_id)


def run_span_id(run_id: str) -> int:
    return _id(64, "run", run_id)


def step_span_id(run_id: str, index: int) -> int:
    return _id(64, "step", run_id, index)


def _ns(seconds: Optional[float]) -> int:
    return int(float(seconds or 0.0) * 1e9)


def _error_type(error: Optional[str]) -> str:
    head = (error or "").split(":", 1)[0].strip()
    return head if head and " " not in head else "_OTHER"


def capture_from_env() -> bool:
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def traces_endpoint(endpoint: Optional[str]) -> Optional[str]:
    """The OTLP/HTTP traces URL of a base endpoint (as `OTEL_EXPORTER_OTLP_ENDPOINT` is given);
    None lets the exporter read `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT` itself."""
    if not endpoint:
        return None
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


ENDPOINT_SOURCES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def check_endpoint(endpoint: Optional[str]) -> None:
    """Refuse an OTLP/HTTP endpoint that is no http(s) URL with a host (`file://`, `javascript:`,
    a bare `host:port`), in one line naming it and where it came from; else a send would fail
    later as "is it running?". `endpoint=None` checks the environment's."""
    if endpoint:
        given = [("the OTLP endpoint", endpoint)]
    else:
        given = [(name, os.environ[name]) for name in ENDPOINT_SOURCES if os.environ.get(name)][:1]
    for source, value in given:
        try:
            parts = urllib.parse.urlsplit(value)
            ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
            parts.port  # noqa: B018  (a port that is not a number raises)
        except ValueError:
            ok = False
        if not ok:
            raise InvalidRequest(
                f"{source} {redact_url(value)!r} is not an http:// or https:// URL with a host; "
                "give the OTLP/HTTP receiver's base URL, e.g. http://localhost:4318",
                field="endpoint")


class _PlannedIds:
    """An OTel id generator that hands out the ids planned for the next span of this thread."""

    def __init__(self):
        self._next = threading.local()

    def plan(self, trace: int, span: int) -> None:
        self._next.ids = (trace, span)

    def generate_trace_id(self) -> int:
        return self._next.ids[0]

    def generate_span_id(self) -> int:
        return self._next.ids[1]


class OtelExporter:
    """Sends runs as spans over OTLP/HTTP. Live: `on_step` per committed step and
    `on_run_finished` per run; stored runs: `export_run`. Call `shutdown()` when done."""

    def __init__(self, endpoint: Optional[str] = None, capture_content: Optional[bool] = None,
                 headers: Optional[dict] = None, span_exporter: Any = None, batch: bool = True):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.id_generator import IdGenerator

        class Ids(_PlannedIds, IdGenerator):
            pass

        self.capture_content = capture_from_env() if capture_content is None else bool(capture_content)
        self._ids = Ids()
        resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME")
                                   else {"service.name": "rewind"})
        self.provider = TracerProvider(resource=resource, id_generator=self._ids)
        self.endpoint = traces_endpoint(endpoint) or os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or traces_endpoint(
            os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")) or "http://localhost:4318/v1/traces"
        check_endpoint(endpoint)
        inner = span_exporter or OTLPSpanExporter(endpoint=self.endpoint, headers=headers)
        self._out = _Tally(inner)
        processor = BatchSpanProcessor(self._out) if batch else SimpleSpanProcessor(self._out)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("rewind.integrations.otel")
        self.spans = 0
        self._parents: dict = {}  # fork id -> {(node, occurrence): parent Step}
        self._lock = threading.Lock()

    # --- spans -----------------------------------------------------------------------------
    def _span(self, name: str, trace: int, span: int, parent: Optional[int], kind: Any,
              start: float, end: float, attributes: dict, links: list = (),
              error: Optional[str] = None) -> None:
        from opentelemetry import trace as ot
        from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

        ctx = None
        if parent is not None:
            ctx = ot.set_span_in_context(NonRecordingSpan(SpanContext(
                trace, parent, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))))
        self._ids.plan(trace, span)
        s = self.tracer.start_span(
            name, context=ctx, kind=kind, start_time=_ns(start),
            attributes={k: v for k, v in attributes.items() if v is not None},
            links=[ot.Link(SpanContext(t, sp, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)),
                           attrs) for t, sp, attrs in links])
        if error:
            s.set_status(Status(StatusCode.ERROR, error[:500]))
            s.set_attribute("error.type", _error_type(error))
        s.end(end_time=max(_ns(end), _ns(start)))
        with self._lock:
            self.spans += 1

    def _parent_steps(self, rw: Any, parent_id: Optional[str]) -> dict:
        if not parent_id:
            return {}
        with self._lock:
            got = self._parents.get(parent_id)
        if got is None:
            try:
                got = {(s.node, s.occurrence): s for s in rw.get_run(parent_id).steps}
            except Exception:  # a purged parent: its spans stay linked by id only
                got = {}
            with self._lock:
                self._parents[parent_id] = got
        return got

    def step_spans(self, rw: Any, row: dict, step: Step) -> None:
        """The span of one step a run ran, and its model-call and tool-call spans."""
        from opentelemetry.trace import SpanKind

        if step.status == StepStatus.INHERITED:
            return
        run_id = row["id"]
        tid, sid = trace_id(run_id), step_span_id(run_id, step.index)
        start = step.started_at if step.started_at is not None else row.get("created_at")
        end = float(start or 0.0) + float(step.latency_ms or 0.0) / 1000.0
        calls = list(step.calls or [])
        tools = list(getattr(step, "tools", None) or [])
        attrs = {
            "rewind.run_id": run_id, "rewind.node": step.node, "rewind.occurrence": step.occurrence,
            "rewind.index": step.index, "rewind.status": str(step.status),
            "rewind.cache_hit": step.status == StepStatus.CACHED,
            "rewind.input_hash": step.input_hash, "rewind.output_hash": step.output_hash,
            "rewind.reason": step.reason or None, "rewind.tokens": int(step.tokens),
            "rewind.tokens_saved": int(step.tokens_saved), "rewind.source_run": step.source_run,
        }
        if not calls and step.tokens:  # metered without a call record: the usage lives here
            attrs["gen_ai.usage.input_tokens"] = int(step.prompt_tokens)
            attrs["gen_ai.usage.output_tokens"] = int(step.completion_tokens)
        links = []
        parent = self._parent_steps(rw, row.get("parent_id")).get((step.node, step.occurrence))
        if parent is not None:
            owner = parent.source_run if parent.status == StepStatus.INHERITED else row["parent_id"]
            if owner:
                target = step_span_id(owner, parent.index)
                links.append((trace_id(owner), target, {"rewind.link": "parent_step",
                                                        "rewind.parent_run_id": row["parent_id"]}))
                attrs["rewind.parent_step_trace_id"] = format(trace_id(owner), "032x")
                attrs["rewind.parent_step_span_id"] = format(target, "016x")
        self._span(step.node, tid, sid, run_span_id(run_id), SpanKind.INTERNAL, start, end, attrs,
                   links, error=step.error if step.status == StepStatus.FAILED else None)
        at = float(start or 0.0)
        for j, call in enumerate(calls):
            took = float(call.get("latency_ms") or 0.0) / 1000.0
            self._call_span(tid, sid, _id(64, "call", run_id, step.index, j), call, at, at + took)
            at += took
        for j, tool in enumerate(tools):
            took = float(tool.get("latency_ms") or 0.0) / 1000.0
            t0 = float(tool.get("started_at") or at)
            self._tool_span(tid, sid, _id(64, "tool", run_id, step.index, j), tool, t0, t0 + took)
            at = max(at, t0 + took)

    def _call_span(self, tid: int, parent: int, sid: int, call: dict, start: float, end: float) -> None:
        from opentelemetry.trace import SpanKind

        model = str(call.get("model") or "unknown")
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                 "gen_ai.request.model": model,
                 "gen_ai.usage.input_tokens": int(call.get("prompt_tokens") or 0),
                 "gen_ai.usage.output_tokens": int(call.get("completion_tokens") or 0),
                 "rewind.api": call.get("api")}
        for k, v in (call.get("params") or {}).items():
            if k in _REQUEST_PARAMS and isinstance(v, (int, float)) and not isinstance(v, bool):
                attrs[_REQUEST_PARAMS[k]] = v
        if call.get("usage_reported") is False:
            attrs["rewind.usage_estimated"] = True  # the server sent none: an o200k count
        if self.capture_content:
            attrs["gen_ai.input.messages"] = json.dumps(
                [{"role": m.get("role", "user"), "parts": [{"type": "text", "content": _text(m.get("content"))}]}
                 for m in (call.get("messages") or []) if isinstance(m, dict)], ensure_ascii=False)
            attrs["gen_ai.output.messages"] = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": call.get("response_text") or ""}],
                  "finish_reason": "error" if call.get("error") else "stop"}], ensure_ascii=False)
        self._span(f"chat {model}", tid, sid, parent, SpanKind.CLIENT, start, end, attrs,
                   error=call.get("error"))

    def _tool_span(self, tid: int, parent: int, sid: int, tool: dict, start: float, end: float) -> None:
        from opentelemetry.trace import SpanKind

        name = str(tool.get("name") or "tool")
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                 "gen_ai.tool.type": "function", "rewind.cache_hit": bool(tool.get("cached"))}
        if self.capture_content:
            for key, attr in (("args", "gen_ai.tool.call.arguments"), ("result", "gen_ai.tool.call.result")):
                if key in tool:
                    attrs[attr] = json.dumps(tool[key], ensure_ascii=False, default=repr)
        self._span(f"execute_tool {name}", tid, sid, parent, SpanKind.INTERNAL, start, end, attrs,
                   error=tool.get("error"))

    def run_span(self, rw: Any, row: dict) -> None:
        """The root span of a run (sent once the run has finished)."""
        from opentelemetry.trace import SpanKind

        run_id = row["id"]
        attrs = {
            "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": row["pipeline"],
            "rewind.run_id": run_id, "rewind.status": row["status"],
            "rewind.total_tokens": int(row.get("total_tokens") or 0),
            "rewind.tokens_saved": int(row.get("tokens_saved") or 0),
            "rewind.step_count": int(row.get("step_count") or 0),
        }
        links = []
        if row.get("parent_id"):
            parent = row["parent_id"]
            edit = json.loads(row["edit_json"]) if row.get("edit_json") else {}
            attrs.update({"rewind.parent_run_id": parent, "rewind.fork_node": row.get("fork_node"),
                          "rewind.fork_occurrence": row.get("fork_occurrence"),
                          "rewind.edit_fields": sorted(edit) or None,
                          "rewind.parent_trace_id": format(trace_id(parent), "032x"),
                          "rewind.parent_span_id": format(run_span_id(parent), "016x")})
            if self.capture_content and edit:
                attrs["rewind.edit"] = json.dumps(edit, ensure_ascii=False, default=repr)
            links.append((trace_id(parent), run_span_id(parent),
                          {"rewind.link": "fork_parent", "rewind.fork_node": row.get("fork_node") or ""}))
        end = row.get("finished_at") or row["created_at"]
        self._span(f"invoke_workflow {row['pipeline']}", trace_id(run_id), run_span_id(run_id), None,
                   SpanKind.INTERNAL, row["created_at"], end, attrs, links,
                   error=row.get("error") if row["status"] == "failed" else None)

    # --- the three ways in -----------------------------------------------------------------
    def on_step(self, rw: Any, step: Step) -> None:
        row = rw.store.get_run_row(step.run_id) if step.run_id else None
        if row is not None:
            self.step_spans(rw, row, step)

    def on_run_finished(self, rw: Any, run: Run) -> None:
        row = rw.store.get_run_row(run.id)
        if row is not None:
            self.run_span(rw, row)
        self.provider.force_flush()

    def flush(self) -> None:
        """Send what is queued; `OperationError` if the receiver refused or was unreachable."""
        self.provider.force_flush()
        failed, self._out.failed = self._out.failed, 0
        if failed:
            raise OperationError(
                f"{failed} span(s) were not accepted by the OTLP/HTTP receiver at {self.endpoint}; "
                "is it running? Set OTEL_EXPORTER_OTLP_ENDPOINT (or --endpoint) to its base URL")

    def export_run(self, rw: Any, run_id: str) -> int:
        """Send a stored run's spans; returns how many."""
        before = self.spans
        run = rw.get_run(run_id)
        row = rw.store.get_run_row(run.id)
        for step in run.steps:
            self.step_spans(rw, row, step)
        self.run_span(rw, row)
        self.flush()
        return self.spans - before

    def shutdown(self) -> None:
        self.provider.shutdown()


class _Tally:
    """The span exporter, counting the spans it could not deliver."""

    def __init__(self, inner: Any):
        self.inner, self.failed = inner, 0

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        result = self.inner.export(spans)
        if result != SpanExportResult.SUCCESS:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return getattr(self.inner, "force_flush", lambda *_: True)(timeout_millis)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, default=repr)


def export_otel(rw: Any, run_id: str, endpoint: Optional[str] = None,
                capture_content: Optional[bool] = None, lineage: bool = False) -> int:
    """Send a stored run (with its ancestors, oldest first, when `lineage`) over OTLP/HTTP to
    `endpoint` (a base URL; default `OTEL_EXPORTER_OTLP_ENDPOINT`). Returns the spans sent."""
    ids = [run_id]
    if lineage:
        ids = [a["id"] for a in rw.lineage(run_id)["ancestors"] if not a["missing"]] + [run_id]
    exporter = OtelExporter(endpoint, capture_content=capture_content)
    try:
        return sum(exporter.export_run(rw, rid) for rid in ids)
    finally:
        exporter.shutdown()
