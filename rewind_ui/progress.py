"""A progress bar that long reports (the audit, the noise band) advance through their
`on_progress(done, total, node, ...)` callback."""

from __future__ import annotations

from typing import Any, Callable


def reporter(bar: Any, verb: str) -> Callable:
    """`on_progress` for `bar` (an st.progress): `Auditing critique (3/8)`."""

    def on_progress(done, total=None, node=None, *rest) -> None:
        frac = (done / total) if total else 0.0
        bar.progress(min(1.0, max(0.0, float(frac))), text=f"{verb} {node or ''} ({done}/{total or '?'})")

    return on_progress
