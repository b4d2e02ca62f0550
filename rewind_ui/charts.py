"""The bar charts of the Runs and Diff pages (plotly figures; pure, no streamlit): one node per
bar, status colours from graph.py, and an axis that starts at zero even when every bar is 0."""

from __future__ import annotations

from typing import Any, Optional

import plotly.graph_objects as go

A_COLOR, B_COLOR = "#90a4ae", "#1565c0"
LESS, MORE = "#2e7d32", "#c62828"


def _layout(fig: go.Figure, title: str, unit: str, values: list, height: int, legend: bool) -> go.Figure:
    fig.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=40, b=10),
                      yaxis_title=unit, showlegend=legend, legend=dict(orientation="h", y=-0.2))
    finite = [v for v in values if v is not None]
    if finite and all(v == 0 for v in finite):
        fig.update_yaxes(range=[0, 1])  # plotly would draw an all-zero chart on −1…1
    elif finite and min(finite) >= 0:
        fig.update_yaxes(rangemode="tozero")
    return fig


def node_bars(title: str, keys: list, values: list, unit: str, colors: list,
              hover: Optional[list] = None, height: int = 280) -> go.Figure:
    """One bar per step, coloured by status, hover `critique: 312 tokens (executed)`."""
    fig = go.Figure(go.Bar(x=keys, y=values, marker_color=colors, hovertext=hover or [""] * len(keys),
                           hovertemplate="%{x}: %{y} " + unit + " (%{hovertext})<extra></extra>"))
    return _layout(fig, title, unit, values, height, legend=False)


def compare_bars(title: str, keys: list, a: list, b: list, unit: str, delta: Any = False,
                 height: int = 320) -> go.Figure:
    """A beside B per node, and optionally a delta (green when B is lower): `True` draws B − A,
    a list draws those values (the diff's cost delta, 0 where a node's inputs did not change)."""
    fig = go.Figure()
    fig.add_bar(name="A (original)", x=keys, y=a, marker_color=A_COLOR)
    fig.add_bar(name="B (replay)", x=keys, y=b, marker_color=B_COLOR)
    values = list(a) + list(b)
    if delta is not False and delta is not None:
        d = list(delta) if isinstance(delta, (list, tuple)) else [y - x for x, y in zip(a, b)]
        fig.add_bar(name="delta (B − A)", x=keys, y=d, marker_color=[LESS if v <= 0 else MORE for v in d])
        values += d
    fig.update_layout(barmode="group")
    return _layout(fig, title, unit, values, height, legend=True)
