"""What the pipeline graph shows, for every page: nodes coloured by step status, on the diff
page B's status as the fill and A's as the border with the identical/diverged mark in the
label; the fork point (`↳`, dashed border) and the selected node (a halo) marked; tooltips
with each visit's reason. Pure (lists of dicts, no streamlit); rewind_ui/picker.py draws a spec.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from .fmt import SERVED_RERUN, fmt_ms, fmt_tokens, shown_status, tooltip_escape

NOT_REACHED = "not reached"

STATUS_COLORS = {
    "executed": "#2e7d32",
    SERVED_RERUN: "#00838f",  # between a real re-run (green) and a cache hit (blue): teal
    "cached": "#1565c0",
    "dry-run": "#ef8f00",
    "failed": "#c62828",
    "inherited": "#7b5ea7",
    NOT_REACHED: "#9e9e9e",
}
STATUS_HELP = {
    "executed": "ran in this run (spent tokens)",
    SERVED_RERUN: "ran again, every model call served from the model-call cache (0 tokens, nothing sent)",
    "cached": "served from the cache (0 tokens)",
    "dry-run": "side effect not performed",
    "failed": "raised an error",
    "inherited": "taken from the parent run before the fork point",
    NOT_REACHED: "the run never got there",
}

# the diff's identical/diverged mark, in the node's label (the colours are the sides' statuses)
DIFF_MARKS = {
    "identical": "✓",
    "diverged": "✗",
    "not compared": "–",
    "only in A": "A",
    "only in B": "B",
    NOT_REACHED: "·",
}
DIFF_HELP = {
    "identical": "same output hash on both sides",
    "diverged": "output hashes differ",
    "not compared": "a side effect was dry-run on one side",
    "only in A": "step exists only in run A",
    "only in B": "step exists only in run B",
    NOT_REACHED: "neither run reached it",
}
# what the legend of the diff graph says about the two colours of a node
DIFF_SIDES_HELP = "fill: B's status · border: A's status"
FORK_MARK = "↳"
SELECTED_HALO = "#ffb300"

# when a node ran several times, the colour shows the most telling visit
_PRIORITY = ["failed", "executed", SERVED_RERUN, "dry-run", "cached", "inherited"]


def node_status(steps: Iterable[Any]) -> dict:
    """{node: status shown} over a trajectory; a node visited several times shows its most
    telling status (failed > executed > re-ran · calls served > dry-run > cached > inherited)."""
    out: dict = {}
    for s in steps:
        prev, status = out.get(s.node), shown_status(s)
        if status not in _PRIORITY:
            out[s.node] = prev or status
        elif prev is None or prev not in _PRIORITY or _PRIORITY.index(status) < _PRIORITY.index(prev):
            out[s.node] = status
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


def levels(names: list, edges: list) -> dict:
    """{node: column} for the left-to-right layout: the longest path from the first node with
    every loop's back edge left out, so a branch fans out and a loop's return edge points back
    (vis-network's own "directed" sort puts every node of a cycle in one column)."""
    succ: dict = {n: [] for n in names}
    for e in edges:
        if e["source"] in succ and e["target"] in succ:
            succ[e["source"]].append(e["target"])
    back, state = set(), {}
    for root in names:  # iterative DFS: a back edge points at a node still on the stack
        if root in state:
            continue
        stack = [(root, iter(succ[root]))]
        state[root] = "open"
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = "done"
                stack.pop()
            elif state.get(nxt) == "open":
                back.add((node, nxt))
            elif nxt not in state:
                state[nxt] = "open"
                stack.append((nxt, iter(succ[nxt])))
    level = {n: 0 for n in names}
    for _ in names:  # longest path over the acyclic rest (Bellman-style, at most len(names) rounds)
        moved = False
        for src in names:
            for dst in succ[src]:
                if (src, dst) not in back and level[dst] < level[src] + 1:
                    level[dst], moved = level[src] + 1, True
        if not moved:
            break
    return level


def _with_levels(spec: dict) -> dict:
    lv = levels([n["id"] for n in spec["nodes"]], spec["edges"])
    for n in spec["nodes"]:
        n["level"] = lv.get(n["id"], 0)
    return spec


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
            head = f"#{s.occurrence} {shown_status(s)}" if len(by_node[n]) > 1 else shown_status(s)
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
    return _with_levels({"nodes": out_nodes, "edges": _edges(edges)})


def diff_outcome(row: Any) -> str:
    if row.a_status is None:
        return "only in B"
    if row.b_status is None:
        return "only in A"
    if row.identical is None:
        return "not compared"
    return "identical" if row.identical else "diverged"


def _side_status(statuses: list) -> str:
    known = [s for s in statuses if s in _PRIORITY]
    return min(known, key=_PRIORITY.index) if known else NOT_REACHED


def diff_graph_spec(nodes: list, edges: list, rows: list, shown: Optional[dict] = None) -> dict:
    """Both sides' statuses on each node (fill B, border A, see STATUS_COLORS), the
    identical/diverged mark in the label, tooltips with both sides' reasons and costs. `shown`
    maps ("a" | "b", node, occurrence) to the status a page shows (diff_view.shown_statuses)."""
    shown = shown or {}

    def side(r: Any, which: str) -> Optional[str]:
        stored = r.a_status if which == "a" else r.b_status
        return shown.get((which, r.node, r.occurrence), stored) if stored else stored

    by_node: dict = {}
    for r in rows:
        by_node.setdefault(r.node, []).append(r)
    names = list(nodes) + [n for n in by_node if n not in nodes]
    order = ["diverged", "only in A", "only in B", "not compared", "identical"]
    out_nodes = []
    for n in names:
        visits = by_node.get(n, [])
        outcomes = [diff_outcome(r) for r in visits]
        outcome = min(outcomes, key=order.index) if outcomes else NOT_REACHED
        a_status = _side_status([side(r, "a") for r in visits])
        b_status = _side_status([side(r, "b") for r in visits])
        lines = [f"{n}: {outcome} · A {a_status} · B {b_status}"]
        for r in visits:
            tag = f"#{r.occurrence} " if len(visits) > 1 else ""
            lines.append(f"{tag}A {side(r, 'a') or '—'} ({fmt_tokens(getattr(r, 'a_cost', 0))} tokens): {r.a_reason or ''}")
            lines.append(f"{tag}B {side(r, 'b') or '—'} ({fmt_tokens(getattr(r, 'b_cost', 0))} tokens): {r.b_reason or ''}")
            if r.noise:
                lines.append(f"{tag}{r.noise}")
        out_nodes.append({
            "id": n, "label": f"{DIFF_MARKS[outcome]} {n}", "status": outcome, "a_status": a_status,
            "b_status": b_status, "color": STATUS_COLORS.get(b_status, "#607d8b"),
            "border": STATUS_COLORS.get(a_status, "#607d8b"), "title": tooltip_escape("\n".join(lines)),
        })
    return _with_levels({"nodes": out_nodes, "edges": _edges(edges)})


def mark(spec: dict, fork_point: Optional[str] = None, selected: Optional[str] = None) -> dict:
    """The spec with the fork point (↳ in the label, a dashed border) and the selected node (a
    halo) marked; node names, never step keys (`critique#2` marks `critique`)."""
    out = []
    for n in spec["nodes"]:
        n = dict(n)
        if fork_point and n["id"] == fork_point:
            n["label"] = f"{FORK_MARK} {n['label']}"
            n["dashed"] = True
            n["title"] = n["title"] + tooltip_escape("\nfork point")
        if selected and n["id"] == selected:
            n["selected"] = True
        out.append(n)
    return {**spec, "nodes": out}


_ROW = ('<div class="rw-legend-row" style="display:flex;flex-wrap:wrap;align-items:center;'
        'column-gap:12px;font-size:0.8rem;line-height:1.6">')
_ITEM = '<span title="{tip}" style="display:inline-flex;align-items:center;white-space:nowrap">'


def legend_html(colors: dict, help: Optional[dict] = None, marks: Optional[dict] = None,
                note: str = "") -> str:
    """A static legend (our own fixed labels and colours, no model text): the status colours,
    the diff's marks when given, the fork point and the selection. Each row is one line at
    1280 px and an item never breaks inside (no `A only in A B` / `only in B`): the colours on
    the first row (after the note, which says what the colours are), the marks on the second."""
    colours = [_ITEM.format(tip=(help or {}).get(label, ""))
               + f'<span style="display:inline-block;width:11px;height:11px;border-radius:3px;'
               f'background:{color};margin-right:4px"></span>{label}</span>'
               for label, color in colors.items()]
    signs = [_ITEM.format(tip=DIFF_HELP.get(label, "")) + f"<b>{sign}</b>&nbsp;{label}</span>"
             for label, sign in (marks or {}).items() if label not in colors]  # "not reached" is a colour
    signs.append(_ITEM.format(tip="the node this run was forked at")
                 + f"<b>{FORK_MARK}</b>&nbsp;fork point (dashed)</span>")
    signs.append(_ITEM.format(tip="the step shown below")
                 + f'<span style="display:inline-block;width:11px;height:11px;border-radius:6px;'
                 f'box-shadow:0 0 0 3px {SELECTED_HALO};margin-right:6px"></span>selected</span>')
    lead = [f'<span style="color:#607d8b;white-space:nowrap">{note}</span>'] if note else []
    rows = [lead + colours, signs] if marks else [colours + signs]
    return '<div class="rw-legend">' + "".join(_ROW + "".join(r) + "</div>" for r in rows) + "</div>"
