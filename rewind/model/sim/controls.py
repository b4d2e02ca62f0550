"""Runtime switches of the offline model: injected HTTP errors, added latency, request counters.

Owns the only mutable state of the simulator besides the sampling nonce. It is module state so
that every transport in this process (the in-process MockTransport, `rewind.model.server`) sees
the same switches; a test or the settings page flips them here.
"""

from __future__ import annotations

import collections
import threading
from typing import Iterable, Optional

_lock = threading.Lock()
_fail_queue: "collections.deque[int]" = collections.deque()
_latency_ms: float = 0.0
_stats = {"requests": 0, "chat_requests": 0, "completions": 0, "errors": 0, "injected_errors": 0}


def inject_errors(statuses: Iterable[int]) -> None:
    """Make the next len(statuses) model requests fail with these HTTP statuses, in order.

    Retryable statuses (408, 409, 429, >=500) go through the openai SDK's own retry path; the
    responses carry `retry-after-ms: 1` so the SDK's backoff is a millisecond, not seconds.
    """
    codes = []
    for s in statuses:
        code = int(s)
        if not 400 <= code <= 599:
            raise ValueError(f"inject_errors takes HTTP error statuses (400-599), got {s!r}")
        codes.append(code)
    with _lock:
        _fail_queue.extend(codes)


def pending_errors() -> list:
    with _lock:
        return list(_fail_queue)


def next_failure() -> Optional[int]:
    """The status the current request must fail with (consumed), or None."""
    with _lock:
        return _fail_queue.popleft() if _fail_queue else None


def set_latency(ms: Optional[float]) -> None:
    """Sleep this long in every request (0 or None: off), to make the UI's spinners visible."""
    global _latency_ms
    value = float(ms or 0)
    if value < 0:
        raise ValueError("latency must be >= 0 ms")
    with _lock:
        _latency_ms = value


def latency_ms() -> float:
    return _latency_ms


def stats() -> dict:
    """Counters since the last reset: requests (all), chat_requests, completions, errors."""
    with _lock:
        return dict(_stats)


def reset() -> None:
    """Clear injected errors, latency and counters (for tests)."""
    global _latency_ms
    with _lock:
        _fail_queue.clear()
        _latency_ms = 0.0
        for k in _stats:
            _stats[k] = 0


def bump(key: str) -> None:
    with _lock:
        _stats[key] += 1


def injected_failure() -> Optional[int]:
    """Count a model request; the HTTP status it must fail with (an injected error), or None."""
    bump("chat_requests")
    failure = next_failure()
    if failure is not None:
        bump("injected_errors")
    return failure


def failure_message(status: int) -> str:
    return f"Simulated HTTP {status} (injected by rewind.sim.inject_errors)"
