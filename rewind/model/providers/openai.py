"""OpenAI's wire formats: chat completions, Responses and embeddings, plain or streamed; also
any OpenAI-compatible server (litellm's and langchain's OpenAI paths, a raw `httpx.post`).

Besides reading a request and its reply, this owns the conversions that let one recorded call
answer a request of the other shape: a recorded stream added up into the reply it amounts to,
and a reply split into the stream a server would have sent (tool calls, stop reasons, ids and
usage kept); and a reply made from the text of a call recorded before raw replies were kept.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from ...errors import RewindError
from ...keys import to_canonical
from .sse import SSE, frame, sse_events

APIS = ("chat.completions", "responses", "embeddings")
_PATHS = (("/chat/completions", "chat.completions"), ("/responses", "responses"),
          ("/embeddings", "embeddings"))


def identify(path: str, body: dict) -> Any:
    path = path.rstrip("/")
    return next((api for suffix, api in _PATHS if path.endswith(suffix)), None)


def is_stream(api: str, body: dict) -> bool:
    return bool(body.get("stream"))


def request_of(api: str, body: dict) -> dict:
    from .. import sim
    from ..sim.responses import messages_of

    try:
        if api == "embeddings":
            data = body.get("input")
            messages = [{"role": "input", "content": d} for d in (data if isinstance(data, list) else [data])]
        else:
            messages = messages_of(body) if api == "responses" else sim.normalize_messages(body.get("messages"))
    except (ValueError, TypeError):
        messages = body.get("messages") or body.get("input") or []
    params = {k: v for k, v in body.items() if k not in ("model", "messages", "input", "instructions")}
    request = {"api": api, "model": str(body.get("model") or ""), "messages": messages, "params": params}
    try:  # spelled as a recorded call is (0.0 as 0), so that a diff shows only real changes
        return to_canonical(request, "request")
    except RewindError:
        return request


def _usage(usage: Any) -> dict:
    if not isinstance(usage, dict):
        return {}
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    if prompt is None and completion is None:
        return {}
    return {"prompt_tokens": int(prompt or 0), "completion_tokens": int(completion or 0), "usage": usage}


def _tools(calls: Any) -> list:
    return [{"name": (c.get("function") or {}).get("name") or c.get("name"),
             "arguments": (c.get("function") or {}).get("arguments", c.get("arguments"))}
            for c in (calls or []) if isinstance(c, dict)]


def read_reply(api: str, body: dict, content: bytes, streamed: bool) -> dict:
    if api == "embeddings":
        reply = json.loads(content)
        data = reply.get("data") or []
        return {"text": f"[{len(data)} embedding{'s' if len(data) != 1 else ''}]", **_usage(reply.get("usage"))}
    if api == "responses":
        reply = response_from_stream(content) if streamed else json.loads(content)
        text, tools = [], []
        for item in reply.get("output") or []:
            if item.get("type") == "message":
                text += [p.get("text", "") for p in item.get("content") or [] if p.get("type") == "output_text"]
            elif item.get("type") == "function_call":
                tools.append({"name": item.get("name"), "arguments": item.get("arguments")})
        return {"text": "".join(text), "tool_calls": tools, "stop_reason": reply.get("status"),
                **_usage(reply.get("usage"))}
    reply = chat_from_stream(content) if streamed else json.loads(content)
    choices = reply.get("choices") or []
    first = choices[0] if choices else {}
    message = first.get("message") or {}
    return {"text": message.get("content") or "", "tool_calls": _tools(message.get("tool_calls")),
            "stop_reason": first.get("finish_reason"), **_usage(reply.get("usage"))}


def chat_from_stream(body: bytes) -> dict:
    """The chat completion a recorded stream of chunks adds up to."""
    head: dict = {}
    choices: dict = {}
    usage = None
    for _, data in sse_events(body):
        if data.strip() == "[DONE]":
            break
        chunk = json.loads(data)
        if not head:
            head = {k: chunk.get(k) for k in ("id", "created", "model", "system_fingerprint", "service_tier")
                    if k in chunk}
        usage = chunk.get("usage") or usage
        for c in chunk.get("choices") or []:
            slot = choices.setdefault(c.get("index", 0), {"message": {"role": "assistant", "content": None},
                                                           "finish_reason": None, "logprobs": None, "tools": {}})
            delta, message = c.get("delta") or {}, slot["message"]
            for field in ("content", "refusal", "reasoning_content"):
                if delta.get(field) is not None:
                    message[field] = (message.get(field) or "") + delta[field]
            if delta.get("role"):
                message["role"] = delta["role"]
            for tc in delta.get("tool_calls") or []:
                t = slot["tools"].setdefault(tc.get("index", 0), {"function": {"name": "", "arguments": ""}})
                for k in ("id", "type"):
                    if tc.get(k):
                        t[k] = tc[k]
                for k in ("name", "arguments"):
                    t["function"][k] += (tc.get("function") or {}).get(k) or ""
            slot["finish_reason"] = c.get("finish_reason") or slot["finish_reason"]
            slot["logprobs"] = c.get("logprobs") or slot["logprobs"]
    out = []
    for i, slot in sorted(choices.items()):
        if slot["tools"]:
            slot["message"]["tool_calls"] = [{"type": "function", **t} for _, t in sorted(slot["tools"].items())]
        out.append({"index": i, "message": slot["message"], "logprobs": slot["logprobs"],
                    "finish_reason": slot["finish_reason"]})
    return {**head, "object": "chat.completion", "choices": out, **({"usage": usage} if usage else {})}


def chat_to_stream(reply: dict, include_usage: bool) -> bytes:
    """A recorded chat completion as the stream of chunks a server would have sent."""
    head = {k: reply.get(k) for k in ("id", "created", "model", "system_fingerprint", "service_tier")
            if k in reply}
    head["object"] = "chat.completion.chunk"
    frames = []
    for c in reply.get("choices") or []:
        message, delta = c.get("message") or {}, {}
        for k in ("role", "content", "refusal"):
            if k in message:
                delta[k] = message[k]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **tc} for i, tc in enumerate(message["tool_calls"])]
        index = c.get("index", 0)
        frames.append(frame({**head, "choices": [{"index": index, "delta": delta, "logprobs": c.get("logprobs"),
                                                   "finish_reason": None}]}))
        frames.append(frame({**head, "choices": [{"index": index, "delta": {}, "logprobs": None,
                                                   "finish_reason": c.get("finish_reason")}]}))
    if include_usage and reply.get("usage"):
        frames.append(frame({**head, "choices": [], "usage": reply["usage"]}))
    return b"".join(frames) + frame("[DONE]")


def response_from_stream(body: bytes) -> dict:
    """The response a recorded Responses stream ended with."""
    final = None
    for _, data in sse_events(body):
        event = json.loads(data) if data.strip() != "[DONE]" else {}
        if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            final = event.get("response")
    if not isinstance(final, dict):
        raise ValueError("the recorded stream has no final response")
    return final


def response_to_stream(reply: dict) -> bytes:
    """A recorded Responses reply as the events a server would have streamed."""
    seq = iter(range(1 << 30))
    frames = []

    def event(kind: str, **data) -> None:
        frames.append(frame({"type": kind, "sequence_number": next(seq), **data}, kind))

    event("response.created", response={**reply, "status": "in_progress", "output": [], "usage": None})
    for i, item in enumerate(reply.get("output") or []):
        event("response.output_item.added", output_index=i, item={**item, "status": "in_progress", **(
            {"content": []} if item.get("type") == "message" else {})})
        if item.get("type") == "message":
            for j, part in enumerate(item.get("content") or []):
                event("response.content_part.added", item_id=item.get("id"), output_index=i, content_index=j,
                      part={**part, "text": ""} if part.get("type") == "output_text" else part)
                if part.get("type") == "output_text":
                    ids = {"item_id": item.get("id"), "output_index": i, "content_index": j}
                    event("response.output_text.delta", **ids, delta=part.get("text", ""), logprobs=[])
                    event("response.output_text.done", **ids, text=part.get("text", ""), logprobs=[])
                event("response.content_part.done", item_id=item.get("id"), output_index=i, content_index=j,
                      part=part)
        elif item.get("type") == "function_call":
            ids = {"item_id": item.get("id"), "output_index": i}
            event("response.function_call_arguments.delta", **ids, delta=item.get("arguments", ""))
            event("response.function_call_arguments.done", **ids, arguments=item.get("arguments", ""))
        event("response.output_item.done", output_index=i, item=item)
    status = reply.get("status") or "completed"
    kind = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(status, "response.completed")
    event(kind, response=reply)
    return b"".join(frames)


def reshaped(api: str, content: bytes, stream: bool, body: dict) -> bytes:
    """A recorded reply of the other shape (stream or not) as this request expects it."""
    if api == "responses":
        return response_to_stream(json.loads(content)) if stream else \
            json.dumps(response_from_stream(content), ensure_ascii=False).encode("utf-8")
    if stream:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return chat_to_stream(json.loads(content), include_usage)
    return json.dumps(chat_from_stream(content), ensure_ascii=False).encode("utf-8")


# --- a reply from the text of a call recorded without its raw reply --------------------------------

def chat_body(call: dict, body: dict, stream: bool) -> tuple:
    text, model = call.get("response_text") or "", body.get("model") or call.get("model")
    usage = {"prompt_tokens": int(call.get("prompt_tokens") or 0),
             "completion_tokens": int(call.get("completion_tokens") or 0)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    payload = {"id": "chatcmpl-rewind-replay", "created": 0, "model": model, "object": "chat.completion",
               "usage": usage, "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": text, "refusal": None}}]}
    if not stream:
        return "application/json", json.dumps(payload, ensure_ascii=False).encode("utf-8")
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return SSE + "; charset=utf-8", chat_to_stream(payload, include_usage)


def responses_body(call: dict, body: dict, stream: bool) -> tuple:
    from ..sim import responses

    p, c = int(call.get("prompt_tokens") or 0), int(call.get("completion_tokens") or 0)
    completion = SimpleNamespace(text=call.get("response_text") or "", finish_reason="stop",
                                 prompt_tokens=p, completion_tokens=c, total_tokens=p + c)
    model = body.get("model") or call.get("model")
    if not stream:
        payload = responses._response("rewind-replay", model, body, completion)
        return "application/json", json.dumps(payload, ensure_ascii=False).encode("utf-8")
    return (SSE + "; charset=utf-8",
            b"".join(responses._events("rewind-replay", model, body, completion)))
