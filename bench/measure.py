"""How the benchmark measures and collects: medians, per-call timing, and the figure table."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any, Callable, Optional


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def median(xs: list) -> float:
    return statistics.median(xs) if xs else float("nan")


def per_call_us(fn: Callable[[], Any], target_s: float = 0.02, batches: int = 15) -> float:
    """Median over `batches` of the mean time of one call, in µs (calls batched to ~target_s)."""
    fn()
    n, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= target_s / 4 or n >= 1 << 20:
            break
        n *= 2
    n = max(1, int(n * target_s / max(t, 1e-9)))
    out = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return median(out)


class Figures:
    """Rows of the result table plus free-form details for the JSON."""

    def __init__(self):
        self.rows: list = []
        self.details: dict = {}
        self.errors: list = []

    def add(self, key: str, figure: str, value: Optional[float], unit: str, goal: str = "",
            met: Optional[bool] = None, display: Optional[str] = None, note: str = "") -> None:
        if display is None:
            display = "n/a" if value is None else f"{fmt(value)} {unit}".strip()
        self.rows.append({
            "key": key, "figure": figure, "value": value, "unit": unit, "display": display,
            "goal": goal, "met": met, "note": note,
        })

    def na(self, key: str, figure: str, why: str, goal: str = "") -> None:
        self.add(key, figure, None, "", goal, None, display=f"n/a: {why}")


def fmt(v: float) -> str:
    if v is None:
        return "n/a"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def count_round_trips(connection: Any) -> dict:
    """Make `connection` (psycopg2) count each execute/executemany its cursors send, one round
    trip each; returns the counter ({"n": ...}) to read and reset."""
    import psycopg2.extensions

    count = {"n": 0}

    class Counting(psycopg2.extensions.cursor):
        def execute(self, *a, **k):
            count["n"] += 1
            return super().execute(*a, **k)

        def executemany(self, *a, **k):
            count["n"] += 1
            return super().executemany(*a, **k)

    connection.cursor_factory = Counting
    return count

