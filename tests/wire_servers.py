"""A local model server speaking three providers' wire formats, for the real SDKs to talk to
(fakes only at the edge of the network). Its replies are fixed functions of the request, and it
counts its own tokens (words, not o200k: an estimate that matched it would be luck), keeping a
ledger of every request so a test can compare what Rewind metered with what the server counted.

    POST /v1/chat/completions                  OpenAI chat (plain, or SSE with include_usage)
    POST /v1/embeddings                        OpenAI embeddings
    POST /v1/messages                          Anthropic Messages (plain, or its event stream)
    POST /v1beta/models/{m}:generateContent    Gemini (and :streamGenerateContent?alt=sse)
    POST /api/generate                         an endpoint nobody knows ({"model", "prompt"})

When the request offers tools, the reply calls the first one with arguments made from its JSON
schema (strings "Paris", integers 3, booleans true), as instructor and agents expect.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from typing import Any


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    if isinstance(value, dict):
        return sum(_words(v) for k, v in value.items() if k in ("text", "content", "parts", "system", "prompt"))
    return 0


def _args(schema: dict) -> dict:
    out = {}
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type")
        out[name] = 3 if kind == "integer" else 2.5 if kind == "number" else True if kind == "boolean" else \
            [] if kind == "array" else {} if kind == "object" else "Paris"
    return out


class WireServer:
    def __init__(self) -> None:
        self.ledger: list = []  # {path, prompt, completion} per model request
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                status, ctype, payload = server.answer(self.path, body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.send_header("x-request-id", f"req_{len(server.ledger)}")
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def requests(self) -> int:
        return len(self.ledger)

    def counted(self) -> tuple:
        return (sum(e["prompt"] for e in self.ledger), sum(e["completion"] for e in self.ledger))

    def _count(self, path: str, prompt: int, text: str, args: Any = None) -> tuple:
        n = len(self.ledger) + 1
        completion = _words(text) + (len(json.dumps(args).split()) if args is not None else 0)
        self.ledger.append({"path": path, "prompt": prompt, "completion": completion})
        return n, completion

    def answer(self, path: str, body: dict) -> tuple:
        route = path.split("?", 1)[0]
        if route.endswith("/chat/completions"):
            return self._openai(route, body)
        if route.endswith("/embeddings"):
            inputs = body.get("input") if isinstance(body.get("input"), list) else [body.get("input")]
            n, _ = self._count(route, _words(inputs), "")
            prompt = self.ledger[-1]["prompt"]
            return 200, "application/json", {"object": "list", "model": body.get("model"), "data": [
                {"object": "embedding", "index": i, "embedding": [0.1 * (i + 1), 0.2, 0.3]}
                for i in range(len(inputs))], "usage": {"prompt_tokens": prompt, "total_tokens": prompt}}
        if route.endswith("/messages"):
            return self._anthropic(route, body)
        m = re.search(r"/models/([^/:]+):(generateContent|streamGenerateContent)$", route)
        if m:
            return self._google(route, body, m.group(1), m.group(2) == "streamGenerateContent")
        if route == "/api/generate":
            n, completion = self._count(route, _words(body.get("prompt")), "generated for " + str(body.get("prompt")))
            return 200, "application/json", {"model": body.get("model"), "response": "generated for " + str(body.get("prompt"))}
        return 404, "application/json", {"error": "unknown route " + route}

    # --- OpenAI ---------------------------------------------------------------------------------
    def _openai(self, route: str, body: dict) -> tuple:
        tools = body.get("tools") or []
        text = "" if tools else "Answer to " + " ".join(m.get("content", "") if isinstance(m.get("content"), str)
                                                       else "" for m in body.get("messages") or [])
        call = None
        if tools:
            fn = tools[0]["function"]
            call = {"name": fn["name"], "arguments": json.dumps(_args(fn.get("parameters") or {}))}
        n, completion = self._count(route, _words(body.get("messages")), text, call and call["arguments"])
        prompt = self.ledger[-1]["prompt"]
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        message = {"role": "assistant", "content": text or None, "refusal": None}
        if call:
            message["tool_calls"] = [{"id": f"call_{n}", "type": "function", "function": call}]
        finish = "tool_calls" if call else "stop"
        head = {"id": f"chatcmpl-{n}", "created": 1700000000 + n, "model": body.get("model"),
                "system_fingerprint": f"fp_{n}"}
        if not body.get("stream"):
            return 200, "application/json", {**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]}
        frames = []

        def chunk(delta, finish_reason=None, **extra):
            frames.append(b"data: " + json.dumps({**head, "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}], **extra}).encode() + b"\n\n")

        chunk({"role": "assistant", "content": ""})
        for piece in re.findall(r"\s*\S+", text):
            chunk({"content": piece})
        if call:
            chunk({"tool_calls": [{"index": 0, "id": f"call_{n}", "type": "function", "function": call}]})
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            frames.append(b"data: " + json.dumps({**head, "object": "chat.completion.chunk", "choices": [],
                                                  "usage": usage}).encode() + b"\n\n")
        return 200, "text/event-stream", b"".join(frames) + b"data: [DONE]\n\n"

    # --- Anthropic ------------------------------------------------------------------------------
    def _anthropic(self, route: str, body: dict) -> tuple:
        tools = body.get("tools") or []
        prompt_words = _words(body.get("messages")) + _words(body.get("system") or "")
        text = "" if tools else "Claude says " + str(prompt_words) + " words came in"
        tool = {"type": "tool_use", "id": "toolu_1", "name": tools[0]["name"],
                "input": _args(tools[0].get("input_schema") or {})} if tools else None
        n, completion = self._count(route, prompt_words, text, tool and tool["input"])
        # a third of the prompt was read from the prompt cache: Anthropic counts it apart
        cached = prompt_words // 3
        usage = {"input_tokens": prompt_words - cached, "output_tokens": completion,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}
        content = [tool] if tool else [{"type": "text", "text": text}]
        message = {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": body.get("model"),
                   "content": content, "stop_reason": "tool_use" if tool else "end_turn",
                   "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            return 200, "application/json", message
        frames = []

        def event(kind, **data):
            frames.append(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode())

        event("message_start", message={**message, "content": [], "stop_reason": None,
                                        "usage": {**usage, "output_tokens": 1}})
        if tool:
            event("content_block_start", index=0, content_block={**tool, "input": {}})
            event("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": json.dumps(tool["input"])})
        else:
            event("content_block_start", index=0, content_block={"type": "text", "text": ""})
            for piece in re.findall(r"\s*\S+", text):
                event("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
        event("content_block_stop", index=0)
        event("message_delta", delta={"stop_reason": message["stop_reason"], "stop_sequence": None},
              usage={"output_tokens": completion})
        event("message_stop")
        return 200, "text/event-stream", b"".join(frames)

    # --- Google ---------------------------------------------------------------------------------
    def _google(self, route: str, body: dict, model: str, stream: bool) -> tuple:
        decls = [d for t in body.get("tools") or [] for d in t.get("functionDeclarations") or t.get("function_declarations") or []]
        prompt_words = _words(body.get("contents")) + _words((body.get("systemInstruction") or {}).get("parts") or [])
        text = "" if decls else "Gemini read " + str(prompt_words) + " words"
        call = {"name": decls[0]["name"], "args": _args(decls[0].get("parameters") or {})} if decls else None
        n, completion = self._count(route, prompt_words, text, call and call["args"])
        usage = {"promptTokenCount": prompt_words, "candidatesTokenCount": completion,
                 "totalTokenCount": prompt_words + completion}
        parts = [{"functionCall": call}] if call else [{"text": text}]
        reply = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": usage, "modelVersion": model, "responseId": f"resp_{n}"}
        if not stream:
            return 200, "application/json", reply
        pieces = re.findall(r"\s*\S+", text) or [""]
        frames = []
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            chunk = {"candidates": [{"content": {"role": "model", "parts": parts if call else [{"text": piece}]},
                                     **({"finishReason": "STOP"} if last else {}), "index": 0}],
                     "modelVersion": model, "responseId": f"resp_{n}"}
            if last:
                chunk["usageMetadata"] = usage
            frames.append(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n")
        return 200, "text/event-stream", b"".join(frames)
