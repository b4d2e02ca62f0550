"""Serving a snapshot's model and tool calls to a replay, and recording the ones it lacks.

Owns `Cassette` (the recorded calls of one snapshot, served in recorded order per request),
the record modes (`none`: a call the snapshot lacks fails, naming the request; `new`: it goes
to the configured model and is recorded; `all`: every call goes to the model, as vcrpy's
modes), and `MissingCall`.

Model calls are caught on openai's request path, so `rewind.llm.chat` and a user's own
`openai.OpenAI(...)` client inside a node are both served: `install()` wraps
`SyncAPIClient.request` / `AsyncAPIClient.request` once; while a cassette is active, a chat
completions or Responses request is answered by giving the client, for that one call, a
`_send_request` that returns the recorded text as the wire response (JSON or server-sent
events). The SDK still builds the request and parses the answer, and `rewind.openai_meter`
still records the call on the step. Tool calls (`rewind.tool`) are served through the step
meter's `tool_store`, which this class implements (`tool_cache_get` / `tool_cache_put`).

A request's identity is (api, model, messages as the meter records them, every other request
field except `stream` and `stream_options`): a streamed and a plain call of the same request
are the same call.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import functools
import importlib
import json
import threading
from types import SimpleNamespace
from typing import Any, Iterator, Optional

from ..errors import OperationError, RewindError
from ..hashing import canonical_hash, to_canonical
from .format import decode_value, encode_value

NONE, NEW, ALL = "none", "new", "all"
RECORD_MODES = (NONE, NEW, ALL)
_APIS = (("/chat/completions", "chat.completions"), ("/responses", "responses"))
_NOT_KEYED = ("stream", "stream_options")
CALL_FIELDS = ("api", "model", "messages", "params", "response_text", "prompt_tokens",
               "completion_tokens")

_active: contextvars.ContextVar[Optional["Cassette"]] = contextvars.ContextVar(
    "rewind_cassette", default=None)
_install_lock = threading.Lock()


class MissingCall(OperationError):
    """A model or tool call a replay made that the snapshot does not hold (record mode none)."""

    def __init__(self, message: str, *, kind: str, node: str, request: dict):
        super().__init__(message, node=node)
        self.kind, self.request = kind, request


def call_key(api: str, model: str, messages: Any, params: dict) -> str:
    keyed = {k: v for k, v in (params or {}).items() if k not in _NOT_KEYED}
    return canonical_hash({"api": api, "model": model, "messages": messages, "params": keyed})


def snapshot_call(call: Any) -> dict:
    """A recorded model call (a `ModelCall` or its dict) as the snapshot keeps it."""
    d = call.to_dict() if hasattr(call, "to_dict") else dict(call)
    # one spelling per number: a call read back from the store has 0 where a live one has 0.0
    return to_canonical({k: d.get(k) for k in CALL_FIELDS}, "call")


def request_text(call: dict) -> str:
    """A request as lines a reader can diff: model, params, then each message."""
    lines = [f"api: {call.get('api')}", f"model: {call.get('model')}"]
    for k, v in sorted((call.get("params") or {}).items()):
        if k not in _NOT_KEYED:
            lines.append(f"{k}: {json.dumps(v, ensure_ascii=False)}")
    for m in call.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else m
        role = m.get("role") if isinstance(m, dict) else "?"
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        lines.append(f"[{role}]")
        lines.extend(text.splitlines() or [""])
    return "\n".join(lines)


def request_diff(before: dict, after: dict, context: int = 2) -> str:
    return "\n".join(difflib.unified_diff(
        request_text(before).splitlines(), request_text(after).splitlines(),
        "recorded request", "new request", n=context, lineterm=""))


class Cassette:
    """The calls of one snapshot, served to one replay; what was recorded anew is kept."""

    def __init__(self, steps: list, mode: str = NONE):
        if mode not in RECORD_MODES:
            raise ValueError(f"record mode must be one of {', '.join(RECORD_MODES)}, not {mode!r}")
        self.mode = mode
        self._calls: dict = {}
        self._cursor: dict = {}
        self._tools: dict = {}
        self._by_step: dict = {}
        for s in steps:
            step_calls = [c for c in s.get("calls") or [] if c.get("response_text") is not None]
            self._by_step[(s["node"], s.get("occurrence", 1))] = step_calls
            for c in step_calls:
                key = call_key(c.get("api") or "chat.completions", c.get("model") or "",
                               c.get("messages"), c.get("params") or {})
                self._calls.setdefault(key, []).append(c)
            for t in s.get("tools") or []:
                self._tools.setdefault((t["tool"], t["args_hash"]), t["result"])
        self.node: Optional[str] = None
        self.occurrence = 1
        self.misses: list = []
        self.step_tools: list = []
        self.served_calls = 0

    @contextlib.contextmanager
    def active(self) -> Iterator["Cassette"]:
        install()
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)

    @contextlib.contextmanager
    def step(self, node: str, occurrence: int) -> Iterator[list]:
        """Calls made inside belong to this step; yields the step's tool calls as recorded."""
        self.node, self.occurrence, self.step_tools = node, occurrence, []
        try:
            yield self.step_tools
        finally:
            self.node = None

    # --- model calls ---------------------------------------------------------------------------
    def answer(self, api: str, body: dict) -> Optional[dict]:
        """The recorded call for this request, None to make it live, or `MissingCall`."""
        request = _request_of(api, body)
        if self.mode == ALL:
            return None
        key = call_key(api, request["model"], request["messages"], request["params"])
        got = self._calls.get(key)
        if got:
            i = self._cursor.get(key, 0)
            self._cursor[key] = i + 1
            self.served_calls += 1
            return got[min(i, len(got) - 1)]  # repeats past the recording get its last answer
        if self.mode == NEW:
            return None
        raise self._miss("model", request, self._missing_model_message(request))

    def _missing_model_message(self, request: dict) -> str:
        msg = (f"node {self.node!r}: model call not in the snapshot: {request['api']} "
               f"model={request['model']!r}")
        nearest = self._nearest(request)
        if nearest is not None:
            msg += "\n" + request_diff(nearest, request)
        else:
            msg += "\n" + request_text(request)
        return msg + ("\nrecord it through the configured model with `pytest "
                      "--rewind-record=new` (rewrites the snapshot)")

    def _nearest(self, request: dict) -> Optional[dict]:
        """The recorded call this request most likely replaces: this step's, by similarity."""
        pool = self._by_step.get((self.node, self.occurrence)) or [
            c for (n, _), cs in self._by_step.items() if n == self.node for c in cs]
        if not pool:
            return None
        text = request_text(request)
        return max(pool, key=lambda c: difflib.SequenceMatcher(
            None, request_text(c), text, autojunk=False).ratio())

    def _miss(self, kind: str, request: dict, message: str) -> MissingCall:
        err = MissingCall(message, kind=kind, node=self.node or "?", request=request)
        self.misses.append(err)
        return err

    # --- tool calls (the step meter's tool_store) ---------------------------------------------
    def tool_cache_get(self, tool: str, args_hash: str, ttl: Any, now: float):
        if self.mode != ALL and (tool, args_hash) in self._tools:
            data = self._tools[(tool, args_hash)]
            self.step_tools.append({"tool": tool, "args_hash": args_hash, "result": data})
            return (decode_value(data),)
        if self.mode != NONE:
            return None  # the tool runs, and tool_cache_put records its result
        raise self._miss("tool", {"tool": tool, "args_hash": args_hash}, (
            f"node {self.node!r}: tool call not in the snapshot: {tool} (arguments hash "
            f"{args_hash[:12]}); its arguments differ from every recorded call of it. Record "
            "it with `pytest --rewind-record=new` (rewrites the snapshot)"))

    def tool_cache_put(self, tool: str, args_hash: str, result: Any, now: float) -> None:
        data = encode_value(result, tool)
        self._tools[(tool, args_hash)] = data
        self.step_tools.append({"tool": tool, "args_hash": args_hash, "result": data})


def _request_of(api: str, body: dict) -> dict:
    from .. import sim
    from ..sim.responses import messages_of

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
    from ..sim import responses

    p, c = int(call.get("prompt_tokens") or 0), int(call.get("completion_tokens") or 0)
    completion = SimpleNamespace(text=call.get("response_text") or "", finish_reason="stop",
                                 prompt_tokens=p, completion_tokens=c, total_tokens=p + c)
    model = body.get("model") or call.get("model")
    if not stream:
        payload = responses._response("rewind-replay", model, body, completion)
        return "application/json", json.dumps(payload, ensure_ascii=False).encode("utf-8")
    return ("text/event-stream; charset=utf-8",
            b"".join(responses._events("rewind-replay", model, body, completion)))


def _wire_response(request: Any, api: str, call: dict, body: dict) -> Any:
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
        cassette = _active.get()
        api = _api_of(options) if cassette is not None else None
        if api is None:
            return original(self, cast_to, options, *args, **kwargs)
        live = self._send_request

        def send(request, *, stream, **kw):
            body = _body_of(request)
            call = cassette.answer(api, body)
            return live(request, stream=stream, **kw) if call is None else _wire_response(request, api, call, body)

        with _sending(self, send):
            return original(self, cast_to, options, *args, **kwargs)

    request._rewind_cassette = True
    return request


def _wrap_async(original):
    @functools.wraps(original)
    async def request(self, cast_to, options, *args, **kwargs):
        cassette = _active.get()
        api = _api_of(options) if cassette is not None else None
        if api is None:
            return await original(self, cast_to, options, *args, **kwargs)
        live = self._send_request

        async def send(request, *, stream, **kw):
            body = _body_of(request)
            call = cassette.answer(api, body)
            if call is None:
                return await live(request, stream=stream, **kw)
            return _wire_response(request, api, call, body)

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
