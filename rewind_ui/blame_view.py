"""The Blame page's view-model (pure: no streamlit): the outcome a user picks as a function, the
default nodes to re-sample, the table rows with a diff link per trial, the success-rate chart
with its intervals, and the run graph coloured by verdict."""

from __future__ import annotations

import json
from typing import Any, Callable

from rewind.analysis.blame import default_resample, field_outcome  # noqa: F401  (default_resample: the page's)

from .fmt import tooltip_escape

VERDICT_COLORS = {"decisive": "#c62828", "recovers": "#2e7d32", "locked": "#546e7a",
                  "not tried": "#cfd8dc", "not re-sampled": "#eceff1"}
VERDICT_HELP = {
    "decisive": "re-rolling from here recovers clearly more often than from the step after it: "
                "the failure was locked in here",
    "recovers": "re-rolling from here recovers too (it re-samples the decisive step as well)",
    "locked": "re-rolling from here does not clearly recover: the failure was already decided",
    "not tried": "no trial started here (bisect skipped it, or the budget ran out)",
    "not re-sampled": "this node is not re-sampled by the trials",
}
EQUALS, NOT_EQUALS = "equals", "does not equal"


def outcome(field: str, op: str, value_text: str) -> Callable[[dict], bool]:
    """The success test `field op value` (value: JSON text); ValueError naming what is wrong."""
    try:
        value = json.loads(value_text)
    except ValueError as e:
        raise ValueError(f"the value is not JSON ({e.msg}); a string needs quotes: \"text\"") from None
    return field_outcome(field, value, negate=op == NOT_EQUALS)


def verdict_of(row: Any) -> str:
    return row.verdict if row.resampled else "not re-sampled"


def table_rows(report: Any) -> list:
    """One row per step: its trials, rate, interval, verdict and a link to its last trial's diff."""
    rows = []
    for r in report.steps:
        rows.append({
            "Step": r.index + 1, "Node": r.node + (f" #{r.occurrence}" if r.occurrence > 1 else ""),
            "Trials": r.trials, "Successes": r.successes,
            "Success rate": None if r.success_rate is None else round(100 * r.success_rate),
            "95% interval": "" if r.low is None else f"{r.low:.0%} – {r.high:.0%}",
            "Verdict": verdict_of(r),
            "Diff": f"/diff?a={report.run_id}&b={r.trial_runs[-1]}" if r.trial_runs else None,
        })
    return rows


def trial_links(report: Any) -> list:
    """(step label, trial id, diff link) for every trial, in the order they ran."""
    return [(f"{r.index + 1}. {r.node}", t, f"/diff?a={report.run_id}&b={t}")
            for r in report.steps for t in r.trial_runs]


def rate_chart(report: Any) -> Any:
    """Success rate per tried step with its 95% interval as error bars, coloured by verdict."""
    import plotly.graph_objects as go

    tried = [r for r in report.steps if r.trials]
    x = [f"{r.index + 1}. {r.node}" for r in tried]
    y = [r.success_rate for r in tried]
    fig = go.Figure(go.Bar(
        x=x, y=y, marker_color=[VERDICT_COLORS[verdict_of(r)] for r in tried],
        error_y=dict(type="data", symmetric=False, array=[r.high - r.success_rate for r in tried],
                     arrayminus=[r.success_rate - r.low for r in tried]),
        hovertext=[f"{r.successes}/{r.trials} · {verdict_of(r)}" for r in tried], hoverinfo="text"))
    fig.update_layout(title="Success when re-rolled from the step (95% interval)", height=320,
                      margin=dict(l=10, r=10, t=40, b=10), yaxis=dict(range=[0, 1], tickformat=".0%"))
    return fig


def color_by_verdict(spec: dict, report: Any) -> dict:
    """A run graph spec (rewind_ui.graph.run_graph_spec) recoloured by each node's verdict."""
    verdict: dict = {}
    for r in report.steps:  # a node visited twice takes its most telling verdict
        v = verdict_of(r)
        order = list(VERDICT_COLORS)
        if r.node not in verdict or order.index(v) < order.index(verdict[r.node]):
            verdict[r.node] = v
    for n in spec["nodes"]:
        v = verdict.get(n["id"], "not re-sampled")
        n["color"], n["status"] = VERDICT_COLORS[v], v
        n["title"] = tooltip_escape(f"{n['id']}: {v}\n{VERDICT_HELP[v]}")
    return spec
