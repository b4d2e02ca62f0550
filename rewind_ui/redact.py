"""What a signed-in user's pages may say about runs they cannot see: the cache is shared
across owners, and the core names the run a cache entry came from in a step's reason ("cache
hit: same inputs as run 3f9c…", "nondeterministic: … (run 3f9c…)") and in `Step.source_run`.
A hit only tells bob that his own inputs were seen before, which his inputs already determine;
the id of alice's run is more than that, so it is replaced before any page draws it.

Pure functions over rewind's records (no streamlit); `visible(run_id) -> bool` is the caller's.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

# run ids are hex (uuid4 hex or a prefix of it); "run <id>" is how the core names one in a reason
_RUN_REF = re.compile(r"\brun ([0-9a-f]{8,32})\b")
ANOTHER = "an earlier run"


def text(s: Any, visible: Callable[[str], bool]) -> Any:
    """`s` with every "run <id>" the viewer cannot see replaced by "an earlier run"."""
    if not isinstance(s, str) or "run " not in s:
        return s
    return _RUN_REF.sub(lambda m: m.group(0) if visible(m.group(1)) else ANOTHER, s)


def run(r: Any, visible: Callable[[str], bool]) -> Any:
    """A copy of Run `r` whose steps name no invisible run (the original is left untouched)."""
    steps = []
    for s in getattr(r, "steps", None) or []:
        changes: dict = {}
        src = getattr(s, "source_run", None)
        if src and not visible(src):
            changes["source_run"] = None
        for name in ("reason", "error"):
            value = getattr(s, name, None)
            new = text(value, visible)
            if new is not value and new != value:
                changes[name] = new
        steps.append(dataclasses.replace(s, **changes) if changes else s)
    return dataclasses.replace(r, steps=steps) if dataclasses.is_dataclass(r) else r


def diff(d: Any, visible: Callable[[str], bool]) -> Any:
    """A copy of TrajectoryDiff `d` whose rows' reasons name no invisible run."""
    rows = []
    for row in getattr(d, "rows", None) or []:
        changes = {k: text(getattr(row, k), visible) for k in ("a_reason", "b_reason")
                   if text(getattr(row, k, None), visible) != getattr(row, k, None)}
        rows.append(dataclasses.replace(row, **changes) if changes else row)
    return dataclasses.replace(d, rows=rows) if dataclasses.is_dataclass(d) else d
