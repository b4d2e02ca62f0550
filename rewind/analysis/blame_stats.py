"""The statistics of blame: success rates with their 95% intervals, and which step decided.

A step's trials are Bernoulli samples: `wilson(successes, n)` is the Wilson score interval at
95% (it stays inside [0, 1] and is honest at 0 or n successes, where a normal interval
collapses). Re-rolling from the step after the last one is no re-roll at all: the run's own
outcome, a failure every time, so its interval is [0, 0].

The decisive step is the latest tried step whose interval lies wholly above the interval of the
next tried step after it (or of that no-re-roll baseline): from there re-rolling clearly
recovers success more often than from the step after, so after it the failure was locked in.
None when no step qualifies: the failure is deterministic given the run's inputs.
"""

from __future__ import annotations

import math
from typing import Optional

Z95 = 1.959963984540054
BASELINE = (0.0, 0.0)  # after the last step: no re-roll, the recorded failure


def wilson(successes: int, n: int, z: float = Z95) -> tuple:
    """(low, high) of the Wilson score interval; (0, 1) when nothing was tried."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # exact at the ends: rounding would otherwise put 0 successes a hair above 0
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return (low, high)


def clearly_above(a: tuple, b: tuple) -> bool:
    """Interval `a` lies wholly above interval `b` (they do not overlap)."""
    return a[0] > b[1]


def decisive_index(tallies: list) -> Optional[int]:
    """The index of the decisive step among `tallies` (one (successes, n) per candidate step,
    in trajectory order; n == 0: not tried), or None."""
    tried = [i for i, (_, n) in enumerate(tallies) if n > 0]
    for pos in range(len(tried) - 1, -1, -1):
        i = tried[pos]
        after = wilson(*tallies[tried[pos + 1]]) if pos + 1 < len(tried) else BASELINE
        if clearly_above(wilson(*tallies[i]), after):
            return i
    return None


def verdicts(tallies: list, decisive: Optional[int]) -> list:
    """One verdict per candidate: `decisive`, `recovers` (tried before it, or anywhere with a
    success when none is decisive), `locked` (tried after it, or never recovering), `not tried`."""
    out = []
    for i, (successes, n) in enumerate(tallies):
        if n == 0:
            out.append("not tried")
        elif decisive is not None and i == decisive:
            out.append("decisive")
        elif decisive is not None:
            out.append("recovers" if i < decisive else "locked")
        else:
            out.append("recovers" if successes else "locked")
    return out
