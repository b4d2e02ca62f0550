"""Anthropic's Messages API for the offline model (`POST /v1/messages`), so an app written on the
`anthropic` SDK runs with no key against `rewind serve-llm` (or in-process), tokens counted.

The request's `system` and `messages` (text, or content blocks whose text is read) become the
chat messages the model answers; `max_tokens` is required, as Anthropic requires it. The reply
is a `message` with one text block, a stop reason (`end_turn`, or `max_tokens` when cut), and
usage (`input_tokens` as the simulator counts the prompt, `output_tokens`); streamed, it is
Anthropic's event sequence: message_start, content_block_start, content_block_delta (word-sized
text deltas), content_block_stop, message_delta (stop reason, output tokens), message_stop.
Errors are Anthropic's error objects. Tools are accepted and not called.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from . import controls
from .envelope import SimResponse
from .model import complete

_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
           404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error"}


def error(status: int, message: str) -> SimResponse:
    controls.bump("errors")
    body = {"type": "error", "error": {"type": _ERRORS.get(status, "api_error"), "message": message}}
    return SimResponse(status, {"content-type": "application/json", "request-id": f"req_sim_error_{status}",
                                "retry-after-ms": "1"},
                       json.dumps(body).encode("utf-8"))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    raise ValueError("content must be a string or a list of content blocks")


def _messages(body: dict) -> list:
    out = []
    if body.get("system"):
        out.append({"role": "system", "content": _text(body["system"])})
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: at least one message is required")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise ValueError(f"messages.{i}.role: must be 'user' or 'assistant'")
        out.append({"role": m["role"], "content": _text(m.get("content"))})
    return out


def _frame(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: ".encode() + json.dumps({"type": kind, **data}).encode("utf-8") + b"\n\n"


def create(body_bytes: bytes) -> SimResponse:
    failure = controls.injected_failure()
    if failure is not None:
        return error(failure, controls.failure_message(failure))
    try:
        body = json.loads(body_bytes or b"null")
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise ValueError("model: Field required")
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError("max_tokens: Field required (an integer >= 1)")
        temperature = body.get("temperature", 1.0)
        if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 1:
            raise ValueError("temperature: must be a number between 0 and 1")
        messages = _messages(body)
    except ValueError as exc:
        return error(400, str(exc))
    [result] = complete(model, messages, temperature=float(temperature), max_tokens=max_tokens)
    controls.bump("completions")
    ident = "msg_" + result.id.split("-", 1)[-1]
    stop = "max_tokens" if result.finish_reason == "length" else "end_turn"
    usage = {"input_tokens": result.prompt_tokens, "output_tokens": result.completion_tokens,
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    headers = {"request-id": "req_" + ident[4:]}
    message = {"id": ident, "type": "message", "role": "assistant", "model": model,
               "content": [{"type": "text", "text": result.text}], "stop_reason": stop,
               "stop_sequence": None, "usage": usage}
    if not body.get("stream"):
        return SimResponse(200, {**headers, "content-type": "application/json"},
                           json.dumps(message, ensure_ascii=False).encode("utf-8"))
    return SimResponse(200, {**headers, "content-type": "text/event-stream; charset=utf-8",
                             "cache-control": "no-cache"},
                       chunks=list(_events(message, result.text, usage)))


def _events(message: dict, text: str, usage: dict) -> Iterator[bytes]:
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield _frame("message_start", {"message": start})
    yield _frame("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    for piece in re.findall(r"\s*\S+|\s+$", text):  # word-sized pieces add up to the exact text
        yield _frame("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
    yield _frame("content_block_stop", {"index": 0})
    yield _frame("message_delta", {"delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                   "usage": {"output_tokens": usage["output_tokens"]}})
    yield _frame("message_stop", {})
