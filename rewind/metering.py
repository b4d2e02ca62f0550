"""Which step is running right now, and the tokens it has spent.

The engine opens a `StepMeter` around every node execution; `record_usage` (and `rewind.llm.chat`)
add into the innermost one. Outside a step nothing is recorded and nothing is raised: the same
node code runs in plain Burr, in tests and in an audit.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any, Iterator, Optional


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

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


_current: contextvars.ContextVar[Optional[StepMeter]] = contextvars.ContextVar(
    "rewind_step_meter", default=None
)


def current_meter() -> Optional[StepMeter]:
    return _current.get()


@contextlib.contextmanager
def metering(meter: StepMeter) -> Iterator[StepMeter]:
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
        prompt, completion = int(prompt_tokens or 0), int(completion_tokens or 0)
    except (TypeError, ValueError):
        return
    meter.prompt_tokens += max(prompt, 0)
    meter.completion_tokens += max(completion, 0)
    meter.model_calls += 1
