"""OpenTelemetry export to a real OTLP/HTTP receiver on loopback (the official SDK and exporter
on the sending side; the receiver decodes the protobuf with opentelemetry-proto): the span tree,
GenAI token attributes, content off by default, and a fork's links to its parent's spans."""

from __future__ import annotations

import gzip
import http.server
import threading

import pytest
from burr.core.graph import GraphBuilder
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse,
)

import rewind
from rewind import OperationError, Pipeline, Rewind, action
from rewind.integrations import OtelExporter, export_otel
from rewind.integrations.otel import run_span_id, step_span_id, trace_id


@action(reads=["topic"], writes=["outline"])
def outline(state, temperature: float = 0.0):
    text = rewind.llm.chat([{"role": "user", "content": f"Outline an essay on {state['topic']}"}],
                           model="sim-small", temperature=temperature)
    return state.update(outline=text)


@action(reads=["outline"], writes=["essay"])
def write(state):
    text = rewind.llm.chat([{"role": "user", "content": f"Write from: {state['outline']}"}],
                           model="sim-small")
    return state.update(essay=text)


@action(reads=["topic"], writes=["tags"])
def tag(state):
    return state.update(tags=state["topic"].split())


@action(reads=["essay", "tags"], writes=["receipt"], determinism="side-effect")
def send(state):
    return state.update(receipt=len(state["essay"]))


def essay_pipeline() -> Pipeline:
    g = (GraphBuilder().with_actions(outline=outline, write=write, tag=tag, send=send)
         .with_transitions(("outline", "write"), ("write", "tag"), ("tag", "send")).build())
    return Pipeline("essay-otel", g, "outline")


class Receiver:
    """A minimal OTLP/HTTP trace receiver on 127.0.0.1: keeps every span it is sent."""

    def __init__(self):
        self.spans: list = []
        self.resources: list = []
        spans, resources = self.spans, self.resources

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                for rs in req.resource_spans:
                    resources.append({a.key: a.value.string_value for a in rs.resource.attributes})
                    for ss in rs.scope_spans:
                        spans.extend(ss.spans)
                data = ExportTraceServiceResponse().SerializeToString()
                ok = self.path == "/v1/traces"
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def attrs(span) -> dict:
    out = {}
    for a in span.attributes:
        v = a.value
        out[a.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def rw(store_url):
    with Rewind(store_url) as handle:
        yield handle


def test_span_tree_tokens_and_fork_links(rw, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    run = rw.run(essay_pipeline(), {"topic": "bees and wasps"})
    fork = rw.fork(run.id, at="write", edit={"outline": "a much shorter outline"})
    assert export_otel(rw, run.id) == 1 + 4 + 2  # run, steps, the two model calls
    sent = export_otel(rw, fork.id)
    assert sent == 1 + 3 + 1  # run, its own steps (write, tag, send), write's model call
    assert receiver.resources[0]["service.name"] == "rewind"

    by_trace: dict = {}
    for s in receiver.spans:
        by_trace.setdefault(int.from_bytes(s.trace_id, "big"), []).append(s)
    parent_spans, fork_spans = by_trace[trace_id(run.id)], by_trace[trace_id(fork.id)]

    def tree(spans):
        ids = {int.from_bytes(s.span_id, "big"): s for s in spans}
        return ids, {s.name: ids.get(int.from_bytes(s.parent_span_id, "big")) for s in spans}

    ids, parent_of = tree(parent_spans)
    root = ids[run_span_id(run.id)]
    assert root.name == "invoke_workflow essay-otel" and not root.parent_span_id
    a = attrs(root)
    assert a["gen_ai.operation.name"] == "invoke_workflow" and a["gen_ai.workflow.name"] == "essay-otel"
    assert a["rewind.total_tokens"] == run.total_tokens > 0
    for node in ("outline", "write", "tag", "send"):
        assert parent_of[node] is root
    steps = {s.name: s for s in parent_spans if parent_of[s.name] is root}
    assert sorted(steps) == ["outline", "send", "tag", "write"]
    calls = [s for s in parent_spans if s.name == "chat sim-small"]
    assert len(calls) == 2
    total_in = total_out = 0
    for c in calls:
        ca = attrs(c)
        assert ca["gen_ai.operation.name"] == "chat" and ca["gen_ai.request.model"] == "sim-small"
        assert ca["gen_ai.usage.input_tokens"] > 0 and ca["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.input.messages" not in ca and "gen_ai.output.messages" not in ca  # off
        assert c.kind == c.SPAN_KIND_CLIENT
        total_in += ca["gen_ai.usage.input_tokens"]
        total_out += ca["gen_ai.usage.output_tokens"]
        assert int.from_bytes(c.parent_span_id, "big") in (
            step_span_id(run.id, 0), step_span_id(run.id, 1))
    assert total_in + total_out == run.total_tokens
    assert attrs(steps["tag"])["rewind.status"] == "executed"
    assert attrs(steps["outline"])["rewind.input_hash"] == run.step("outline").input_hash

    ids, parent_of = tree(fork_spans)
    froot = ids[run_span_id(fork.id)]
    assert [(int.from_bytes(link.trace_id, "big"), int.from_bytes(link.span_id, "big"))
            for link in froot.links] == [(trace_id(run.id), run_span_id(run.id))]
    assert attrs(froot)["rewind.parent_run_id"] == run.id
    assert attrs(froot)["rewind.fork_node"] == "write"
    fsteps = {s.name: s for s in fork_spans if parent_of[s.name] is froot}
    assert sorted(fsteps) == ["send", "tag", "write"]  # inherited outline is the parent's span
    for node, index in (("write", 1), ("tag", 2), ("send", 3)):
        links = [(int.from_bytes(link.trace_id, "big"), int.from_bytes(link.span_id, "big"))
                 for link in fsteps[node].links]
        assert links == [(trace_id(run.id), step_span_id(run.id, index))], node
    ta = attrs(fsteps["tag"])
    assert ta["rewind.status"] == "cached" and ta["rewind.cache_hit"] is True
    assert ta["rewind.source_run"] == run.id and ta["rewind.tokens"] == 0
    assert attrs(fsteps["send"])["rewind.status"] == "dry-run"
    assert "outline" in attrs(fsteps["write"])["rewind.reason"]
    # the same ids every time: a stored run exports as it did live
    assert {s.span_id for s in parent_spans} == {
        s.span_id for s in receiver.spans if int.from_bytes(s.trace_id, "big") == trace_id(run.id)}


def test_content_is_sent_only_when_enabled(rw, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    run = rw.run(essay_pipeline(), {"topic": "owls"})
    export_otel(rw, run.id, endpoint=receiver.url)
    call = next(s for s in receiver.spans if s.name == "chat sim-small")
    a = attrs(call)
    assert "Outline an essay on owls" in a["gen_ai.input.messages"]
    assert run.step("outline").outputs["outline"] in a["gen_ai.output.messages"]


def test_live_spans_equal_the_export(rw, receiver):
    live = OtelExporter(receiver.url)
    pipeline = essay_pipeline()
    run = rw.run(pipeline, {"topic": "moths"}, on_step=lambda s: live.on_step(rw, s))
    live.on_run_finished(rw, run)
    live.shutdown()
    first = sorted((s.span_id, s.name, s.start_time_unix_nano, s.end_time_unix_nano)
                   for s in receiver.spans)
    receiver.spans.clear()
    export_otel(rw, run.id, endpoint=receiver.url)
    again = sorted((s.span_id, s.name, s.start_time_unix_nano, s.end_time_unix_nano)
                   for s in receiver.spans)
    assert first == again and len(first) == 7


def test_failed_step_is_an_error_span(rw, receiver):
    @action(reads=["topic"], writes=["x"])
    def boom(state):
        raise ValueError("no x for you")

    g = GraphBuilder().with_actions(boom=boom).with_transitions().build()
    run = rw.run(Pipeline("boom-otel", g, "boom"), {"topic": "t"})
    assert run.status == "failed"
    export_otel(rw, run.id, endpoint=receiver.url)
    step = next(s for s in receiver.spans if s.name == "boom")
    assert step.status.code == step.status.STATUS_CODE_ERROR
    assert attrs(step)["error.type"] == "ValueError"
    root = next(s for s in receiver.spans if s.name == "invoke_workflow boom-otel")
    assert root.status.code == root.status.STATUS_CODE_ERROR


def test_an_unreachable_receiver_is_an_operation_error(rw, receiver):
    run = rw.run(essay_pipeline(), {"topic": "bats"})
    with pytest.raises(OperationError, match="/nowhere"):
        export_otel(rw, run.id, endpoint=receiver.url + "/nowhere")
