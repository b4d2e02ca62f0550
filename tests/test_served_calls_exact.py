"""A model call served from the model-call cache is the recorded reply, wire for wire (issue 37).

A forked node re-runs because a field it reads but does not send changed; its model request is
the recorded one, so the model-call cache answers it. The reply the SDK hands the node must be
the one recorded: tool calls, finish reason, ids, usage, the request id header; for a stream,
the same chunks. Against a tiny OpenAI-compatible server on 127.0.0.1 (the network edge is the
only fake) that answers every request with a tool call whose ids and numbers change per request,
so a reply that was not the recorded one shows; the real `openai` SDK is the client.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind
from rewind.model.calls import serving

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
                    "parameters": TOOLS[0]["function"]["parameters"]}]


# --- the network edge: an OpenAI-compatible server that answers with a tool call ------------------

def _chat_reply(n: int, city: str) -> dict:
    return {"id": f"chatcmpl-srv-{n}", "object": "chat.completion", "created": 1_700_000_000 + n,
            "model": "gpt-test-2024-01-01", "system_fingerprint": f"fp_{n}",
            "choices": [{"index": 0, "logprobs": None, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": None, "refusal": None,
                                     "tool_calls": [{"id": f"call_{n}", "type": "function", "function": {
                                         "name": "get_weather", "arguments": json.dumps({"city": city})}}]}}],
            "usage": {"prompt_tokens": 30 + n, "completion_tokens": 17, "total_tokens": 47 + n,
                      "completion_tokens_details": {"reasoning_tokens": 0}}}


def _chat_chunks(n: int, city: str, include_usage: bool) -> list:
    head = {"id": f"chatcmpl-srv-{n}", "object": "chat.completion.chunk", "created": 1_700_000_000 + n,
            "model": "gpt-test-2024-01-01", "system_fingerprint": f"fp_{n}"}
    args = json.dumps({"city": city})

    def chunk(delta, finish=None, **extra):
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                **extra}

    out = [chunk({"role": "assistant", "content": None, "tool_calls": [{
               "index": 0, "id": f"call_{n}", "type": "function",
               "function": {"name": "get_weather", "arguments": ""}}]}),
           chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[:9]}}]}),
           chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[9:]}}]}),
           chunk({}, "tool_calls")]
    if include_usage:
        out.append({**head, "choices": [], "usage": {"prompt_tokens": 30 + n, "completion_tokens": 17,
                                                      "total_tokens": 47 + n}})
    return out


def _response(n: int, city: str, body: dict) -> dict:
    return {"id": f"resp_srv_{n}", "object": "response", "created_at": 1_700_000_000 + n,
            "status": "completed", "model": "gpt-test-2024-01-01", "parallel_tool_calls": True,
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "output": [{"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                        "name": "get_weather", "arguments": json.dumps({"city": city}),
                        "status": "completed"}],
            "usage": {"input_tokens": 20 + n, "output_tokens": 9, "total_tokens": 29 + n,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def _response_events(n: int, city: str, body: dict) -> list:
    done = _response(n, city, body)
    item = done["output"][0]
    args = item["arguments"]
    return [
        {"type": "response.created", "sequence_number": 0,
         "response": {**done, "status": "in_progress", "output": [], "usage": None}},
        {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
         "item": {**item, "arguments": "", "status": "in_progress"}},
        {"type": "response.function_call_arguments.delta", "sequence_number": 2, "output_index": 0,
         "item_id": item["id"], "delta": args[:7]},
        {"type": "response.function_call_arguments.delta", "sequence_number": 3, "output_index": 0,
         "item_id": item["id"], "delta": args[7:]},
        {"type": "response.function_call_arguments.done", "sequence_number": 4, "output_index": 0,
         "item_id": item["id"], "arguments": args},
        {"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": item},
        {"type": "response.completed", "sequence_number": 6, "response": done},
    ]


class ToolServer:
    """Counts the requests it gets; every answer is numbered by that count."""

    def __init__(self):
        self.requests: list = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                server.requests.append((self.path, body))
                n = len(server.requests)
                text = json.dumps(body.get("messages") or body.get("input"))
                city = "Paris" if "Paris" in text else "Oslo"
                stream = bool(body.get("stream"))
                if self.path.endswith("/chat/completions"):
                    if stream:
                        usage = bool((body.get("stream_options") or {}).get("include_usage"))
                        frames = [_chat_chunks(n, city, usage)]
                        payload = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in frames[0])
                        payload += b"data: [DONE]\n\n"
                    else:
                        payload = json.dumps(_chat_reply(n, city)).encode()
                elif self.path.endswith("/responses"):
                    if stream:
                        payload = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()
                                           for e in _response_events(n, city, body))
                    else:
                        payload = json.dumps(_response(n, city, body)).encode()
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream" if stream else "application/json")
                self.send_header("x-request-id", f"req_srv_{n}")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


SERVER = {"url": None}


def _client():
    return openai.OpenAI(api_key="user-key", base_url=SERVER["url"], max_retries=0)


def _messages(state) -> list:
    return [{"role": "user", "content": state["question"]}]


# --- the nodes: each reads `question` and `note`, sends only `question` ----------------------------

@rewind.action(reads=["question", "note"], writes=["tool", "args", "reply", "request_id", "seen"])
def pick(state):
    r = _client().chat.completions.create(model="gpt-test", messages=_messages(state), tools=TOOLS,
                                          tool_choice="required")
    calls = r.choices[0].message.tool_calls or []
    return state.update(tool=calls[0].function.name if calls else None,
                        args=calls[0].function.arguments if calls else None,
                        reply=r.model_dump(mode="json"), request_id=r._request_id, seen=state["note"])


@rewind.action(reads=["question", "note"], writes=["tool", "args", "reply", "request_id", "seen"])
def pick_stream(state):
    stream = _client().chat.completions.create(
        model="gpt-test", messages=_messages(state), tools=TOOLS, tool_choice="required", stream=True,
        stream_options={"include_usage": True})
    chunks = [c.model_dump(mode="json") for c in stream]
    name, args = None, ""
    for c in chunks:
        for choice in c["choices"]:
            for tc in choice["delta"].get("tool_calls") or []:
                name = tc["function"].get("name") or name
                args += tc["function"].get("arguments") or ""
    return state.update(tool=name, args=args or None, reply=chunks,
                        request_id=stream.response.headers.get("x-request-id"), seen=state["note"])


@rewind.action(reads=["question", "note"], writes=["tool", "args", "reply", "request_id", "seen"])
def pick_responses(state):
    r = _client().responses.create(model="gpt-test", input=state["question"], tools=RESPONSES_TOOLS,
                                   tool_choice="required")
    calls = [o for o in r.output if o.type == "function_call"]
    return state.update(tool=calls[0].name if calls else None, args=calls[0].arguments if calls else None,
                        reply=r.model_dump(mode="json"), request_id=r._request_id, seen=state["note"])


@rewind.action(reads=["question", "note"], writes=["tool", "args", "reply", "request_id", "seen"])
def pick_responses_stream(state):
    events = [e.model_dump(mode="json") for e in _client().responses.create(
        model="gpt-test", input=state["question"], tools=RESPONSES_TOOLS, tool_choice="required", stream=True)]
    final = next((e["response"] for e in events if e["type"] == "response.completed"), None)
    calls = [o for o in (final or {}).get("output") or [] if o.get("type") == "function_call"]
    return state.update(tool=calls[0]["name"] if calls else None,
                        args=calls[0]["arguments"] if calls else None,
                        reply=events, request_id=None, seen=state["note"])


@rewind.action(reads=["question", "note"], writes=["tool", "args", "reply", "request_id", "seen"])
def pick_async(state):
    async def go():
        client = openai.AsyncOpenAI(api_key="user-key", base_url=SERVER["url"], max_retries=0)
        try:
            return await client.chat.completions.create(model="gpt-test", messages=_messages(state),
                                                        tools=TOOLS, tool_choice="required")
        finally:
            await client.close()

    r = asyncio.run(go())
    calls = r.choices[0].message.tool_calls or []
    return state.update(tool=calls[0].function.name if calls else None,
                        args=calls[0].function.arguments if calls else None,
                        reply=r.model_dump(mode="json"), request_id=r._request_id, seen=state["note"])


@rewind.action(reads=["question", "note"], writes=["tool", "args", "reply", "request_id", "seen"])
def pick_async_stream(state):
    async def go():
        client = openai.AsyncOpenAI(api_key="user-key", base_url=SERVER["url"], max_retries=0)
        try:
            stream = await client.chat.completions.create(
                model="gpt-test", messages=_messages(state), tools=TOOLS, tool_choice="required",
                stream=True, stream_options={"include_usage": True})
            return [c.model_dump(mode="json") async for c in stream], stream.response.headers.get("x-request-id")
        finally:
            await client.close()

    chunks, request_id = asyncio.run(go())
    name = next((tc["function"]["name"] for c in chunks for ch in c["choices"]
                 for tc in ch["delta"].get("tool_calls") or [] if tc["function"].get("name")), None)
    args = "".join(tc["function"].get("arguments") or "" for c in chunks for ch in c["choices"]
                   for tc in ch["delta"].get("tool_calls") or [])
    return state.update(tool=name, args=args or None, reply=chunks, request_id=request_id, seen=state["note"])


@rewind.action(reads=["tool", "args"], writes=["done"])
def act(state):
    return state.update(done=f"{state['tool']}({state['args']})")


NODES = {"pick": pick, "pick_stream": pick_stream, "pick_responses": pick_responses,
         "pick_responses_stream": pick_responses_stream, "pick_async": pick_async,
         "pick_async_stream": pick_async_stream}
PIPELINES = {name: Pipeline(f"served-{name}", GraphBuilder().with_actions(pick=node, act=act)
                            .with_transitions(("pick", "act")).build(), "pick")
             for name, node in NODES.items()}


@pytest.fixture
def server():
    s = ToolServer()
    SERVER["url"] = s.base_url
    yield s
    s.close()


@pytest.fixture
def rw(store_url, server):
    handle = Rewind(store_url, pipelines=list(PIPELINES.values()))
    yield handle
    handle.close()


@pytest.mark.parametrize("kind", list(NODES))
def test_a_served_call_is_the_recorded_reply_every_field(rw, server, kind):
    pipeline = PIPELINES[kind]
    run = rw.run(pipeline, {"question": "What is the weather in Paris?", "note": "first"})
    assert run.status == "completed", run.error
    recorded = run.step("pick")
    assert recorded.outputs["tool"] == "get_weather"
    assert json.loads(recorded.outputs["args"]) == {"city": "Paris"}
    assert len(server.requests) == 1
    assert not recorded.calls[0].get("served")

    fork = rw.fork(run.id, at="pick", edit={"note": "second"})
    assert fork.status == "completed", fork.error
    step = fork.step("pick")
    assert step.status == "executed" and "`note` changed" in step.reason
    assert len(server.requests) == 1, "the repeated request went to the server"
    for field in ("tool", "args", "reply", "request_id"):  # every field of the recorded reply
        assert step.outputs[field] == recorded.outputs[field], field
    assert step.outputs["seen"] == "second"
    assert fork.step("act").status == "cached"  # the node's output did not change downstream
    # marked served on the step, and not paid for
    assert [c.get("served") for c in step.calls] == [True]
    assert step.tokens == 0 and step.tokens_saved == recorded.tokens > 0
    assert step.calls[0]["prompt_tokens"] == recorded.calls[0]["prompt_tokens"]


def test_the_chat_reply_keeps_tool_calls_finish_reason_ids_and_usage(rw, server):
    run = rw.run(PIPELINES["pick"], {"question": "What is the weather in Paris?", "note": "a"})
    fork = rw.fork(run.id, at="pick", edit={"note": "b"})
    reply = fork.step("pick").outputs["reply"]
    assert reply["id"] == "chatcmpl-srv-1" and reply["created"] == 1_700_000_001
    assert reply["system_fingerprint"] == "fp_1" and reply["model"] == "gpt-test-2024-01-01"
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert reply["usage"]["total_tokens"] == 48
    assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    assert fork.step("pick").outputs["request_id"] == "req_srv_1"


def test_a_served_stream_yields_the_recorded_chunks(rw, server):
    run = rw.run(PIPELINES["pick_stream"], {"question": "What is the weather in Paris?", "note": "a"})
    fork = rw.fork(run.id, at="pick", edit={"note": "b"})
    chunks = fork.step("pick").outputs["reply"]
    assert len(server.requests) == 1
    assert chunks == run.step("pick").outputs["reply"]
    assert [c["id"] for c in chunks] == ["chatcmpl-srv-1"] * 5
    assert chunks[0]["choices"][0]["delta"]["tool_calls"][0]["id"] == "call_1"
    assert fork.step("pick").outputs["args"] == '{"city": "Paris"}'
    assert [c["choices"][0]["finish_reason"] if c["choices"] else "usage" for c in chunks] == \
        [None, None, None, "tool_calls", "usage"]
    assert chunks[-1]["usage"]["total_tokens"] == 48
    assert fork.step("pick").outputs["request_id"] == "req_srv_1"


@pytest.mark.parametrize("recorded_kind,served_kind", [
    ("pick_stream", "pick"), ("pick", "pick_stream"),
    ("pick_responses_stream", "pick_responses"), ("pick_responses", "pick_responses_stream")])
def test_a_reply_served_to_a_request_of_the_other_shape_keeps_the_tool_call(rw, server, recorded_kind,
                                                                            served_kind):
    """A streamed and a plain call of one request are one call: each is served the other's
    reply in its own shape, with the tool call, ids and usage."""
    state = {"question": "What is the weather in Paris?", "note": "a"}
    run = rw.run(PIPELINES[recorded_kind], state)
    assert len(server.requests) == 1
    other = rw.run(PIPELINES[served_kind], state)
    assert len(server.requests) == 1, "the request was not served the recorded reply"
    got, want = other.step("pick"), run.step("pick")
    assert got.calls[0]["served"] is True
    assert (got.outputs["tool"], got.outputs["args"]) == ("get_weather", want.outputs["args"])
    reply = got.outputs["reply"]
    if served_kind == "pick":
        assert reply["id"] == "chatcmpl-srv-1" and reply["usage"]["total_tokens"] == 48
        assert reply["choices"][0]["finish_reason"] == "tool_calls"
        assert reply["choices"][0]["message"]["tool_calls"][0]["id"] == "call_1"
    elif served_kind == "pick_stream":
        assert {c["id"] for c in reply} == {"chatcmpl-srv-1"}
        assert [c["choices"][0]["finish_reason"] for c in reply if c["choices"]][-1] == "tool_calls"
        assert reply[-1]["usage"]["total_tokens"] == 48
    elif served_kind == "pick_responses":
        assert reply["id"] == "resp_srv_1" and reply["usage"]["total_tokens"] == 30
        assert reply["output"][0]["call_id"] == "call_1"
    else:
        final = [e for e in reply if e["type"] == "response.completed"]
        assert final and final[0]["response"]["id"] == "resp_srv_1"
        assert final[0]["response"]["output"][0]["call_id"] == "call_1"
        assert any(e["type"] == "response.function_call_arguments.delta" for e in reply)
    assert got.tokens == 0 and got.tokens_saved == want.tokens


def test_a_call_recorded_before_raw_replies_still_serves_its_text(server):
    """A recorded call with no raw reply (stored by an older version) serves what it has."""

    class Old:
        def answer(self, api, body):
            return {"api": api, "model": "gpt-test", "response_text": "hello there",
                    "prompt_tokens": 3, "completion_tokens": 2}

    SERVER["url"] = server.base_url
    with serving(Old()):
        r = _client().chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
        stream = _client().chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}],
                                                   stream=True, stream_options={"include_usage": True})
        parts = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert r.choices[0].message.content == "hello there" and r.usage.total_tokens == 5
    assert "".join(parts) == "hello there"
    assert server.requests == []
