"""Recording one model call from its HTTP exchange: what was sent, what came back, its tokens.

`Call` is made by the hook on the HTTP layer (`rewind.model.http`) for each model request a step
sends, through any client. It watches the response as the client reads it (a plain reply is
read already; a stream's bytes are teed as the SDK iterates them, decoded), and when the reply
is complete (or the stream is closed, or the request failed) records a `ModelCall` on the step's
meter: api, model, messages, params, reply text and tool calls, raw reply (status, headers that
matter, body or event frames, to serve it again exactly), whether it was served from a
recording, and tokens. Tokens are the usage the server reported; a reply with none (a stream
without `include_usage`, an endpoint that reports none) is counted with o200k the way the
simulator counts and marked `usage_reported=False`, which the step and the dashboard say.
Nothing here ever breaks the user's call: a reply that does not parse records what it can.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from ..redaction import redact
from . import calls, providers
from .metering import ModelCall, record_call
from .providers.sse import SSE


def _text_of(content: Any) -> str:
    """The text inside a message's content, whatever its provider's spelling (blocks, parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(_text_of(c) for c in content)
    if isinstance(content, dict):
        for key in ("text", "content", "input", "parts"):
            if key in content:
                return _text_of(content[key])
    return ""


def estimate(messages: Any, text: str) -> tuple:
    """(prompt, completion) tokens counted with o200k as OpenAI's chat accounting does."""
    from .sim import count_prompt_tokens, count_tokens

    norm = [{"role": str(m.get("role") or ""), "content": _text_of(m.get("content"))}
            for m in (messages if isinstance(messages, list) else []) if isinstance(m, dict)]
    return count_prompt_tokens(norm), count_tokens(text or "")


class Call:
    """One model request in flight: what was sent, and what has come back so far."""

    def __init__(self, api: str, body: dict, meter: Any):
        self.api, self.body, self.meter = api, body, meter
        self.started = time.perf_counter()
        self.served: Optional[dict] = None
        self._response: Any = None
        self._chunks: list = []
        self._done = False

    def failed(self, error: BaseException) -> None:
        """The request raised before a response (a connection refused, a timeout)."""
        self._record(None, error=f"{type(error).__name__}: {error}")

    def watch(self, response: Any, served: Optional[dict]) -> None:
        """See `response` come back: record it now when it is read, else as it is read."""
        if self.meter is None:
            return
        self.served, self._response = served, response
        try:
            content = response.content  # read already: not a stream
        except Exception:  # noqa: BLE001 - httpx's ResponseNotRead: a stream, read later
            self._tee(response)
            return
        self._finish(content, complete=True)

    def _tee(self, response: Any) -> None:
        sync_iter, async_iter = response.iter_bytes, response.aiter_bytes
        sync_close, async_close = response.close, response.aclose
        call = self

        def consumed() -> bool:  # the HTTP library read the body to its end
            return bool(getattr(response, "is_stream_consumed", False))

        def iter_bytes(*args, **kwargs):
            complete = False
            try:
                for chunk in sync_iter(*args, **kwargs):
                    call._chunks.append(chunk)
                    yield chunk
                complete = True
            finally:  # also when the reader stops early (the generator is closed)
                call._finish(b"".join(call._chunks), complete=complete)

        async def aiter_bytes(*args, **kwargs):
            complete = False
            try:
                async for chunk in async_iter(*args, **kwargs):
                    call._chunks.append(chunk)
                    yield chunk
                complete = True
            finally:
                call._finish(b"".join(call._chunks), complete=complete)

        # httpx closes a response from inside its last read: a close after the body was read to
        # its end is a whole reply (the reader has the decoded bytes, or is about to)
        def close():
            try:
                sync_close()
            finally:
                call._finish(b"".join(call._chunks), complete=consumed())

        async def aclose():
            try:
                await async_close()
            finally:
                call._finish(b"".join(call._chunks), complete=consumed())

        response.iter_bytes, response.aiter_bytes = iter_bytes, aiter_bytes
        response.close, response.aclose = close, aclose

    def _finish(self, content: bytes, complete: bool) -> None:
        if self._done:
            return
        response = self._response
        status = int(getattr(response, "status_code", 0) or 0)
        if status >= 400:
            excerpt = content[:300].decode("utf-8", "replace")
            self._record(None, error=f"HTTP {status}: {excerpt}")
            return
        headers = getattr(response, "headers", {}) or {}
        streamed = SSE in str(headers.get("content-type") or "") or providers.is_stream_request(self.api, self.body)
        # an SDK may stop reading at a stream's final frame ([DONE], response.completed,
        # message_stop) and close it: that is its end too
        complete = complete or providers.stream_ended(self.api, content)
        reply = providers.read_reply(self.api, self.body, content, streamed)
        raw = None
        if complete:
            try:
                raw = calls.raw_reply(status or 200, headers, content)
            except Exception:  # noqa: BLE001 - metering must never break the user's call
                raw = None
        self._record(reply, raw=raw)

    def _record(self, reply: Optional[providers.Reply], error: Optional[str] = None,
                raw: Optional[dict] = None) -> None:
        if self._done or self.meter is None:
            return
        self._done = True
        request = providers.request_of(self.api, self.body)
        latency_ms = (time.perf_counter() - self.started) * 1000
        prompt = completion = 0
        reported = reply is not None and reply.prompt_tokens is not None
        if reported:
            prompt, completion = reply.prompt_tokens or 0, reply.completion_tokens or 0
        elif reply is not None:
            # no usage from the server: an o200k count (Rewind's own work, not the node's
            # latency), so a step that called a model never looks free
            t0 = time.perf_counter()
            prompt, completion = estimate(request["messages"], reply.text)
            self.meter.init_ms += (time.perf_counter() - t0) * 1000
        record_call(ModelCall(
            api=self.api, model=request["model"], messages=request["messages"],
            params=request["params"], response_text=reply.text if reply is not None else "",
            prompt_tokens=int(prompt), completion_tokens=int(completion), latency_ms=latency_ms,
            usage_reported=reported, error=None if error is None else redact(error),
            served=self.served is not None, raw=raw,
            tool_calls=list(reply.tool_calls) if reply is not None else [],
            stop_reason=reply.stop_reason if reply is not None else None,
            usage=reply.usage if reply is not None else None,
        ), self.meter)
