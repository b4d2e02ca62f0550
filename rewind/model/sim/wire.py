"""OpenAI's wire format for the offline model (and the route to Anthropic's, `sim.anthropic`),
independent of any transport.

Owns `dispatch(method, path, body) -> SimResponse` (the routes, and the chat completions
endpoint's JSON bodies and server-sent events; `responses` owns the Responses API's), and
`handle_request`, the
httpx2 MockTransport handler that puts it behind the real openai client in-process.
`rewind.model.server` serves the same `dispatch` over HTTP, so both answer byte-identically.

Also owns `MAX_BODY`, the largest request body served (32 MiB); a larger one is a 413 error
object (`too_large`), in-process as over HTTP (issue 38).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Iterator

from . import anthropic, controls, responses
from .envelope import SimResponse, error as _error, json_response as _json
from .model import MODELS, Completion, complete
from .sampling import normalize_messages

SYSTEM_FINGERPRINT = "fp_rewind_sim"
OWNER = "rewind-simulator"
# The largest request body the simulator serves, in bytes. A prompt is read only in part
# (`prompt.READ_LIMIT`) but hashed and token-counted whole, so the body's size bounds the work.
MAX_BODY = 32 * 1024 * 1024


def error_response(status: int, message: str) -> SimResponse:
    """An OpenAI error object, for a transport that refuses a request before `dispatch`."""
    return _error(status, message)


def too_large(size: int = 0) -> SimResponse:
    """The 413 error object for a body above MAX_BODY (size: its length, when known)."""
    got = f" (got {size} bytes)" if size else ""
    return _error(413, f"Request too large: the simulator accepts request bodies of at most "
                       f"{MAX_BODY} bytes (32 MiB){got}.")


def _model_entry(model_id: str) -> dict:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": OWNER}


def _validate(body: Any) -> tuple:
    """(model, messages, temperature, seed, max_tokens, n, stream, include_usage) or raise."""
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError("'model' is required")
    messages = normalize_messages(body.get("messages"))
    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else temperature  # OpenAI's default is 1
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 2:
        raise ValueError("'temperature' must be a number between 0 and 2")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError("'seed' must be an integer")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise ValueError("'max_tokens' must be an integer >= 1")
    n = body.get("n") or 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16:
        raise ValueError("'n' must be an integer between 1 and 16")
    stream = bool(body.get("stream"))
    opts = body.get("stream_options") or {}
    include_usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
    return model, messages, float(temperature), seed, max_tokens, n, stream, include_usage


def _usage(c: Completion) -> dict:
    return {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
            "total_tokens": c.total_tokens}


def _chat(body_bytes: bytes) -> SimResponse:
    failure = controls.injected_failure()
    if failure is not None:
        return _error(failure, controls.failure_message(failure))
    try:
        body = json.loads(body_bytes or b"null")
    except ValueError:
        return _error(400, "We could not parse the JSON body of your request.")
    try:
        model, messages, temperature, seed, max_tokens, n, stream, include_usage = _validate(body)
    except ValueError as exc:
        return _error(400, str(exc))
    results = complete(model, messages, temperature=temperature, seed=seed, max_tokens=max_tokens, n=n)
    controls.bump("completions")
    first = results[0]
    total_completion = sum(r.completion_tokens for r in results)
    usage = {"prompt_tokens": first.prompt_tokens, "completion_tokens": total_completion,
             "total_tokens": first.prompt_tokens + total_completion}
    headers = {"x-request-id": "req_" + first.id[len("chatcmpl-"):], "openai-model": model}
    if not stream:
        payload = {
            "id": first.id,
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": r.text, "refusal": None},
                 "logprobs": None, "finish_reason": r.finish_reason}
                for i, r in enumerate(results)
            ],
            "usage": usage,
        }
        return _json(200, payload, headers)
    return SimResponse(200, {**headers, "content-type": "text/event-stream; charset=utf-8",
                             "cache-control": "no-cache"},
                       chunks=list(_sse_events(first.id, model, results, usage, include_usage)))


def _sse_events(ident: str, model: str, results: list, usage: dict, include_usage: bool) -> Iterator[bytes]:
    def event(choices: list, **extra) -> bytes:
        chunk = {"id": ident, "object": "chat.completion.chunk", "created": 0, "model": model,
                 "system_fingerprint": SYSTEM_FINGERPRINT, "choices": choices}
        if include_usage:
            chunk["usage"] = None  # as OpenAI: null on every chunk but the last
        chunk.update(extra)
        return b"data: " + json.dumps(chunk, ensure_ascii=False).encode("utf-8") + b"\n\n"

    for i, r in enumerate(results):
        yield event([{"index": i, "delta": {"role": "assistant", "content": "", "refusal": None},
                      "logprobs": None, "finish_reason": None}])
        # Word-sized pieces (leading whitespace kept) concatenate back to the exact text.
        for piece in re.findall(r"\s*\S+|\s+$", r.text):
            yield event([{"index": i, "delta": {"content": piece}, "logprobs": None, "finish_reason": None}])
        yield event([{"index": i, "delta": {}, "logprobs": None, "finish_reason": r.finish_reason}])
    if include_usage:
        yield event([], usage=usage)
    yield b"data: [DONE]\n\n"


def dispatch(method: str, path: str, body: bytes = b"") -> SimResponse:
    """Serve one request of the OpenAI API subset the simulator speaks.

    POST /v1/chat/completions, POST /v1/responses, POST /v1/messages (Anthropic's Messages API),
    GET /v1/models, GET /v1/models/{id}. The /v1 prefix is optional,
    so a base URL given without it still works. POST /_simulator/errors {"statuses": [...]}
    and GET /_simulator/stats control an out-of-process server.
    """
    controls.bump("requests")
    delay = controls.latency_ms()
    if delay:
        time.sleep(delay / 1000.0)
    path = path.split("?", 1)[0].rstrip("/") or "/"
    route = path[3:] if path.startswith("/v1/") else path
    method = method.upper()
    if body and len(body) > MAX_BODY:
        return too_large(len(body))
    if route == "/chat/completions":
        if method != "POST":
            return _error(405, f"Method {method} not allowed on {path}")
        return _chat(body)
    if route == "/responses":
        if method != "POST":
            return _error(405, f"Method {method} not allowed on {path}")
        return responses.create(body)
    if route == "/messages":  # Anthropic's Messages API
        if method != "POST":
            return anthropic.error(405, f"Method {method} not allowed on {path}")
        return anthropic.create(body)
    if route == "/models" and method == "GET":
        return _json(200, {"object": "list", "data": [_model_entry(m) for m in MODELS]})
    if route.startswith("/models/") and method == "GET":
        model_id = route[len("/models/"):]
        if model_id in MODELS:
            return _json(200, _model_entry(model_id))
        return _error(404, f"The model '{model_id}' does not exist")
    if route == "/_simulator/errors" and method == "POST":
        try:
            controls.inject_errors(json.loads(body or b"{}").get("statuses", []))
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(400, f"bad statuses: {exc}")
        return _json(200, {"pending": controls.pending_errors()})
    if route == "/_simulator/stats" and method == "GET":
        return _json(200, controls.stats())
    return _error(404, f"Unknown request URL: {method} {path}")


def handle_request(request):
    """httpx2.MockTransport handler: the simulator behind the real openai client, in-process."""
    import httpx2

    body = request.read() if request.method != "GET" else b""
    res = dispatch(request.method, request.url.path, body)
    return httpx2.Response(res.status, headers=res.headers, content=res.full_body())
