"""The text of a replay's verdict: read like a good diff, first divergence first.

    snapshot tests/rewind/research.json diverged at node `critique` (step 4 of 8)
      why it re-ran: critique ran again because `prompts.SYSTEM` changed
      verdict: deterministic node: its output hash changed
      output `critique`:
        --- recorded
        +++ replayed
        @@ ...
      model calls that changed: ...
      after it: revise (model call not in the snapshot), ...

Owns `render(result)` and `summary(result)` (the one line a record-mode run prints). Output
values are diffed as text: strings line by line, anything else as sorted, indented JSON.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from .cassette import request_diff, request_text

MAX_DIFF_LINES = 80
INDENT = "  "


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)


def value_diff(before: Any, after: Any, label: str) -> list:
    lines = list(difflib.unified_diff(_text(before).splitlines(), _text(after).splitlines(),
                                      f"{label} (recorded)", f"{label} (replayed)", lineterm=""))
    if len(lines) > MAX_DIFF_LINES:
        cut = len(lines) - MAX_DIFF_LINES
        lines = lines[:MAX_DIFF_LINES] + [f"... {cut} more diff lines"]
    return lines


def output_diffs(node: Any) -> list:
    """Diff lines of every written field whose value changed (and fields added or removed)."""
    out = []
    names = list(dict.fromkeys(list(node.recorded_outputs) + list(node.outputs)))
    for name in names:
        before = node.recorded_outputs.get(name, "<not written>")
        after = node.outputs.get(name, "<not written>")
        if _text(before) == _text(after):
            continue
        out.append(f"output `{name}`:")
        out.extend(INDENT + line for line in value_diff(before, after, f"{node.node}.{name}"))
    return out


def _call_lines(node: Any) -> list:
    lines = []
    dropped, new = list(node.dropped_calls), list(node.new_calls)
    for i, call in enumerate(new):
        before = dropped[i] if i < len(dropped) else None
        if before is None:
            lines.append(f"{INDENT}+ a new model call ({call.get('api')} {call.get('model')}):")
            lines.extend(INDENT * 2 + line for line in request_text(call).splitlines())
            continue
        lines.append(f"{INDENT}~ a recorded call changed ({call.get('api')} {call.get('model')}):")
        lines.extend(INDENT * 2 + line for line in request_diff(before, call).splitlines())
        if before.get("response_text") != call.get("response_text"):
            lines.extend(INDENT * 2 + line for line in value_diff(
                before.get("response_text"), call.get("response_text"), "response"))
    for call in dropped[len(new):]:
        lines.append(f"{INDENT}- a recorded call no longer made ({call.get('api')} {call.get('model')})")
    return ["model calls that changed:"] + lines if lines else []


def _hash(h: Any) -> str:
    return (h or "none")[:12]


def render(result: Any) -> str:
    where = result.path or "the snapshot"
    total = len(result.nodes)
    first = result.first_divergence
    out = []
    if first is None and not result.problem:
        return f"snapshot {where} replayed: {total} steps, no divergence"
    if first is not None:
        out.append(f"snapshot {where} diverged at node `{first.node}`"
                   + (f" (visit {first.occurrence})" if first.occurrence > 1 else "")
                   + f" (step {first.index + 1} of {result.steps_total})")
        out.append(f"{INDENT}why it re-ran: {first.reason}")
        head, *rest = (first.detail or first.verdict).splitlines()
        out.append(f"{INDENT}verdict: {head}")
        out.extend(INDENT * 2 + line for line in rest)
        if first.verdict != "failed":  # a step that raised wrote nothing to compare
            out.append(f"{INDENT}output hash: recorded {_hash(first.recorded_hash)}, replayed "
                       f"{_hash(first.replayed_hash)}")
            out.extend(INDENT + line for line in output_diffs(first))
            out.extend(INDENT + line for line in _call_lines(first))
        if len(first.missing) > 1:
            out.append(f"{INDENT}{len(first.missing) - 1} more calls of this step are not in the snapshot")
        later = [n for n in result.nodes[first.index + 1:] if not n.ok]
        if later:
            out.append(f"{INDENT}after it: " + "; ".join(
                f"{n.node} ({n.detail.splitlines()[0] if n.detail else n.verdict})" for n in later))
    if result.problem:
        out.append(f"{INDENT}{result.problem}" if first is not None
                   else f"snapshot {where}: {result.problem}")
    out.append("if the new behaviour is right, re-record with `pytest --rewind-record=new` "
               "(rewrites the snapshot; review its diff)")
    return "\n".join(out)


def summary(result: Any, path: Any) -> str:
    """One line for a record-mode replay that rewrote its snapshot."""
    executed = [n for n in result.nodes if n.action == "executed"]
    changed = [n.node for n in executed if n.verdict != "same"]
    calls = sum(len(n.new_calls) for n in executed)
    return (f"rewind: rewrote {path}: {len(executed)} steps re-executed"
            + (f", outputs changed at {', '.join(changed)}" if changed else "")
            + f", {calls} model calls recorded")
