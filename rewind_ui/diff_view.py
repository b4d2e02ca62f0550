"""The Diff page's view-model: which pair to show by default, the verdict and its numbers, the
aligned rows, one node's field changes and the chart series, from a `TrajectoryDiff`. Pure (no
streamlit).
"""

from __future__ import annotations

from typing import Any, Optional

from . import fmt, worddiff
from .graph import diff_outcome
from .steps import Choice


def default_pair(newest_fork: Optional[dict], newest_two: list) -> tuple:
    """(A, B): the newest fork against its parent, else the two newest runs, else (None, None)."""
    if newest_fork:
        return newest_fork["parent_id"], newest_fork["id"]
    if len(newest_two) == 2:
        return newest_two[1]["id"], newest_two[0]["id"]
    return None, None


def row_key(r: Any) -> str:
    return fmt.step_key(r.node, r.occurrence)


def rows_by_key(d: Any) -> dict:
    return {row_key(r): r for r in d.rows}


def choices(d: Any) -> list:
    return [Choice(row_key(r), f"{row_key(r)} — {diff_outcome(r)}") for r in d.rows]


def first_diverged(d: Any) -> Optional[str]:
    return next((row_key(r) for r in d.rows if r.identical is False), None)


def verdict(d: Any) -> tuple:
    """("success" | "warning", markdown text) and the counts behind it."""
    compared = [r for r in d.rows if r.identical is not None]
    same = sum(1 for r in compared if r.identical)
    if not d.diverged:
        return "success", f"Identical: {same} of {len(compared)} compared nodes have the same output hash."
    return "warning", (f"Diverged at **{fmt.md_escape(d.first_divergence)}**: {same} of {len(compared)} "
                       f"compared nodes identical, {len(d.diverged)} diverged.")


COST_HELP = ("what the whole trajectory would cost run fresh (inherited and cached steps at their "
             "recorded cost); the change counts only nodes whose inputs changed")
SPENT_HELP = "tokens the run itself paid for (a fork does not pay for what it inherits or gets from the cache)"


def metrics(d: Any) -> list:
    """(label, value, delta, help) for the headline: like compared with like, trajectory cost A
    against B (the change is 0 on every node whose inputs did not change), then what each spent."""
    compared = [r for r in d.rows if r.identical is not None]
    same = sum(1 for r in compared if r.identical)
    return [("Identical nodes", f"{same} / {len(compared)}", None, None),
            ("First divergence", d.first_divergence or "none", None, None),
            ("Trajectory cost A", fmt.fmt_tokens(d.cost_a), None, COST_HELP),
            ("Trajectory cost B", fmt.fmt_tokens(d.cost_b), int(d.cost_delta), COST_HELP),
            ("Spent by A", fmt.fmt_tokens(d.tokens_a), None, SPENT_HELP),
            ("Spent by B", fmt.fmt_tokens(d.tokens_b), None, SPENT_HELP),
            ("Saved by B", fmt.fmt_tokens(max(int(d.cost_b) - int(d.tokens_b), 0)), None,
             "B's trajectory cost minus what B spent (inherited and cached steps)")]


def dollars_caption(costs_a: dict, costs_b: dict) -> str:
    """`Trajectory cost in USD: A $0.0123 · B $0.0130 (price table; REWIND_PRICES)`."""
    return (f"Trajectory cost in USD: A {fmt.fmt_dollars(costs_a['dollars'])} · B "
            f"{fmt.fmt_dollars(costs_b['dollars'])} (price table; set REWIND_PRICES to change it)")


def fork_caption(run_a: Any, run_b: Any) -> Optional[str]:
    """`B is a fork of A at critique · edit: {…}` when B forks A, else None (markdown)."""
    if run_b.parent_id != run_a.id:
        return None
    md = fmt.md_escape
    return (f"B is a fork of A at **{md(run_b.fork_node)}**"
            + (f" · edit: {md(fmt.json_line(run_b.edit), 300)}" if run_b.edit else "")
            + (f" · params: {md(fmt.json_line(run_b.params), 300)}" if run_b.params else ""))


def table(d: Any, with_noise: bool, shown: Optional[dict] = None) -> list:
    """One row per aligned step: the why (B's reason, which is what changed) before the numbers,
    A's reason last (an original run's reasons are mostly `no earlier entry`); the hashes are in
    the node's detail. Costs are the core's (rewind.costs): Δ cost is 0 where inputs did not change.
    `shown` (shown_statuses) names the statuses as the pages show them."""
    shown = shown or {}
    return [
        {"Node": k, "Match": fmt.MATCH_MARK[r.identical],
         "A status": shown.get(("a", r.node, r.occurrence), r.a_status) or "—",
         "B status": shown.get(("b", r.node, r.occurrence), r.b_status) or "—", "B reason": r.b_reason, "Δ cost": r.cost_delta,
         "A cost": r.a_cost, "B cost": r.b_cost, "B spent": r.b_tokens,
         **({"Noise": r.noise or "—"} if with_noise else {}), "A reason": r.a_reason}
        for k, r in rows_by_key(d).items()
    ]


def sides(r: Any, run_a: Any, run_b: Any) -> list:
    """(label, run, output hash, status, reason) for the side-by-side view of one node."""
    return [("A", run_a, r.a_hash, r.a_status, r.a_reason), ("B", run_b, r.b_hash, r.b_status, r.b_reason)]


def field_rows(r: Any) -> list:
    """One row per changed path of one node's outputs (values as one-line JSON)."""
    return [{"Path": ch.get("path"), "Change": ch.get("change"),
             "A": fmt.json_line(ch.get("a")), "B": fmt.json_line(ch.get("b"))}
            for changes in (r.field_diffs or {}).values() for ch in changes]


def cost_series(d: Any) -> tuple:
    """(A's recorded cost, B's recorded cost, the core's delta) per aligned step."""
    return [r.a_cost for r in d.rows], [r.b_cost for r in d.rows], [r.cost_delta for r in d.rows]


def latency_series(d: Any) -> tuple:
    return ([fmt.latency_value(r.a_latency_ms) for r in d.rows],
            [fmt.latency_value(r.b_latency_ms) for r in d.rows])


def text_diff_views(r: Any, outputs_a: Any, outputs_b: Any) -> list:
    """[(field, HTML or None, the core's unified diff)] for one node's changed text fields: the
    changed words marked when both sides' values are text (wrapping: an edit in the middle of
    a long line is on screen), else None and the page shows the unified diff wrapped."""
    out = []
    for name, unified in (r.text_diffs or {}).items():
        a = outputs_a.get(name) if isinstance(outputs_a, dict) else None
        b = outputs_b.get(name) if isinstance(outputs_b, dict) else None
        html = None
        if isinstance(a, str) and isinstance(b, str):
            lines = worddiff.diff_lines(a, b)
            html = worddiff.to_html(lines) if lines else None
        out.append((name, html, unified))
    return out


def shown_statuses(run_a: Any, run_b: Any) -> dict:
    """{("a" | "b", node, occurrence): the status a page shows} for both runs' steps, so a step
    that re-ran with every model call served reads as such here too (fmt.shown_status)."""
    return {(side, s.node, s.occurrence): fmt.shown_status(s)
            for side, run in (("a", run_a), ("b", run_b)) for s in run.steps}


def noise_rows(d: Any, k: int) -> list:
    return [{"Node": row_key(r), f"Noise (k={k})": r.noise or "—"} for r in d.rows if r.identical is False]
