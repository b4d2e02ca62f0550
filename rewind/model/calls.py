"""A model call's identity, and answering a call without sending it.

While a *call source* is active (`serving(source)`: the model-call cache of a re-executing node,
a snapshot's cassette), every model request a step makes, through any client, is first offered
to `source.answer(api, body)` by the hook on the HTTP layer (`rewind.model.http`): a recorded
call (a dict) is handed back to the client as the HTTP response it was, and None sends it.

A recorded call carries its raw reply (`raw`: status, the headers that matter, the body as it
came off the wire: JSON, or the server-sent events of a stream, frame for frame), so a served
call is parsed by the SDK exactly as the first time: tool calls, content blocks, stop reasons,
ids, usage. An OpenAI call served to a request of the other shape (a recorded stream to a plain
request, or back) is converted, keeping those fields (`providers.openai`); another provider's
is served only to a request of its own shape. A call recorded before raw replies were kept is
served, for OpenAI's APIs, as a reply with its text and usage.

A request's identity (`call_key`) is (api, model, messages as the meter records them, every
other request field except `stream` and `stream_options`).
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import importlib
import json
from typing import Any, Iterator, Optional

from ..keys import canonical_hash
from . import providers
from .providers import openai as openai_wire
from .providers.sse import SSE

NOT_KEYED = ("stream", "stream_options")
# The response headers a served reply carries again: how to parse the body, and the request id
# an SDK exposes. Not content-length/-encoding (the body is kept decoded), not cookies or
# rate-limit state.
KEPT_HEADERS = ("content-type", "x-request-id", "request-id", "openai-processing-ms", "openai-version",
                "anthropic-version")

_active: contextvars.ContextVar = contextvars.ContextVar("rewind_call_source", default=None)


def call_key(api: str, model: str, messages: Any, params: dict) -> str:
    keyed = {k: v for k, v in (params or {}).items() if k not in NOT_KEYED}
    return canonical_hash({"api": api, "model": model, "messages": messages, "params": keyed})


def active_source() -> Any:
    """The call source answering requests here now (None: every request is sent)."""
    return _active.get()


@contextlib.contextmanager
def serving(source: Any) -> Iterator[Any]:
    """Offer every model request made inside a step in the block to `source.answer(api, body)`
    (the hook is put on when a step's meter opens: `rewind.model.http`)."""
    token = _active.set(source)
    try:
        yield source
    finally:
        _active.reset(token)


def request_of(api: str, body: dict) -> dict:
    """{api, model, messages, params} of a request body: what a call is keyed and recorded by."""
    return providers.request_of(api, body)


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


def recorded_reply(call: dict) -> Optional[dict]:
    """The reply object of a recorded call (an OpenAI stream added up; another provider's stream
    as its list of events), from its raw reply; None where none was kept or it does not parse."""
    raw = call.get("raw") if isinstance(call, dict) else None
    content = raw_body(raw)
    if content is None:
        return None
    api = call.get("api") or "chat.completions"
    try:
        if SSE in str((raw.get("headers") or {}).get("content-type") or ""):
            if api == "responses":
                return openai_wire.response_from_stream(content)
            if api == "chat.completions":
                return openai_wire.chat_from_stream(content)
            from .providers.sse import json_events

            return {"events": json_events(content)}
        reply = json.loads(content)
    except (ValueError, TypeError, AttributeError, KeyError):
        return None
    return reply if isinstance(reply, dict) else {"reply": reply}


def _recorded_wire(api: str, call: dict, body: dict) -> Optional[tuple]:
    """(status, headers, body) of a call's raw reply in the shape this request expects, or None
    (no raw reply kept, or one that cannot be reshaped)."""
    raw = call.get("raw")
    content = raw_body(raw)
    if content is None:
        return None
    headers = dict(raw.get("headers") or {})
    stream = providers.is_stream_request(api, body)
    if (SSE in str(headers.get("content-type") or "")) != stream:
        if api not in ("chat.completions", "responses"):
            return None  # another provider's stream and plain replies are not converted
        try:
            content = openai_wire.reshaped(api, content, stream, body)
        except (ValueError, TypeError, AttributeError, KeyError):
            return None
        headers["content-type"] = (SSE + "; charset=utf-8") if stream else "application/json"
    return int(raw.get("status") or 200), headers, content


def wire_response(request: Any, api: str, call: dict, body: dict) -> Any:
    """The HTTP response of this recorded call, of the HTTP library the client uses (httpx2 or
    httpx): its raw reply where it was kept, else (OpenAI's APIs) one built from its text; None
    when it cannot be served (the request is then sent)."""
    lib = importlib.import_module(type(request).__module__.split(".")[0])
    recorded = _recorded_wire(api, call, body)
    if recorded is not None:
        status, headers, content = recorded
        return lib.Response(status, headers=headers, content=content, request=request)
    if api not in ("chat.completions", "responses"):
        return None
    build = openai_wire.responses_body if api == "responses" else openai_wire.chat_body
    content_type, content = build(call, body, bool(body.get("stream")))
    return lib.Response(200, headers={"content-type": content_type, "x-request-id": "req_rewind_replay"},
                        content=content, request=request)
