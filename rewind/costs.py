"""What a run costs, defined once: every page, the CLI and the diff use these.

  spent             tokens this run paid for (executed and failed steps)
  trajectory cost   what the whole trajectory would cost run fresh: every step at its recorded
                    cost, inherited and cached steps included
  saved             trajectory cost minus spent

A step's recorded cost is what producing its outputs cost when they were produced: an executed
step's tokens, a cached step's original tokens (`tokens_saved`), an inherited step's cost in the
run it comes from. Dollars come from a price table (USD per million input/output tokens) for
known models, extended or overridden by `REWIND_PRICES` (JSON: {"model": [in, out]}).
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from .errors import InvalidRequest

# USD per 1M tokens (input, output); the offline simulator's models are free.
DEFAULT_PRICES = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o3-mini": (1.10, 4.40),
    "sim-small": (0.0, 0.0),
    "sim-large": (0.0, 0.0),
}


def price_table() -> dict:
    """The default prices with `REWIND_PRICES` applied."""
    table = dict(DEFAULT_PRICES)
    raw = os.environ.get("REWIND_PRICES", "").strip()
    if raw:
        try:
            extra = json.loads(raw)
            if not isinstance(extra, dict) or not all(
                    isinstance(p, list) and len(p) == 2 and all(
                        isinstance(x, (int, float)) and not isinstance(x, bool) for x in p)
                    for p in extra.values()):
                raise ValueError("it must be an object mapping each model to [input, output]")
            table.update({str(m): (float(p[0]), float(p[1])) for m, p in extra.items()})
            bad = sorted(m for m, p in table.items() if not all(0 <= x < float("inf") for x in p))
            if bad:
                raise ValueError(f"the prices of {', '.join(bad)} must be finite and not negative")
        except ValueError as e:
            raise InvalidRequest(f"REWIND_PRICES must be JSON like "
                                 f'{{"my-model": [0.5, 1.5]}} (USD per 1M input/output tokens): {e}',
                                 field="REWIND_PRICES") from None
    return table


def step_cost(step: Any) -> int:
    """The recorded cost of a step in tokens (see the module docstring)."""
    if step.status == "cached":
        return int(step.tokens_saved or 0)
    if step.status == "inherited":
        return int(getattr(step, "inherited_cost", 0) or 0)
    # an executed step's model calls answered from the model-call cache were saved, not free
    return int(step.tokens or 0) + int(step.tokens_saved or 0)


def step_dollars(step: Any, prices: Optional[dict] = None) -> Optional[float]:
    """The recorded cost of a step in USD, or None when a model it used has no price."""
    prices = prices if prices is not None else price_table()
    tokens = step_cost(step)
    if not tokens:
        return 0.0
    calls = list(getattr(step, "calls", None) or [])
    if calls:
        total = 0.0
        for c in calls:
            p = prices.get(str(c.get("model") or ""))
            if p is None:
                return None
            total += (c.get("prompt_tokens") or 0) * p[0] / 1e6 + (c.get("completion_tokens") or 0) * p[1] / 1e6
        return total
    p = prices.get(str((step.params or {}).get("model") or ""))
    if p is None:
        return None
    share = tokens / max(step.prompt_tokens + step.completion_tokens, 1) if step.status != "executed" else 1.0
    return (step.prompt_tokens * p[0] + step.completion_tokens * p[1]) / 1e6 * share


def run_costs(run: Any) -> dict:
    """{"spent", "trajectory_cost", "saved", "dollars"} of a run (dollars None if unpriced)."""
    prices = price_table()
    cost = sum(step_cost(s) for s in run.steps)
    spent = int(run.total_tokens or 0)
    dollars: Optional[float] = 0.0
    for s in run.steps:
        d = step_dollars(s, prices)
        dollars = None if d is None or dollars is None else dollars + d
    return {"spent": spent, "trajectory_cost": cost, "saved": max(cost - spent, 0), "dollars": dollars}
