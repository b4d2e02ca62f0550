"""Any other model endpoint: a POST whose JSON body names a `model` and its input (`messages`,
`prompt`, `input`, `contents`). Recorded as a call of api `http:<path>` with what can be read:
the reply's usage where it reports one in a known spelling (`usage.prompt_tokens`/
`completion_tokens`, `usage.input_tokens`/`output_tokens`), else none (the meter then estimates
the tokens and marks the call as not reported, which the dashboard says); its text from the
common reply shapes. A POST without a model and an input is not a model call.
"""

from __future__ import annotations

import json
from typing import Any

from .sse import json_events

APIS: tuple = ()
_INPUTS = ("messages", "prompt", "input", "contents")


def identify(path: str, body: dict) -> Any:
    if isinstance(body.get("model"), str) and any(k in body for k in _INPUTS):
        return "http:" + (path.rstrip("/") or "/")
    return None


def is_stream(api: str, body: dict) -> bool:
    return bool(body.get("stream"))


def request_of(api: str, body: dict) -> dict:
    key = next((k for k in _INPUTS if k in body), None)
    data = body.get(key) if key else None
    messages = data if isinstance(data, list) else [{"role": "user", "content": data}]
    params = {k: v for k, v in body.items() if k not in ("model", key)}
    return {"api": api, "model": str(body.get("model") or ""), "messages": messages, "params": params}


def _text(reply: Any) -> str:
    if not isinstance(reply, dict):
        return ""
    choices = reply.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        first = choices[0]
        message = first.get("message") or first.get("delta") or {}
        return str(message.get("content") or first.get("text") or "")
    for key in ("response", "output_text", "text", "completion", "generated_text"):
        if isinstance(reply.get(key), str):
            return reply[key]
    message = reply.get("message")
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        return message["content"]
    return ""


def read_reply(api: str, body: dict, content: bytes, streamed: bool) -> dict:
    replies = json_events(content) if streamed else [json.loads(content)]
    text = "".join(_text(r) for r in replies)
    usage = next((r.get("usage") for r in reversed(replies) if isinstance(r, dict) and isinstance(r.get("usage"), dict)), None)
    out: dict = {"text": text}
    if usage is not None:
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
        if prompt is not None or completion is not None:
            out.update(prompt_tokens=int(prompt or 0), completion_tokens=int(completion or 0), usage=usage)
    return out
