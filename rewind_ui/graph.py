"""What the pipeline graph shows: nodes coloured by step status or by diff outcome, with
tooltips. Pure (lists of dicts, no streamlit); rewind_ui/picker.py draws a spec.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from .fmt import fmt_ms, fmt_tokens, tooltip_escape

NOT_REACHED = "not reached"

STATUS_COLORS = {
    "executed": "#2e7d32",
    "cached": "#1565c0",
    "dry-run": "#ef8f00",
    "failed": "#c62828",
    "inherited": "#7b5ea7",
    NOT_REACHED: "#9e9e9e",
}
STATUS_HELP = {
    "executed": "ran in this run (spent tokens)",
    "cached": "served from the cache (0 tokens)",
    "dry-run": "side effect not performed",
    "failed": "raised an error",
    "inherited": "taken from the parent run before the fork point",
    NOT_REACHED: "the run never got there",
}

DIFF_COLORS = {
    "identical": "#2e7d32",
    "diverged": "#c62828",
    "not compared": "#ef8f00",
    "only in A": "#6d4c41",
    "only in B": "#00838f",
    NOT_REACHED: "#9e9e9e",
}
DIFF_HELP = {
    "identical": "same output hash on both sides",
    "diverged": "output hashes differ",
    "not compared": "a side effect was dry-run on one side",
    "only in A": "step exists only in run A",
    "only in B": "step exists only in run B",
    NOT_REACHED: "neither run reached it",
}

# when a node ran several times, the colour shows the most telling visit
_PRIORITY = ["failed", "executed", "dry-run", "cached", "inherited"]


def node_status(steps: Iterable[Any]) -> dict:
    """{node: status} over a trajectory; a node visited several times shows its most
    telling status (failed > executed > dry-run > cached > inherited)."""
    out: dict = {}
    for s in steps:
        prev = out.get(s.node)
        if prev is None or _PRIORITY.index(s.status) < _PRIORITY.index(prev):
            out[s.node] = s.status if s.status in _PRIORITY else prev or s.status
    return out


def _edges(edges: Iterable) -> list:
    seen, out = set(), []
    for e in edges:
        src, dst = e[0], e[1]
        cond = e[2] if len(e) > 2 else None
        if (src, dst) in seen:
            continue
        seen.add((src, dst))
        label = "" if cond in (None, "", "default") else str(cond)[:24]
        out.append({"source": src, "target": dst, "label": label})
    return out


def run_graph_spec(nodes: list, edges: list, steps: list, alarmed: Iterable[str] = ()) -> dict:
    """Nodes coloured by step status with tooltips giving each visit's status and reason."""
    statuses = node_status(steps)
    alarmed = set(alarmed)
    by_node: dict = {}
    for s in steps:
        by_node.setdefault(s.node, []).append(s)
    names = list(nodes) + [n for n in by_node if n not in nodes]
    out_nodes = []
    for n in names:
        status = statuses.get(n, NOT_REACHED)
        lines = [f"{n}: {status}"]
        for s in by_node.get(n, []):
            head = f"#{s.occurrence} {s.status}" if len(by_node[n]) > 1 else s.status
            lines.append(f"{head} · {fmt_tokens(s.tokens)} tokens · {fmt_ms(s.latency_ms)}")
            if s.reason:
                lines.append(s.reason)
            if s.error:
                lines.append(f"error: {s.error}")
        if n in alarmed:
            lines.append("nondeterminism alarm: same inputs gave different outputs")
        if not by_node.get(n):
            lines.append(STATUS_HELP[NOT_REACHED])
        out_nodes.append({
            "id": n, "label": ("⚠ " if n in alarmed else "") + n, "status": status,
            "color": STATUS_COLORS.get(status, "#607d8b"), "title": tooltip_escape("\n".join(lines)),
        })
    return {"nodes": out_nodes, "edges": _edges(edges)}


def diff_outcome(row: Any) -> str:
    if row.a_status is None:
        return "only in B"
    if row.b_status is None:
        return "only in A"
    if row.identical is None:
        return "not compared"
    return "identical" if row.identical else "diverged"


def diff_graph_spec(nodes: list, edges: list, rows: list) -> dict:
    """Nodes coloured identical / diverged / not compared, tooltips with both sides' reasons."""
    by_node: dict = {}
    for r in rows:
        by_node.setdefault(r.node, []).append(r)
    names = list(nodes) + [n for n in by_node if n not in nodes]
    order = ["diverged", "only in A", "only in B", "not compared", "identical"]
    out_nodes = []
    for n in names:
        outcomes = [diff_outcome(r) for r in by_node.get(n, [])]
        outcome = min(outcomes, key=order.index) if outcomes else NOT_REACHED
        lines = [f"{n}: {outcome}"]
        for r in by_node.get(n, []):
            tag = f"#{r.occurrence} " if len(by_node[n]) > 1 else ""
            lines.append(f"{tag}A {r.a_status or '—'}: {r.a_reason or ''}")
            lines.append(f"{tag}B {r.b_status or '—'}: {r.b_reason or ''}")
            if r.noise:
                lines.append(f"{tag}{r.noise}")
        out_nodes.append({
            "id": n, "label": n, "status": outcome, "color": DIFF_COLORS[outcome],
            "title": tooltip_escape("\n".join(lines)),
        })
    return {"nodes": out_nodes, "edges": _edges(edges)}


def legend_html(colors: dict, help: Optional[dict] = None) -> str:
    """A static legend (our own fixed labels and colours, no model text)."""
    items = []
    for label, color in colors.items():
        tip = (help or {}).get(label, "")
        items.append(
            f'<span title="{tip}" style="display:inline-flex;align-items:center;margin-right:14px;'
            f'font-size:0.85rem"><span style="display:inline-block;width:12px;height:12px;'
            f'border-radius:3px;background:{color};margin-right:5px"></span>{label}</span>'
        )
    return "<div>" + "".join(items) + "</div>"

