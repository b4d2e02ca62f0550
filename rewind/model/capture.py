"""Metering of every openai client inside a step, the user's own `openai.OpenAI(...)` included.

Owns `install()`: a wrapper, put once on the request path of openai's base clients
(`SyncAPIClient.request`, `AsyncAPIClient.request`), that does nothing unless a step meter is
active (`rewind.model.metering`). Inside a step, each `chat.completions.create` and `responses.create`
call (streaming or not, sync or async) is recorded on the meter as a `ModelCall` and its tokens
are the usage the server reported; a server that reports none is counted with o200k, marked
`usage_reported=False`. The call keeps its raw reply (status, the headers that matter, the body
or a stream's event frames, as `rewind.model.calls`'s tap sees the response come back), so the
model-call cache and a snapshot replay can serve it again exactly, and whether it was `served`
from a recording. The user changes no code: `install` runs when a meter opens, and
`rewind.llm.chat` (which goes through the same client class) is metered by this same path.

Limits: a stream is recorded when the caller finishes (or closes) iterating it (a stream
closed before its end keeps no raw reply: served again it would end early); raw-response streams (`with_streaming_response`) are not read, so not metered; openai imported for the first
time inside a node is hooked from the next step on.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import time
from typing import Any, Optional

from . import calls as transport
from .metering import ModelCall, current_meter, on_meter_open, record_call
from ..redaction import redact

_APIS = (("/chat/completions", "chat.completions"), ("/responses", "responses"))
_install_lock = threading.Lock()
_installed = False


def install() -> bool:
    """Hook openai's clients (once, if openai is imported); True when the hook is in place."""
    global _installed
    if _installed:
        return True
    if "openai" not in sys.modules:
        return False
    with _install_lock:
        if _installed:
            return True
        from openai import _base_client as base

        base.SyncAPIClient.request = _wrap_sync(base.SyncAPIClient.request)
        base.AsyncAPIClient.request = _wrap_async(base.AsyncAPIClient.request)
        _installed = True
    transport.install()  # the transport hook that shows this one each raw response
    return True


on_meter_open(install)


def _api_of(options: Any) -> Optional[str]:
    if str(getattr(options, "method", "")).lower() != "post":
        return None
    url = str(getattr(options, "url", "") or "")
    path = url.split("?", 1)[0].rstrip("/")
    for suffix, api in _APIS:
        if path.endswith(suffix):
            return api
    return None


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _jsonable(dump())
    return str(value)


class _Call:
    """One request in flight: what was sent, and what has come back so far."""

    def __init__(self, api: str, options: Any, meter):
        self.api, self.meter = api, meter
        body = dict(getattr(options, "json_data", None) or {})
        body.update(getattr(options, "extra_json", None) or {})
        self.body = body
        self.started = time.perf_counter()
        self.parts: list = []
        self.text: Optional[str] = None
        self.usage = None
        self.served = False
        self._response: Any = None  # the last HTTP response of the call (a retry replaces it)
        self._body: list = []
        self._complete = False

    def tap(self, response: Any, served: Optional[dict]) -> None:
        """See the HTTP response come back (`rewind.model.calls.tapping`): keep its body, or
        tee its bytes as the SDK reads a stream (decoded bytes: the body is kept decoded)."""
        self.served, self._response, self._body, self._complete = served is not None, response, [], False
        try:
            self._body, self._complete = [response.content], True  # read already: not a stream
            return
        except Exception:  # noqa: BLE001 - httpx's ResponseNotRead: a stream, read later
            pass
        sync_iter, async_iter, call = response.iter_bytes, response.aiter_bytes, self

        def iter_bytes(*args, **kwargs):
            for chunk in sync_iter(*args, **kwargs):
                call._body.append(chunk)
                yield chunk
            call._complete = True

        async def aiter_bytes(*args, **kwargs):
            async for chunk in async_iter(*args, **kwargs):
                call._body.append(chunk)
                yield chunk
            call._complete = True

        response.iter_bytes, response.aiter_bytes = iter_bytes, aiter_bytes

    def _raw(self) -> Optional[dict]:
        if self._response is None:
            return None
        body = b"".join(self._body)
        # the SDK stops reading a chat stream at its [DONE] frame: that is its end too
        if not (self._complete or b"data: [DONE]" in body):
            return None
        try:
            return transport.raw_reply(self._response.status_code, self._response.headers, body)
        except Exception:  # noqa: BLE001 - metering must never break the user's call
            return None

    def _messages(self) -> list:
        from . import sim
        from .sim.responses import messages_of

        try:
            if self.api == "responses":
                return messages_of(self.body)
            return sim.normalize_messages(self.body.get("messages"))
        except (ValueError, TypeError):
            return _jsonable(self.body.get("messages") or self.body.get("input") or [])

    def absorb(self, item: Any) -> None:
        """Take what a streamed chunk or event carries: text deltas and the final usage."""
        if self.api == "chat.completions":
            for choice in getattr(item, "choices", None) or []:
                delta = getattr(choice, "delta", None)
                if getattr(choice, "index", 0) == 0 and delta is not None and getattr(delta, "content", None):
                    self.parts.append(delta.content)
            if getattr(item, "usage", None) is not None:
                self.usage = item.usage
            return
        kind = getattr(item, "type", "")
        if kind == "response.output_text.delta":
            self.parts.append(getattr(item, "delta", "") or "")
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = getattr(item, "response", None)
            if response is not None:
                self.usage = getattr(response, "usage", None)
                self.text = getattr(response, "output_text", None)

    def take(self, result: Any) -> None:
        """Take a whole (non-streamed) response."""
        if self.api == "chat.completions":
            choices = getattr(result, "choices", None) or []
            message = getattr(choices[0], "message", None) if choices else None
            self.text = (getattr(message, "content", None) or "") if message is not None else ""
        else:
            self.text = getattr(result, "output_text", None) or ""
        self.usage = getattr(result, "usage", None)

    def finish(self, error: Optional[BaseException] = None) -> None:
        from . import sim

        text = self.text if self.text is not None else "".join(self.parts)
        messages = self._messages()
        usage, reported = self.usage, self.usage is not None
        if reported:
            prompt = getattr(usage, "prompt_tokens", None)
            if prompt is None:
                prompt = getattr(usage, "input_tokens", 0)
            completion = getattr(usage, "completion_tokens", None)
            if completion is None:
                completion = getattr(usage, "output_tokens", 0)
        elif error is None:
            # No usage from the server (a stream without include_usage, a minimal compatible
            # server): an o200k count, so a step that called a model never looks free.
            norm = messages if isinstance(messages, list) and all(isinstance(m, dict) for m in messages) else []
            prompt, completion = sim.count_prompt_tokens(norm), sim.count_tokens(text)
        else:
            prompt = completion = 0
        params = {k: _jsonable(v) for k, v in self.body.items()
                  if k not in ("model", "messages", "input", "instructions")}
        record_call(ModelCall(
            api=self.api, model=str(self.body.get("model") or ""), messages=_jsonable(messages),
            params=params, response_text=text, prompt_tokens=int(prompt or 0),
            completion_tokens=int(completion or 0),
            latency_ms=(time.perf_counter() - self.started) * 1000, usage_reported=reported,
            error=None if error is None else redact(f"{type(error).__name__}: {error}"),
            served=self.served, raw=None if error is not None else self._raw(),
        ), self.meter)


def _is_stream(result: Any) -> bool:
    from openai import AsyncStream, Stream

    return isinstance(result, (Stream, AsyncStream))


def _is_raw(result: Any) -> bool:
    from openai._legacy_response import LegacyAPIResponse
    from openai._response import BaseAPIResponse

    return isinstance(result, (LegacyAPIResponse, BaseAPIResponse))


def _tee_sync(iterator, call: _Call):
    error = None
    try:
        for item in iterator:
            call.absorb(item)
            yield item
    except GeneratorExit:
        raise
    except BaseException as e:
        error = e
        raise
    finally:
        call.finish(error)


async def _tee_async(iterator, call: _Call):
    error = None
    try:
        async for item in iterator:
            call.absorb(item)
            yield item
    except GeneratorExit:
        raise
    except BaseException as e:
        error = e
        raise
    finally:
        call.finish(error)


def _observe(call: _Call, result: Any) -> Any:
    if _is_stream(result):
        tee = _tee_async if hasattr(result._iterator, "__anext__") else _tee_sync
        result._iterator = tee(result._iterator, call)
        return result
    if _is_raw(result):
        if getattr(result, "_stream", False) or inspect.iscoroutinefunction(getattr(result, "parse", None)):
            return result  # a raw stream, or an async raw response: its body is the caller's to read
        try:
            call.take(result.parse())
        except Exception:  # noqa: BLE001 - metering must never break the user's call
            pass
        call.finish()
        return result
    call.take(result)
    call.finish()
    return result


def _wrap_sync(original):
    if getattr(original, "_rewind_metered", False):
        return original

    @functools.wraps(original)
    def request(self, cast_to, options, *args, **kwargs):
        meter = current_meter()
        api = _api_of(options) if meter is not None else None
        if api is None:
            return original(self, cast_to, options, *args, **kwargs)
        call = _Call(api, options, meter)
        try:
            with transport.tapping(call.tap):
                result = original(self, cast_to, options, *args, **kwargs)
        except BaseException as e:
            call.finish(e)
            raise
        return _observe(call, result)

    request._rewind_metered = True
    return request


def _wrap_async(original):
    if getattr(original, "_rewind_metered", False):
        return original

    @functools.wraps(original)
    async def request(self, cast_to, options, *args, **kwargs):
        meter = current_meter()
        api = _api_of(options) if meter is not None else None
        if api is None:
            return await original(self, cast_to, options, *args, **kwargs)
        call = _Call(api, options, meter)
        try:
            with transport.tapping(call.tap):
                result = await original(self, cast_to, options, *args, **kwargs)
        except BaseException as e:
            call.finish(e)
            raise
        return _observe(call, result)

    request._rewind_metered = True
    return request
