"""The Fork page's view-model: the points a run can be forked at (its recorded steps, and for an
interrupted run the node it never reached), what the editors start from, the preview of the
changes and the summary of the last replay. Pure (no streamlit).

A fork point is the UI's own record: the node an interrupted run never reached has no `Step`
in rewind (it never ran), so it is described here from `rw.next_node` instead of pretending
to be one.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from . import fmt
from .graph import NOT_REACHED
from .steps import numbered

NOT_REACHED_REASON = "the run stopped before this node; a fork runs it from the state saved before it"


@dataclass(frozen=True)
class ForkPoint:
    """One node visit a fork can start at."""

    key: str
    node: str
    occurrence: int
    status: str
    reason: str
    params: dict = field(default_factory=dict)
    # the values the node read: a recorded step loads them from the store (which may raise
    # rewind.RewindError for a purged value); a node not reached reads the saved state
    load_inputs: Callable[[], dict] = dict
    reached: bool = True

    def inputs(self) -> dict:
        return dict(self.load_inputs())


def from_step(step: Any) -> ForkPoint:
    return ForkPoint(key=fmt.step_key(step.node, step.occurrence), node=step.node,
                     occurrence=step.occurrence, status=step.status, reason=step.reason or "",
                     params=dict(step.params or {}), load_inputs=lambda: step.inputs)


def not_reached(nxt: dict, pipeline: Any) -> ForkPoint:
    """The node an interrupted run never reached (`nxt` from core.next_node): it reads what it
    would have read from the state saved before it, with the pipeline's default params."""
    node, occurrence = nxt["node"], int(nxt["occurrence"])
    state = dict(nxt.get("state") or {})
    reads = list(pipeline.reads(node)) if pipeline is not None else []
    inputs = {k: state[k] for k in reads if k in state}
    return ForkPoint(key=fmt.step_key(node, occurrence), node=node, occurrence=occurrence,
                     status=NOT_REACHED, reason=NOT_REACHED_REASON,
                     params=dict(pipeline.params(node)) if pipeline is not None else {},
                     load_inputs=lambda: inputs, reached=False)


def fork_points(run: Any, nxt: Optional[dict], pipeline: Any) -> list:
    points = [from_step(s) for s in run.steps]
    if nxt is not None:
        points.append(not_reached(nxt, pipeline))
    return points


def choices(points: list) -> list:
    return numbered((p.node, p.occurrence, p.status) for p in points)


def shown_params(pipeline: Any, point: ForkPoint) -> list:
    """(name, value, default) of the params the editor offers: recorded, else the default."""
    defaults = pipeline.params(point.node)
    names = list(defaults) + sorted(n for n in pipeline.param_names(point.node) if n not in defaults)
    return [(n, point.params.get(n, defaults.get(n)), defaults.get(n))
            for n in names if n in point.params or n in defaults]


def text_diffs(changed: dict, originals: dict) -> list:
    """Unified diffs of the text fields that changed (for the preview)."""
    out = []
    for name, value in changed.items():
        before = originals.get(name)
        if isinstance(before, str) and isinstance(value, str):
            text = "\n".join(difflib.unified_diff(before.splitlines(), value.splitlines(),
                                                  f"recorded/{name}", f"edited/{name}", lineterm="", n=1))
            if text:
                out.append(text)
    return out


def side_effect_nodes(pipeline: Any) -> list:
    return [n for n in pipeline.actions if pipeline.policy(n).determinism == "side-effect"]


def side_effects_warning(nodes: list) -> str:
    return ("Side effects are ON: " + (", ".join(f"**{fmt.md_escape(n)}**" for n in nodes) or "side-effect nodes")
            + " will really be performed if the replay reaches them (messages sent, files written).")


def inherited_keys(points: list, key: str) -> list:
    keys = [p.key for p in points]
    return keys[: keys.index(key)] if key in keys else []


def last_fork(forked: Any, parent: Any, at: str) -> dict:
    """What the page keeps of a replay (plain data, kept in the session)."""
    def keys(status: str) -> list:
        return [fmt.step_key(s.node, s.occurrence) for s in forked.steps if s.status == status]

    return {"id": forked.id, "parent": parent.id, "at": at, "status": forked.status,
            "spent": forked.total_tokens, "saved": forked.tokens_saved, "original": parent.total_tokens,
            "error": forked.error, "executed": keys("executed"), "cached": keys("cached"),
            "dry_run": keys("dry-run")}


def last_fork_metrics(last: dict) -> list:
    return [("Tokens spent", fmt.fmt_tokens(last["spent"])),
            ("Tokens saved (cache hits)", fmt.fmt_tokens(last["saved"])),
            ("Original run spent", fmt.fmt_tokens(last["original"])),
            ("Nodes re-executed", len(last["executed"]))]


def last_fork_caption(last: dict) -> str:
    return (f"re-executed: {fmt.keys_list(last['executed'])} · cached: {fmt.keys_list(last['cached'])}"
            f" · dry-run: {fmt.keys_list(last['dry_run'])}")
