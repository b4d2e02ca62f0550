"""Google's Gemini API on the wire: `models/{model}:generateContent`, and
`:streamGenerateContent` (server-sent events with `alt=sse`, else one JSON array).

A request's messages are its `systemInstruction` (first, as a system message) and its
`contents` ({role, parts}), parts kept as sent; every other field (generationConfig, tools,
safetySettings, ...) is a param; the model is read from the URL. A reply's text is the text
parts of its first candidate (a stream's chunks joined); its `functionCall` parts are its tool
calls. Prompt tokens are `promptTokenCount`; completion tokens are `candidatesTokenCount` plus
`thoughtsTokenCount` (a thinking model's reasoning is billed as output).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .sse import json_events

APIS = ("google.generate_content", "google.stream_generate_content")
_PATH = re.compile(r"/models/([^/:]+):(generateContent|streamGenerateContent)$")


def identify(path: str, body: dict) -> Any:
    m = _PATH.search(path.rstrip("/"))
    if m is None:
        return None
    return "google.stream_generate_content" if m.group(2) == "streamGenerateContent" else "google.generate_content"


def model_of(path: str) -> str:
    m = _PATH.search(path.rstrip("/"))
    return m.group(1) if m else ""


def is_stream(api: str, body: dict) -> bool:
    return api == "google.stream_generate_content"


def request_of(api: str, body: dict) -> dict:
    messages = []
    system = body.get("systemInstruction") or body.get("system_instruction")
    if system:
        messages.append({"role": "system", "content": system.get("parts", system) if isinstance(system, dict) else system})
    for c in body.get("contents") or []:
        if isinstance(c, dict):
            messages.append({"role": c.get("role") or "user", "content": c.get("parts")})
    params = {k: v for k, v in body.items()
              if k not in ("contents", "systemInstruction", "system_instruction", "_model")}
    return {"api": api, "model": str(body.get("_model") or ""), "messages": messages, "params": params}


def _chunks(content: bytes, streamed: bool) -> list:
    if not streamed:
        return [json.loads(content)]
    text = content.lstrip()
    if text.startswith(b"["):  # a stream without alt=sse: one JSON array of chunks
        return json.loads(text)
    return json_events(content)


def read_reply(api: str, body: dict, content: bytes, streamed: bool) -> dict:
    text, tools, usage, stop = [], [], None, None
    for chunk in _chunks(content, streamed):
        candidates = chunk.get("candidates") or []
        if candidates:
            first = candidates[0]
            stop = first.get("finishReason") or stop
            for part in (first.get("content") or {}).get("parts") or []:
                if "text" in part and not part.get("thought"):
                    text.append(part["text"])
                if "functionCall" in part:
                    call = part["functionCall"] or {}
                    tools.append({"name": call.get("name"), "arguments": call.get("args")})
        usage = chunk.get("usageMetadata") or usage
    out: dict = {"text": "".join(text), "tool_calls": tools, "stop_reason": stop}
    if isinstance(usage, dict) and ("promptTokenCount" in usage or "candidatesTokenCount" in usage):
        out.update(prompt_tokens=int(usage.get("promptTokenCount") or 0),
                   completion_tokens=int(usage.get("candidatesTokenCount") or 0)
                   + int(usage.get("thoughtsTokenCount") or 0),
                   usage=usage)
    return out
