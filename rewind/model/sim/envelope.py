"""The envelope of every simulated HTTP answer: `SimResponse`, JSON bodies, OpenAI error objects.

Owns what a transport needs to send an answer (status, headers, body or server-sent events) and
the error shape the openai SDK parses (`{"error": {"message", "type", "param", "code"}}`), shared
by the chat completions and Responses endpoints.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from . import controls


@dataclasses.dataclass
class SimResponse:
    status: int
    headers: dict
    body: bytes = b""
    chunks: Optional[list] = None  # SSE events, for streaming transports

    def full_body(self) -> bytes:
        return b"".join(self.chunks) if self.chunks is not None else self.body


def json_response(status: int, payload: Any, extra_headers: Optional[dict] = None) -> SimResponse:
    headers = {"content-type": "application/json"}
    if extra_headers:
        headers.update(extra_headers)
    return SimResponse(status, headers, json.dumps(payload, ensure_ascii=False).encode("utf-8"))


_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    408: ("timeout", "timeout"),
    409: ("conflict", "conflict"),
    413: ("invalid_request_error", "request_too_large"),
    422: ("invalid_request_error", None),
    405: ("invalid_request_error", "method_not_allowed"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def error(status: int, message: str, param: Optional[str] = None) -> SimResponse:
    etype, code = _ERROR_TYPES.get(status, ("server_error", "server_error"))
    controls.bump("errors")
    return json_response(
        status,
        {"error": {"message": message, "type": etype, "param": param, "code": code}},
        # A millisecond: the SDK honours retry-after-ms, so retries in tests cost no real time.
        {"retry-after-ms": "1", "x-request-id": f"req_sim_error_{status}"},
    )
