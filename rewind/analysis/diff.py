"""Trajectory diff: align two runs by (node, occurrence), compare output hashes, and show what
changed: a unified diff of text fields and a field-level diff of structured ones."""

from __future__ import annotations

import difflib
import json
from typing import Any

from ..models import DiffRow, Run, TrajectoryDiff

MAX_DIFF_LINES = 400


def unified_text_diff(a: str, b: str, label_a: str = "A", label_b: str = "B") -> str:
    lines = list(
        difflib.unified_diff(
            a.splitlines(), b.splitlines(), fromfile=label_a, tofile=label_b, lineterm="", n=2
        )
    )
    if len(lines) > MAX_DIFF_LINES:
        lines = lines[:MAX_DIFF_LINES] + [f"… {len(lines) - MAX_DIFF_LINES} more lines"]
    return "\n".join(lines)


def field_diff(a: Any, b: Any, path: str = "") -> list:
    """Changes between two structured values as [{path, change, a, b}]."""
    out: list = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            p = f"{path}.{k}" if path else str(k)
            if k not in a:
                out.append({"path": p, "change": "added", "a": None, "b": b[k]})
            elif k not in b:
                out.append({"path": p, "change": "removed", "a": a[k], "b": None})
            else:
                out.extend(field_diff(a[k], b[k], p))
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            p = f"{path}[{i}]"
            if i >= len(a):
                out.append({"path": p, "change": "added", "a": None, "b": b[i]})
            elif i >= len(b):
                out.append({"path": p, "change": "removed", "a": a[i], "b": None})
            else:
                out.extend(field_diff(a[i], b[i], p))
    elif a != b or type(a) is not type(b):
        out.append({"path": path or "value", "change": "changed", "a": a, "b": b})
    return out


def _aligned_keys(a_keys: list, b_keys: list) -> list:
    """Merge two ordered key lists, keeping each side's order (a's first where both agree)."""
    merged: list = []
    sm = difflib.SequenceMatcher(a=a_keys, b=b_keys, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            merged.extend(a_keys[i1:i2])
        else:
            merged.extend(k for k in a_keys[i1:i2] if k not in merged)
            merged.extend(k for k in b_keys[j1:j2] if k not in merged and k not in a_keys)
    return merged


def output_changes(a_out: dict, b_out: dict) -> tuple:
    text_diffs, field_diffs = {}, {}
    for field in sorted(set(a_out) | set(b_out)):
        va, vb = a_out.get(field), b_out.get(field)
        if va == vb:
            continue
        if isinstance(va, str) and isinstance(vb, str):
            text_diffs[field] = unified_text_diff(va, vb, f"A/{field}", f"B/{field}")
        else:
            field_diffs[field] = field_diff(va, vb, field)
    return text_diffs, field_diffs


def diff_runs(a: Run, b: Run) -> TrajectoryDiff:
    a_steps = {(s.node, s.occurrence): s for s in a.steps}
    b_steps = {(s.node, s.occurrence): s for s in b.steps}
    keys = _aligned_keys([(s.node, s.occurrence) for s in a.steps],
                         [(s.node, s.occurrence) for s in b.steps])
    rows, first = [], None
    for key in keys:
        sa, sb = a_steps.get(key), b_steps.get(key)
        statuses = (sa.status if sa else None, sb.status if sb else None)
        if "dry-run" in statuses:
            identical = None
        elif sa is None or sb is None:
            identical = False
        elif sa.status == "failed" or sb.status == "failed":
            identical = sa.status == sb.status and sa.error == sb.error
        else:
            identical = sa.output_hash == sb.output_hash
        row = DiffRow(
            node=key[0], occurrence=key[1], a_hash=sa.output_hash if sa else None,
            b_hash=sb.output_hash if sb else None, identical=identical,
            a_status=statuses[0], b_status=statuses[1],
            a_tokens=sa.tokens if sa else 0, b_tokens=sb.tokens if sb else 0,
            a_latency_ms=sa.latency_ms if sa else 0.0, b_latency_ms=sb.latency_ms if sb else 0.0,
            a_reason=sa.reason if sa else "", b_reason=sb.reason if sb else "",
            a_cost=sa.cost if sa else 0, b_cost=sb.cost if sb else 0,
        )
        same_inputs = sa is not None and sb is not None and sa.input_hash == sb.input_hash
        row.cost_delta = 0 if same_inputs else row.b_cost - row.a_cost
        if identical is False:
            if first is None:
                first = key[0]
            if sa is not None and sb is not None:
                try:
                    row.text_diffs, row.field_diffs = output_changes(sa.outputs, sb.outputs)
                except Exception as e:  # a purged blob must not hide the rest of the diff
                    row.field_diffs = {"_error": [{"path": "", "change": "unavailable", "a": str(e), "b": None}]}
        rows.append(row)
    return TrajectoryDiff(
        a=a.id, b=b.id, rows=rows, first_divergence=first, tokens_a=a.total_tokens,
        tokens_b=b.total_tokens, tokens_saved_b=b.tokens_saved,
        cost_a=a.trajectory_cost, cost_b=b.trajectory_cost,
    )


def to_json(d: TrajectoryDiff) -> str:
    import dataclasses

    return json.dumps(dataclasses.asdict(d), default=str, indent=2)
