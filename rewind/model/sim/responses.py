"""OpenAI's Responses API (`POST /v1/responses`) for the offline model, streaming included.

Owns the translation between a Responses request (`input` as text or items, `instructions`,
`max_output_tokens`) and the chat messages the model reads, and the Response object and its
server-sent events (`response.created` ... `response.output_text.delta` ... `response.completed`,
whose `usage` is `input_tokens`/`output_tokens`). The text is the chat endpoint's text for the
same messages, so both APIs answer alike.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from . import controls
from .envelope import SimResponse, error, json_response
from .model import complete
from .sampling import normalize_messages


def messages_of(body: dict) -> list:
    """The chat messages a Responses request amounts to (`instructions` first, as system)."""
    msgs = []
    if body.get("instructions"):
        msgs.append({"role": "system", "content": str(body["instructions"])})
    data = body.get("input")
    if isinstance(data, str):
        msgs.append({"role": "user", "content": data})
    elif isinstance(data, list):
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                raise ValueError(f"input[{i}] must be an object")
            if item.get("type", "message") != "message" or "role" not in item:
                continue  # tool calls and their outputs: not read by the simulator
            msgs.append({"role": item["role"], "content": item.get("content")})
    else:
        raise ValueError("'input' must be a string or an array of input items")
    return normalize_messages(msgs)


def _validate(body: Any) -> tuple:
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError("'model' is required")
    messages = messages_of(body)
    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else temperature
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 2:
        raise ValueError("'temperature' must be a number between 0 and 2")
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise ValueError("'max_output_tokens' must be an integer >= 1")
    return model, messages, float(temperature), max_tokens, bool(body.get("stream"))


def _response(ident: str, model: str, body: dict, c, status: str = "completed") -> dict:
    text_part = {"type": "output_text", "text": c.text if status == "completed" else "",
                 "annotations": [], "logprobs": []}
    return {
        "id": "resp_" + ident, "object": "response", "created_at": 0, "status": status,
        "model": model, "error": None, "instructions": body.get("instructions"),
        "incomplete_details": ({"reason": "max_output_tokens"} if c.finish_reason == "length" else None),
        "max_output_tokens": body.get("max_output_tokens"), "metadata": {},
        "output": [] if status != "completed" else [{
            "type": "message", "id": "msg_" + ident, "status": "completed", "role": "assistant",
            "content": [text_part]}],
        "parallel_tool_calls": True, "temperature": body.get("temperature", 1.0),
        "tool_choice": "auto", "tools": [], "top_p": 1.0, "truncation": "disabled",
        "text": {"format": {"type": "text"}},
        "usage": None if status != "completed" else {
            "input_tokens": c.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": c.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": c.total_tokens},
    }


def _events(ident: str, model: str, body: dict, c) -> Iterator[bytes]:
    seq = iter(range(1 << 30))

    def event(kind: str, **data) -> bytes:
        payload = {"type": kind, "sequence_number": next(seq), **data}
        return (f"event: {kind}\ndata: ".encode() + json.dumps(payload, ensure_ascii=False).encode("utf-8")
                + b"\n\n")

    item_id = "msg_" + ident
    yield event("response.created", response=_response(ident, model, body, c, "in_progress"))
    yield event("response.in_progress", response=_response(ident, model, body, c, "in_progress"))
    yield event("response.output_item.added", output_index=0, item={
        "type": "message", "id": item_id, "status": "in_progress", "role": "assistant", "content": []})
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    yield event("response.content_part.added", item_id=item_id, output_index=0, content_index=0, part=part)
    for piece in re.findall(r"\s*\S+|\s+$", c.text):
        yield event("response.output_text.delta", item_id=item_id, output_index=0, content_index=0,
                    delta=piece, logprobs=[])
    yield event("response.output_text.done", item_id=item_id, output_index=0, content_index=0,
                text=c.text, logprobs=[])
    done_part = {**part, "text": c.text}
    yield event("response.content_part.done", item_id=item_id, output_index=0, content_index=0, part=done_part)
    yield event("response.output_item.done", output_index=0, item={
        "type": "message", "id": item_id, "status": "completed", "role": "assistant", "content": [done_part]})
    yield event("response.completed", response=_response(ident, model, body, c))


def create(body_bytes: bytes) -> SimResponse:
    failure = controls.injected_failure()
    if failure is not None:
        return error(failure, controls.failure_message(failure))
    try:
        body = json.loads(body_bytes or b"null")
        model, messages, temperature, max_tokens, stream = _validate(body)
    except ValueError as exc:
        return error(400, str(exc))
    c = complete(model, messages, temperature=temperature, max_tokens=max_tokens)[0]
    controls.bump("completions")
    ident = c.id[len("chatcmpl-"):]
    headers = {"x-request-id": "req_" + ident, "openai-model": model}
    if not stream:
        return json_response(200, _response(ident, model, body, c), headers)
    return SimResponse(200, {**headers, "content-type": "text/event-stream; charset=utf-8",
                             "cache-control": "no-cache"}, chunks=list(_events(ident, model, body, c)))
