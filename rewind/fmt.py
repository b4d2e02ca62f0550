"""How Rewind spells numbers, durations, times, hashes and plain-text tables for people: one
library, used by the CLI, the MCP server and the dashboard alike (pure functions, no UI imports)."""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import math
from typing import Any, Optional, Sequence


def short_hash(h: Optional[str], n: int = 10) -> str:
    return (h or "")[:n] if h else "—"


def fmt_count(n: Any) -> str:
    """`1,234`; `—` for something that is not a number."""
    try:
        return f"{int(n):,}"
    except (TypeError, ValueError, OverflowError):
        return "—"


def fmt_tokens(n: Any) -> str:
    return fmt_count(n)


def fmt_ms(ms: Any) -> str:
    """A latency for reading: `8.5 ms`, `312 ms`, `1.23 s`, `12.3 s`."""
    try:
        ms = float(ms)
    except (TypeError, ValueError):
        return "—"
    if not math.isfinite(ms):
        return "—"
    if ms >= 10_000:
        return f"{ms / 1000:.1f} s"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def latency_value(ms: Any) -> float:
    """A latency as a table or chart number, in LATENCY_UNIT."""
    try:
        v = float(ms or 0)
    except (TypeError, ValueError):
        return 0.0
    return round(v, 1) if math.isfinite(v) else 0.0


def fmt_ts(ts: Any) -> str:
    if ts in (None, ""):
        return "—"
    try:
        return _dt.datetime.fromtimestamp(float(ts)).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return "—"


def fmt_bytes(n: Any) -> str:
    try:
        n = float(n)
    except (TypeError, ValueError):
        return "—"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def truncate(text: Any, n: int = 80) -> str:
    s = "" if text is None else " ".join(str(text).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def one_line(text: Any) -> str:
    return " ".join(str(text).split())


def cut(text: Any, width: int) -> str:
    s = one_line("" if text is None else text)
    return s if len(s) <= width else s[: max(width - 1, 0)] + "…"


def node_label(node: str, occurrence: Optional[int]) -> str:
    """`critique`, or `critique#2` for a later visit of a node in a loop."""
    return node if (occurrence or 1) == 1 else f"{node}#{occurrence}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """An aligned plain-text table; columns listed in `right` are right-aligned (numbers)."""
    cells = [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(widths[i]) if i in right else v.ljust(widths[i])
                         for i, v in enumerate(values)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def json_default(value: Any) -> Any:
    """`json.dumps(default=...)` for what JSON lacks: dataclasses as dicts, sets sorted, bytes
    as base64, anything else as its repr."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return repr(value)
