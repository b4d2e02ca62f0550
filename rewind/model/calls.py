"""Answering a model call without sending it: the hook on openai's transport.

Every chat-completions or Responses request an openai client sends, `rewind.llm.chat`'s and a
user's own `openai.OpenAI(...)` alike, passes through one hook on the client's `_send_request`
(the last step before the HTTP library). While a *call source* is active (`serving(source)`),
the request is first offered to `source.answer(api, body)`: a recorded call (a dict) is handed
back to the SDK as the HTTP response it was, and None sends it for real. A *tap*
(`tapping(fn)`, used by `rewind.model.capture`) sees every response that comes back, served or
sent, so the step meter records the call and its raw reply either way.

A recorded call carries its raw reply (`raw`: status, the headers that matter, the body as it
came off the wire: JSON, or the server-sent events of a stream, frame for frame), so a served
call is parsed by the SDK exactly as the first time: tool calls, content blocks, stop reasons,
ids, usage. A call served to a request of the other shape (a recorded stream to a plain
request, or back; a streamed and a plain call of one request are one call) is converted,
keeping those fields. A call recorded before raw replies were kept (`response_text`,
`prompt_tokens`, `completion_tokens` only) is served as a reply with that text and usage.

A request's identity (`call_key`) is (api, model, messages as the meter records them, every
other request field except `stream` and `stream_options`).
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import functools
import importlib
import inspect
import json
import threading
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Optional

from ..errors import RewindError
from ..keys import canonical_hash, to_canonical

_APIS = (("/chat/completions", "chat.completions"), ("/responses", "responses"))
NOT_KEYED = ("stream", "stream_options")
# The response headers a served reply carries again: how to parse the body, and the request id
# the SDK exposes (`_request_id`). Not content-length/-encoding (the body is kept decoded), not
# cookies or rate-limit state.
KEPT_HEADERS = ("content-type", "x-request-id", "request-id", "openai-processing-ms", "openai-version")
SSE = "text/event-stream"

_active: contextvars.ContextVar = contextvars.ContextVar("rewind_call_source", default=None)
_tap: contextvars.ContextVar = contextvars.ContextVar("rewind_call_tap", default=None)
# Set while the hook handles one send: a `_send_request` override that calls its base's (also
# hooked) is handled once.
_in_send: contextvars.ContextVar = contextvars.ContextVar("rewind_in_send", default=False)
_install_lock = threading.Lock()


def call_key(api: str, model: str, messages: Any, params: dict) -> str:
    keyed = {k: v for k, v in (params or {}).items() if k not in NOT_KEYED}
    return canonical_hash({"api": api, "model": model, "messages": messages, "params": keyed})


def active_source() -> Any:
    """The call source answering requests here now (None: every request is sent)."""
    return _active.get()


@contextlib.contextmanager
def serving(source: Any) -> Iterator[Any]:
    """Offer every model request made inside the block to `source.answer(api, body)`."""
    install()
    token = _active.set(source)
    try:
        yield source
    finally:
        _active.reset(token)


@contextlib.contextmanager
def tapping(fn: Callable[[Any, Optional[dict]], None]) -> Iterator[None]:
    """Inside the block, `fn(response, served_call)` sees each model response as it comes back
    (`served_call`: the recorded call a source answered with, None for a sent request). The
    hook must be in place (`install`)."""
    token = _tap.set(fn)
    try:
        yield
    finally:
        _tap.reset(token)


def request_of(api: str, body: dict) -> dict:
    from . import sim
    from .sim.responses import messages_of

    try:
        messages = messages_of(body) if api == "responses" else sim.normalize_messages(body.get("messages"))
    except (ValueError, TypeError):
        messages = body.get("messages") or body.get("input") or []
    params = {k: v for k, v in body.items() if k not in ("model", "messages", "input", "instructions")}
    request = {"api": api, "model": str(body.get("model") or ""), "messages": messages, "params": params}
    try:  # spelled as a recorded call is (0.0 as 0), so that a diff shows only real changes
        return to_canonical(request, "request")
    except RewindError:
        return request


# --- the raw reply -------------------------------------------------------------------------------

def raw_reply(status: int, headers: Any, body: bytes) -> dict:
    """A reply as a recorded call keeps it: JSON-ready, the body as text where it is UTF-8."""
    kept = {k: str(headers[k]) for k in KEPT_HEADERS if k in headers}
    raw: dict = {"status": int(status), "headers": kept}
    try:
        raw["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        raw["body_b64"] = base64.b64encode(body).decode("ascii")
    return raw


def raw_body(raw: Any) -> Optional[bytes]:
    if not isinstance(raw, dict):
        return None
    if isinstance(raw.get("body"), str):
        return raw["body"].encode("utf-8")
    if isinstance(raw.get("body_b64"), str):
        try:
            return base64.b64decode(raw["body_b64"])
        except ValueError:
            return None
    return None


def sse_events(body: bytes) -> list:
    """The (event, data) frames of a server-sent-events body."""
    out = []
    text = body.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    for frame in text.split("\n\n"):
        event, data = None, []
        for line in frame.split("\n"):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:][1:] if line[5:6] == " " else line[5:])
        if data:
            out.append((event, "\n".join(data)))
    return out


def _frame(data: Any, event: Optional[str] = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return (f"event: {event}\n" if event else "").encode() + b"data: " + text.encode("utf-8") + b"\n\n"


def _chat_from_stream(body: bytes) -> dict:
    """The chat completion a recorded stream of chunks adds up to."""
    head: dict = {}
    choices: dict = {}
    usage = None
    for _, data in sse_events(body):
        if data.strip() == "[DONE]":
            break
        chunk = json.loads(data)
        if not head:
            head = {k: chunk.get(k) for k in ("id", "created", "model", "system_fingerprint", "service_tier")
                    if k in chunk}
        usage = chunk.get("usage") or usage
        for c in chunk.get("choices") or []:
            slot = choices.setdefault(c.get("index", 0), {"message": {"role": "assistant", "content": None},
                                                           "finish_reason": None, "logprobs": None, "tools": {}})
            delta, message = c.get("delta") or {}, slot["message"]
            for field in ("content", "refusal", "reasoning_content"):
                if delta.get(field) is not None:
                    message[field] = (message.get(field) or "") + delta[field]
            if delta.get("role"):
                message["role"] = delta["role"]
            for tc in delta.get("tool_calls") or []:
                t = slot["tools"].setdefault(tc.get("index", 0), {"function": {"name": "", "arguments": ""}})
                for k in ("id", "type"):
                    if tc.get(k):
                        t[k] = tc[k]
                for k in ("name", "arguments"):
                    t["function"][k] += (tc.get("function") or {}).get(k) or ""
            slot["finish_reason"] = c.get("finish_reason") or slot["finish_reason"]
            slot["logprobs"] = c.get("logprobs") or slot["logprobs"]
    out = []
    for i, slot in sorted(choices.items()):
        if slot["tools"]:
            slot["message"]["tool_calls"] = [{"type": "function", **t} for _, t in sorted(slot["tools"].items())]
        out.append({"index": i, "message": slot["message"], "logprobs": slot["logprobs"],
                    "finish_reason": slot["finish_reason"]})
    return {**head, "object": "chat.completion", "choices": out, **({"usage": usage} if usage else {})}


def _chat_to_stream(reply: dict, include_usage: bool) -> bytes:
    """A recorded chat completion as the stream of chunks a server would have sent."""
    head = {k: reply.get(k) for k in ("id", "created", "model", "system_fingerprint", "service_tier")
            if k in reply}
    head["object"] = "chat.completion.chunk"
    frames = []
    for c in reply.get("choices") or []:
        message, delta = c.get("message") or {}, {}
        for k in ("role", "content", "refusal"):
            if k in message:
                delta[k] = message[k]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **tc} for i, tc in enumerate(message["tool_calls"])]
        index = c.get("index", 0)
        frames.append(_frame({**head, "choices": [{"index": index, "delta": delta, "logprobs": c.get("logprobs"),
                                                   "finish_reason": None}]}))
        frames.append(_frame({**head, "choices": [{"index": index, "delta": {}, "logprobs": None,
                                                   "finish_reason": c.get("finish_reason")}]}))
    if include_usage and reply.get("usage"):
        frames.append(_frame({**head, "choices": [], "usage": reply["usage"]}))
    return b"".join(frames) + _frame("[DONE]")


def _response_from_stream(body: bytes) -> dict:
    """The response a recorded Responses stream ended with."""
    final = None
    for _, data in sse_events(body):
        event = json.loads(data) if data.strip() != "[DONE]" else {}
        if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            final = event.get("response")
    if not isinstance(final, dict):
        raise ValueError("the recorded stream has no final response")
    return final


def _response_to_stream(reply: dict) -> bytes:
    """A recorded Responses reply as the events a server would have streamed."""
    seq = iter(range(1 << 30))
    frames = []

    def event(kind: str, **data) -> None:
        frames.append(_frame({"type": kind, "sequence_number": next(seq), **data}, kind))

    event("response.created", response={**reply, "status": "in_progress", "output": [], "usage": None})
    for i, item in enumerate(reply.get("output") or []):
        event("response.output_item.added", output_index=i, item={**item, "status": "in_progress", **(
            {"content": []} if item.get("type") == "message" else {})})
        if item.get("type") == "message":
            for j, part in enumerate(item.get("content") or []):
                event("response.content_part.added", item_id=item.get("id"), output_index=i, content_index=j,
                      part={**part, "text": ""} if part.get("type") == "output_text" else part)
                if part.get("type") == "output_text":
                    ids = {"item_id": item.get("id"), "output_index": i, "content_index": j}
                    event("response.output_text.delta", **ids, delta=part.get("text", ""), logprobs=[])
                    event("response.output_text.done", **ids, text=part.get("text", ""), logprobs=[])
                event("response.content_part.done", item_id=item.get("id"), output_index=i, content_index=j,
                      part=part)
        elif item.get("type") == "function_call":
            ids = {"item_id": item.get("id"), "output_index": i}
            event("response.function_call_arguments.delta", **ids, delta=item.get("arguments", ""))
            event("response.function_call_arguments.done", **ids, arguments=item.get("arguments", ""))
        event("response.output_item.done", output_index=i, item=item)
    status = reply.get("status") or "completed"
    kind = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(status, "response.completed")
    event(kind, response=reply)
    return b"".join(frames)


def _reshaped(api: str, content: bytes, stream: bool, body: dict) -> bytes:
    """A recorded reply of the other shape (stream or not) as this request expects it."""
    if api == "responses":
        return _response_to_stream(json.loads(content)) if stream else \
            json.dumps(_response_from_stream(content), ensure_ascii=False).encode("utf-8")
    if stream:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return _chat_to_stream(json.loads(content), include_usage)
    return json.dumps(_chat_from_stream(content), ensure_ascii=False).encode("utf-8")


def recorded_reply(call: dict) -> Optional[dict]:
    """The reply object of a recorded call (a chat completion or a response; a recorded stream
    added up), from its raw reply; None where none was kept or it does not parse."""
    raw = call.get("raw") if isinstance(call, dict) else None
    content = raw_body(raw)
    if content is None:
        return None
    try:
        if SSE in str((raw.get("headers") or {}).get("content-type") or ""):
            return (_response_from_stream(content) if call.get("api") == "responses"
                    else _chat_from_stream(content))
        reply = json.loads(content)
    except (ValueError, TypeError, AttributeError, KeyError):
        return None
    return reply if isinstance(reply, dict) else None


def _recorded_wire(api: str, call: dict, body: dict) -> Optional[tuple]:
    """(status, headers, body) of a call's raw reply in the shape this request expects, or None
    (no raw reply kept, or one that cannot be reshaped)."""
    raw = call.get("raw")
    content = raw_body(raw)
    if content is None:
        return None
    headers = dict(raw.get("headers") or {})
    stream = bool(body.get("stream"))
    if (SSE in str(headers.get("content-type") or "")) != stream:
        try:
            content = _reshaped(api, content, stream, body)
        except (ValueError, TypeError, AttributeError, KeyError):
            return None
        headers["content-type"] = (SSE + "; charset=utf-8") if stream else "application/json"
    return int(raw.get("status") or 200), headers, content


# --- a reply from the text of a call recorded without its raw reply --------------------------------

def _chat_body(call: dict, body: dict, stream: bool) -> tuple:
    text, model = call.get("response_text") or "", body.get("model") or call.get("model")
    usage = {"prompt_tokens": int(call.get("prompt_tokens") or 0),
             "completion_tokens": int(call.get("completion_tokens") or 0)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    payload = {"id": "chatcmpl-rewind-replay", "created": 0, "model": model, "object": "chat.completion",
               "usage": usage, "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": text, "refusal": None}}]}
    if not stream:
        return "application/json", json.dumps(payload, ensure_ascii=False).encode("utf-8")
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return SSE + "; charset=utf-8", _chat_to_stream(payload, include_usage)


def _responses_body(call: dict, body: dict, stream: bool) -> tuple:
    from .sim import responses

    p, c = int(call.get("prompt_tokens") or 0), int(call.get("completion_tokens") or 0)
    completion = SimpleNamespace(text=call.get("response_text") or "", finish_reason="stop",
                                 prompt_tokens=p, completion_tokens=c, total_tokens=p + c)
    model = body.get("model") or call.get("model")
    if not stream:
        payload = responses._response("rewind-replay", model, body, completion)
        return "application/json", json.dumps(payload, ensure_ascii=False).encode("utf-8")
    return (SSE + "; charset=utf-8",
            b"".join(responses._events("rewind-replay", model, body, completion)))


def wire_response(request: Any, api: str, call: dict, body: dict) -> Any:
    """The HTTP response of this recorded call, of the HTTP library the client uses (httpx2, or
    httpx for a client given one): its raw reply where it was kept, else one built from its text."""
    lib = importlib.import_module(type(request).__module__.split(".")[0])
    recorded = _recorded_wire(api, call, body)
    if recorded is not None:
        status, headers, content = recorded
        return lib.Response(status, headers=headers, content=content, request=request)
    build = _responses_body if api == "responses" else _chat_body
    content_type, content = build(call, body, bool(body.get("stream")))
    return lib.Response(200, headers={"content-type": content_type, "x-request-id": "req_rewind_replay"},
                        content=content, request=request)


# --- the hook on openai's transport ---------------------------------------------------------------

def _api_of(request: Any) -> Optional[str]:
    if str(getattr(request, "method", "")).upper() != "POST":
        return None
    path = str(getattr(getattr(request, "url", None), "path", "") or "").rstrip("/")
    return next((api for suffix, api in _APIS if path.endswith(suffix)), None)


def _body_of(request: Any) -> dict:
    try:
        data = json.loads(request.content or b"{}")
    except (ValueError, AttributeError):
        return {}
    return data if isinstance(data, dict) else {}


def _hooked_send(original):
    """`original` (a `_send_request`) answering from the active source and showing the tap."""
    if inspect.iscoroutinefunction(original):
        @functools.wraps(original)
        async def send(self, request, *args, **kwargs):
            source, tap = _active.get(), _tap.get()
            api = _api_of(request) if (source is not None or tap is not None) and not _in_send.get() else None
            if api is None:
                return await original(self, request, *args, **kwargs)
            token = _in_send.set(True)
            try:
                body = _body_of(request)
                call = source.answer(api, body) if source is not None else None
                response = (await original(self, request, *args, **kwargs) if call is None
                            else wire_response(request, api, call, body))
            finally:
                _in_send.reset(token)
            if tap is not None:
                tap(response, call)
            return response
    else:
        @functools.wraps(original)
        def send(self, request, *args, **kwargs):
            source, tap = _active.get(), _tap.get()
            api = _api_of(request) if (source is not None or tap is not None) and not _in_send.get() else None
            if api is None:
                return original(self, request, *args, **kwargs)
            token = _in_send.set(True)
            try:
                body = _body_of(request)
                call = source.answer(api, body) if source is not None else None
                response = (original(self, request, *args, **kwargs) if call is None
                            else wire_response(request, api, call, body))
            finally:
                _in_send.reset(token)
            if tap is not None:
                tap(response, call)
            return response
    send._rewind_send = True
    return send


def _hook_class(cls: type) -> None:
    """Hook the `_send_request` this client class uses (its own override, or a base's): on the
    class, so clients shared across threads and tasks each see only their own context."""
    fn = getattr(cls, "_send_request", None)
    if fn is None or getattr(fn, "_rewind_send", False):
        return
    with _install_lock:
        for klass in cls.__mro__:
            fn = klass.__dict__.get("_send_request")
            if fn is not None:
                if not getattr(fn, "_rewind_send", False):
                    klass._send_request = _hooked_send(fn)
                return


def _wrap_request(original):
    # the hook goes on at a client's first request, so a subclass defined later is covered too
    if inspect.iscoroutinefunction(original):
        @functools.wraps(original)
        async def request(self, *args, **kwargs):
            _hook_class(type(self))
            return await original(self, *args, **kwargs)
    else:
        @functools.wraps(original)
        def request(self, *args, **kwargs):
            _hook_class(type(self))
            return original(self, *args, **kwargs)
    request._rewind_cassette = True
    return request


def install() -> None:
    """Put the hook on openai's base clients (checked on the classes themselves, not with a
    flag: a process that re-imports openai has new classes to hook)."""
    from openai import _base_client as base

    with _install_lock:
        for cls in (base.SyncAPIClient, base.AsyncAPIClient):
            if not getattr(cls.request, "_rewind_cassette", False):
                cls.request = _wrap_request(cls.request)
    _hook_class(base.SyncAPIClient)
    _hook_class(base.AsyncAPIClient)
