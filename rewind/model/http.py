"""The hook on the HTTP layer every model SDK shares: how model calls are captured and served.

openai, anthropic and google-genai send through an `httpx2` client; litellm's native paths,
langchain's and a user's own raw calls through `httpx`. Both libraries' `Client.send` and
`AsyncClient.send` are wrapped once per process (`install`, run when a step's meter opens),
and the wrapper does nothing unless a step is metering or a call source is serving. Inside a
step, each request `providers.identify` names a model call is:

1. offered to the active call source (`rewind.model.calls.serving`): a recorded call comes
   back as the HTTP response it was, and nothing is sent;
2. otherwise sent as the client would send it;
3. watched as its reply is read (`rewind.model.capture`), then recorded on the step's meter
   with its request, reply, raw wire bytes and usage, served or sent.

The user changes no code. Limits: a client of another HTTP library (requests, aiohttp: the
async path of google-genai when aiohttp is installed) is not seen; a streamed reply is recorded
when the caller has read it to its end or closed it.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.util
import json
import threading
import time
from typing import Any, Optional

from . import calls, capture, providers
from .metering import current_meter, on_meter_open

_LIBS = ("httpx2", "httpx")
_lock = threading.Lock()
# set while one send is handled: a client whose send calls another hooked client's is seen once
_in_send: contextvars.ContextVar = contextvars.ContextVar("rewind_in_http_send", default=False)


def install() -> float:
    """Wrap `send` of each HTTP library installed here, once; returns the seconds that took (0.0
    once done). Run when a step's meter opens, which keeps that out of the node's latency, and
    by `rewind.llm.warm_up`."""
    started = time.perf_counter()
    done = False
    for name in _LIBS:
        if importlib.util.find_spec(name) is None:
            continue
        lib = importlib.import_module(name)
        for cls, wrap in ((lib.Client, _wrap_sync), (lib.AsyncClient, _wrap_async)):
            if not getattr(cls.send, "_rewind_http", False):
                with _lock:
                    if not getattr(cls.send, "_rewind_http", False):
                        cls.send = wrap(cls.send)
                        done = True
    return time.perf_counter() - started if done else 0.0


on_meter_open(install)


def _model_request(request: Any) -> Optional[tuple]:
    """(api, body) when `request` is a model call, else None."""
    if str(getattr(request, "method", "")).upper() != "POST":
        return None
    try:
        content = request.content
    except Exception:  # noqa: BLE001 - a streamed upload: not a model request body
        return None
    if not content or content[:1] not in (b"{", b" ", b"\n"):
        return None
    try:
        body = json.loads(content)
    except ValueError:
        return None
    path = str(getattr(getattr(request, "url", None), "path", "") or "")
    api = providers.identify("POST", path, body)
    if api is None:
        return None
    if api.startswith("google."):  # Gemini names the model in the URL, not the body
        from .providers import google

        body = {**body, "_model": google.model_of(path)}
    return api, body


def _answer(request: Any, api: str, body: dict) -> tuple:
    """(response, served call) from the active call source, or (None, None)."""
    source = calls.active_source()
    if source is None:
        return None, None
    served = source.answer(api, body)
    if served is None:
        return None, None
    response = calls.wire_response(request, api, served, body)
    return (response, served) if response is not None else (None, None)


def _begin(request: Any) -> Optional[Any]:
    """The `capture.Call` of a model request to watch here, or None (let it through untouched:
    no step is metering and no source is serving, a send inside a send, not a model call)."""
    meter = current_meter()
    if (meter is None and calls.active_source() is None) or _in_send.get():
        return None
    seen = _model_request(request)
    return capture.Call(seen[0], seen[1], meter) if seen is not None else None


def _wrap_sync(original):
    @functools.wraps(original)
    def send(self, request, *args, **kwargs):
        call = _begin(request)
        if call is None:
            return original(self, request, *args, **kwargs)
        token = _in_send.set(True)
        try:
            response, served = _answer(request, call.api, call.body)
            if response is None:
                response = original(self, request, *args, **kwargs)
        except BaseException as e:
            call.failed(e)
            raise
        finally:
            _in_send.reset(token)
        call.watch(response, served)
        return response

    send._rewind_http = True
    return send


def _wrap_async(original):
    @functools.wraps(original)
    async def send(self, request, *args, **kwargs):
        call = _begin(request)
        if call is None:
            return await original(self, request, *args, **kwargs)
        token = _in_send.set(True)
        try:
            response, served = _answer(request, call.api, call.body)
            if response is None:
                response = await original(self, request, *args, **kwargs)
        except BaseException as e:
            call.failed(e)
            raise
        finally:
            _in_send.reset(token)
        call.watch(response, served)
        return response

    send._rewind_http = True
    return send
