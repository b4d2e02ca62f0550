"""Which step is running right now, the tokens it has spent and the model calls it made.

The engine opens a `StepMeter` around every node execution; `record_usage` (and `record_call`,
used by `rewind.model.capture` for every model call through any client, `rewind.llm.chat`'s
included) add into the innermost one. Outside a step nothing is recorded and nothing is raised:
the same node code runs in plain Burr, in tests and in an audit.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any, Callable, Iterator, Optional

from ..errors import InvalidRequest

# More tokens than any model call has ever had, far under the stores' 64-bit columns (run totals
# add many steps): a count past it is a provider's or a caller's mistake, refused by name.
MAX_TOKENS = 10**12


def _token_count(value: Any, field: str) -> int:
    n = max(int(value or 0), 0)
    if n > MAX_TOKENS:
        raise InvalidRequest(f"{field}={n} is not a real token count (at most {MAX_TOKENS:,} a "
                             "call): check what reported it", field=field)
    return n


@dataclasses.dataclass
class ModelCall:
    """One model request made during a step, as the dashboard shows it."""

    api: str                   # "chat.completions", "responses", "anthropic.messages", ...
    model: str
    messages: list             # [{role, content}] as sent (a Responses `input` as messages)
    params: dict               # every other request field: temperature, seed, max_tokens, stream...
    response_text: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    usage_reported: bool = True  # False: the server sent no usage, the tokens are an o200k count
    error: Optional[str] = None  # the failure, when the call raised (tokens are then 0)
    # True: answered from a recording (the model-call cache, a snapshot's cassette), not sent
    served: bool = False
    # the reply as it came off the wire, {status, headers, body | body_b64}, to serve it again
    # exactly (`rewind.model.calls.raw_reply`); None for a failed or unfinished call
    raw: Optional[dict] = None
    tool_calls: list = dataclasses.field(default_factory=list)  # [{name, arguments}] the reply asked for
    stop_reason: Optional[str] = None  # why the reply ended (stop, tool_calls, end_turn, ...)
    usage: Optional[dict] = None       # the usage object as the server reported it (cache tokens...)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict:
        """JSON-ready (for the step record)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class StepMeter:
    node: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0
    # The store for the tool cache (None: tools run uncached, as in an audit).
    tool_store: Any = None
    tool_hits: int = 0
    # Milliseconds of one-time process initialisation (tokenizer, SDK import, client) that a
    # call in this step paid for: not the node's latency, so the engine subtracts it.
    init_ms: float = 0.0
    # Every model call of the step, in order (`ModelCall`), for the step record.
    calls: list = dataclasses.field(default_factory=list)
    # the `rewind.tool` calls the step made: {name, started_at, latency_ms, cached, error, args, result}
    tools: list = dataclasses.field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


_current: contextvars.ContextVar[Optional[StepMeter]] = contextvars.ContextVar(
    "rewind_step_meter", default=None
)
# Run each time a meter opens, before the node: `rewind.model.http` registers its installer
# here so that a user's openai client is hooked even if openai was imported after rewind.
_on_open: list = []


def on_meter_open(fn: Callable[[], Optional[float]]) -> None:
    """Run `fn` each time a meter opens, before the node; it returns the seconds of one-time
    start-up it paid (0 or None once done), which the meter keeps out of the node's latency."""
    if fn not in _on_open:
        _on_open.append(fn)


def current_meter() -> Optional[StepMeter]:
    return _current.get()


@contextlib.contextmanager
def metering(meter: StepMeter) -> Iterator[StepMeter]:
    for fn in _on_open:  # one-time hooks (the HTTP capture's install): each returns the
        spent = fn()     # seconds of start-up it just paid, which are not the node's latency
        if spent:
            meter.init_ms += spent * 1000
    token = _current.set(meter)
    try:
        yield meter
    finally:
        _current.reset(token)


def record_usage(prompt_tokens: int, completion_tokens: int) -> None:
    """Add token usage to the step that is running; a no-op outside a step."""
    meter = _current.get()
    if meter is None:
        return
    try:
        prompt = _token_count(prompt_tokens, "prompt_tokens")
        completion = _token_count(completion_tokens, "completion_tokens")
    except (TypeError, ValueError):
        return
    meter.prompt_tokens += prompt
    meter.completion_tokens += completion
    meter.model_calls += 1


def record_call(call: ModelCall, meter: Optional[StepMeter] = None) -> None:
    """Add one model call (its tokens and its record) to `meter`, or to the running step."""
    meter = meter if meter is not None else _current.get()
    if meter is None:
        return
    meter.prompt_tokens += _token_count(call.prompt_tokens, "prompt_tokens")
    meter.completion_tokens += _token_count(call.completion_tokens, "completion_tokens")
    meter.model_calls += 1
    meter.calls.append(call)
