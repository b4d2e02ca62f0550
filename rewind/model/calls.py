"""Answering a model call without sending it: the hook on openai's request path.

While a *call source* is active (`serving(source)`), every chat-completions or Responses request
an openai client makes, `rewind.llm.chat`'s and a user's own `openai.OpenAI(...)` alike, is first
offered to `source.answer(api, body)`: a recorded call (a dict with `response_text`,
`prompt_tokens`, `completion_tokens`) is returned to the SDK as the wire response a server would
have sent (JSON or server-sent events, of the HTTP library the client uses), so the SDK still
builds the request and parses the answer and the step meter still records the call; None sends
it for real. The engine's model-call cache and the snapshot replay's cassette are both sources.

A request's identity (`call_key`) is (api, model, messages as the meter records them, every
other request field except `stream` and `stream_options`): a streamed and a plain call of the
same request are the same call.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import json
import threading
from types import SimpleNamespace
from typing import Any, Iterator, Optional

from ..errors import RewindError
from ..keys import canonical_hash, to_canonical

_APIS = (("/chat/completions", "chat.completions"), ("/responses", "responses"))
NOT_KEYED = ("stream", "stream_options")

_active: contextvars.ContextVar = contextvars.ContextVar("rewind_call_source", default=None)
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


# --- the wire answer of a recorded call -----------------------------------------------------------

def _chat_body(call: dict, body: dict, stream: bool) -> tuple:
    text, model = call.get("response_text") or "", body.get("model") or call.get("model")
    usage = {"prompt_tokens": int(call.get("prompt_tokens") or 0),
             "completion_tokens": int(call.get("completion_tokens") or 0)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    head = {"id": "chatcmpl-rewind-replay", "created": 0, "model": model}
    if not stream:
        payload = {**head, "object": "chat.completion", "usage": usage, "choices": [{
            "index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
            "logprobs": None, "finish_reason": "stop"}]}
        return "application/json", json.dumps(payload, ensure_ascii=False).encode("utf-8")

    def event(choices: list, **extra) -> bytes:
        chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
        return b"data: " + json.dumps(chunk, ensure_ascii=False).encode("utf-8") + b"\n\n"

    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    parts = [event([{"index": 0, "delta": {"role": "assistant", "content": text},
                     "logprobs": None, "finish_reason": None}]),
             event([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}])]
    if include_usage:
        parts.append(event([], usage=usage))
    parts.append(b"data: [DONE]\n\n")
    return "text/event-stream; charset=utf-8", b"".join(parts)


def _responses_body(call: dict, body: dict, stream: bool) -> tuple:
    from .sim import responses

    p, c = int(call.get("prompt_tokens") or 0), int(call.get("completion_tokens") or 0)
    completion = SimpleNamespace(text=call.get("response_text") or "", finish_reason="stop",
                                 prompt_tokens=p, completion_tokens=c, total_tokens=p + c)
    model = body.get("model") or call.get("model")
    if not stream:
        payload = responses._response("rewind-replay", model, body, completion)
        return "application/json", json.dumps(payload, ensure_ascii=False).encode("utf-8")
    return ("text/event-stream; charset=utf-8",
            b"".join(responses._events("rewind-replay", model, body, completion)))


def wire_response(request: Any, api: str, call: dict, body: dict) -> Any:
    """The HTTP response a server would have sent for this recorded call, of the same HTTP
    library the client uses (httpx2, or httpx for a client given one)."""
    build = _responses_body if api == "responses" else _chat_body
    content_type, content = build(call, body, bool(body.get("stream")))
    lib = importlib.import_module(type(request).__module__.split(".")[0])
    return lib.Response(200, headers={"content-type": content_type,
                                      "x-request-id": "req_rewind_replay"},
                        content=content, request=request)


# --- the hook on openai's request path ------------------------------------------------------------

def _api_of(options: Any) -> Optional[str]:
    if str(getattr(options, "method", "")).lower() != "post":
        return None
    path = str(getattr(options, "url", "") or "").split("?", 1)[0].rstrip("/")
    return next((api for suffix, api in _APIS if path.endswith(suffix)), None)


def _body_of(request: Any) -> dict:
    try:
        data = json.loads(request.content or b"{}")
    except (ValueError, AttributeError):
        return {}
    return data if isinstance(data, dict) else {}


@contextlib.contextmanager
def _sending(client: Any, send: Any) -> Iterator[None]:
    """Give `client` this `_send_request` for one call (an instance attribute shadows the
    class's; whatever the instance had is put back)."""
    had = "_send_request" in client.__dict__
    before = client.__dict__.get("_send_request")
    client._send_request = send
    try:
        yield
    finally:
        if had:
            client._send_request = before
        else:
            client.__dict__.pop("_send_request", None)


def _wrap_sync(original):
    @functools.wraps(original)
    def request(self, cast_to, options, *args, **kwargs):
        source = _active.get()
        api = _api_of(options) if source is not None else None
        if api is None:
            return original(self, cast_to, options, *args, **kwargs)
        live = self._send_request

        def send(request, *, stream, **kw):
            body = _body_of(request)
            call = source.answer(api, body)
            return live(request, stream=stream, **kw) if call is None else wire_response(request, api, call, body)

        with _sending(self, send):
            return original(self, cast_to, options, *args, **kwargs)

    request._rewind_cassette = True
    return request


def _wrap_async(original):
    @functools.wraps(original)
    async def request(self, cast_to, options, *args, **kwargs):
        source = _active.get()
        api = _api_of(options) if source is not None else None
        if api is None:
            return await original(self, cast_to, options, *args, **kwargs)
        live = self._send_request

        async def send(request, *, stream, **kw):
            body = _body_of(request)
            call = source.answer(api, body)
            if call is None:
                return await live(request, stream=stream, **kw)
            return wire_response(request, api, call, body)

        with _sending(self, send):
            return await original(self, cast_to, options, *args, **kwargs)

    request._rewind_cassette = True
    return request


def install() -> None:
    """Put the hook on openai's base clients (checked on the classes themselves, not with a
    flag: a process that re-imports openai has new classes to hook)."""
    from openai import _base_client as base

    with _install_lock:
        if not getattr(base.SyncAPIClient.request, "_rewind_cassette", False):
            base.SyncAPIClient.request = _wrap_sync(base.SyncAPIClient.request)
        if not getattr(base.AsyncAPIClient.request, "_rewind_cassette", False):
            base.AsyncAPIClient.request = _wrap_async(base.AsyncAPIClient.request)
