"""Anthropic's Messages API on the wire (`POST /v1/messages`), plain or streamed.

A request's messages are its `system` (first, as a system message) and its `messages`, content
blocks kept as sent; every other field (max_tokens, tools, tool_choice, temperature, ...) is a
param. A reply's text is its text blocks joined; its `tool_use` blocks are its tool calls. Its
prompt tokens are `input_tokens` plus the cache's `cache_creation_input_tokens` and
`cache_read_input_tokens` (what the request's prompt amounted to); completion tokens are
`output_tokens`. A stream is read from its events: `message_start` (the input usage),
`content_block_start`/`_delta` (text and tool input), `message_delta` (output tokens, stop).
"""

from __future__ import annotations

import json
from typing import Any

from .sse import sse_events

APIS = ("anthropic.messages",)
_CACHE = ("cache_creation_input_tokens", "cache_read_input_tokens")


def identify(path: str, body: dict) -> Any:
    path = path.rstrip("/")
    if path.endswith("/messages") and "messages" in body and "model" in body and "/threads/" not in path:
        return "anthropic.messages"
    return None


def is_stream(api: str, body: dict) -> bool:
    return bool(body.get("stream"))


def request_of(api: str, body: dict) -> dict:
    messages = []
    if body.get("system"):
        messages.append({"role": "system", "content": body["system"]})
    messages += [m for m in body.get("messages") or [] if isinstance(m, dict)]
    params = {k: v for k, v in body.items() if k not in ("model", "messages", "system")}
    return {"api": api, "model": str(body.get("model") or ""), "messages": messages, "params": params}


def _usage(usage: dict) -> dict:
    if not isinstance(usage, dict) or ("input_tokens" not in usage and "output_tokens" not in usage):
        return {}
    prompt = int(usage.get("input_tokens") or 0) + sum(int(usage.get(k) or 0) for k in _CACHE)
    return {"prompt_tokens": prompt, "completion_tokens": int(usage.get("output_tokens") or 0),
            "usage": usage}


def _from_blocks(blocks: list) -> tuple:
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    tools = [{"name": b.get("name"), "arguments": b.get("input")} for b in blocks if b.get("type") == "tool_use"]
    return text, tools


def message_from_stream(content: bytes) -> dict:
    """The message a recorded stream of events adds up to."""
    message: dict = {}
    blocks: dict = {}
    usage: dict = {}
    for _, data in sse_events(content):
        try:
            event = json.loads(data)
        except ValueError:
            continue
        kind = event.get("type")
        if kind == "message_start":
            message = dict(event.get("message") or {})
            usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            blocks[event.get("index", 0)] = dict(event.get("content_block") or {})
        elif kind == "content_block_delta":
            block, delta = blocks.setdefault(event.get("index", 0), {}), event.get("delta") or {}
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                block["_json"] = block.get("_json", "") + delta.get("partial_json", "")
        elif kind == "message_delta":
            usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
            message.update(event.get("delta") or {})
    for block in blocks.values():
        if "_json" in block:
            raw = block.pop("_json")
            try:
                block["input"] = json.loads(raw) if raw else {}
            except ValueError:
                block["input"] = raw
    message["content"] = [b for _, b in sorted(blocks.items())]
    message["usage"] = usage
    return message


def read_reply(api: str, body: dict, content: bytes, streamed: bool) -> dict:
    reply = message_from_stream(content) if streamed else json.loads(content)
    text, tools = _from_blocks(reply.get("content") or [])
    return {"text": text, "tool_calls": tools, "stop_reason": reply.get("stop_reason"),
            **_usage(reply.get("usage"))}
