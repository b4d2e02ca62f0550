"""The Fork page's view-model: the points a run can be forked at (its recorded steps, and for an
interrupted run the node it never reached), what the editors start from, the preview of the
changes and the summary of the last replay. Pure (no streamlit).

A fork point is the UI's own record: the node an interrupted run never reached has no `Step`
in rewind (it never ran), so it is described here from `rw.next_node` instead of pretending
to be one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from rewind.costs import run_costs

from . import fmt, worddiff
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
    shown: str = ""  # the status a page shows (fmt.shown_status), when it differs from `status`
    # {field: bytes as stored} without loading anything; and a loader of all fields but some
    input_sizes: Callable[[], dict] = dict
    load_except: Optional[Callable[[Any], dict]] = None

    def inputs(self, skip: Any = ()) -> dict:
        """The values the node read, but those in `skip` (never loaded)."""
        if skip and self.load_except is not None:
            return dict(self.load_except(set(skip)))
        return {k: v for k, v in self.load_inputs().items() if k not in skip}

    def large_inputs(self) -> dict:
        """{field: bytes} of the recorded values an editor shows only when asked."""
        # a text area of megabytes is no editor, and the value may sit in an object store
        return {k: n for k, n in self.input_sizes().items() if n > fmt.LARGE_VALUE_BYTES}


def from_step(step: Any) -> ForkPoint:
    return ForkPoint(key=fmt.step_key(step.node, step.occurrence), node=step.node,
                     occurrence=step.occurrence, status=step.status, reason=step.reason or "",
                     params=dict(step.params or {}), load_inputs=lambda: step.inputs,
                     shown=fmt.shown_status(step), input_sizes=step.input_sizes,
                     load_except=lambda skip: step.load_inputs(
                         [k for k in step.input_refs if k not in skip]))


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
                     load_inputs=lambda: inputs, reached=False,
                     # loaded with the saved state already: sized as JSON, so that a large one
                     # is still not sent to the browser unless asked
                     input_sizes=lambda: {k: fmt.json_size(v) for k, v in inputs.items()})


def fork_points(run: Any, nxt: Optional[dict], pipeline: Any) -> list:
    points = [from_step(s) for s in run.steps]
    if nxt is not None:
        points.append(not_reached(nxt, pipeline))
    return points


def choices(points: list) -> list:
    return numbered((p.node, p.occurrence, p.shown or p.status) for p in points)


def shown_params(pipeline: Any, point: ForkPoint) -> list:
    """(name, value, default) of the params the editor offers: recorded, else the default."""
    defaults = pipeline.params(point.node)
    names = list(defaults) + sorted(n for n in pipeline.param_names(point.node) if n not in defaults)
    return [(n, point.params.get(n, defaults.get(n)), defaults.get(n))
            for n in names if n in point.params or n in defaults]


def text_diffs(changed: dict, originals: dict) -> list:
    """[(field, HTML)]: the text fields that changed, their changed words marked (worddiff,
    which cuts long passages and caps what it draws: a huge edit never dumps itself into the
    page)."""
    out = []
    for name, value in changed.items():
        before = originals.get(name)
        if isinstance(before, str) and isinstance(value, str):
            lines = worddiff.diff_lines(before, value)
            if lines:
                out.append((name, worddiff.to_html(lines, title=name)))
    return out


SHORT_TEXT = 60  # a text up to this long, on one line, is quoted whole in a sentence


def _value(value: Any, known: bool = True) -> str:
    return fmt.json_line(value, 80) if known else "(not set)"


def _change(before: Any, after: Any, known: bool) -> str:
    """`"Why?" → "How?"`, or for a long text `text changed (… characters, 1 passage marked below)`."""
    if isinstance(before, str) and isinstance(after, str) and known and not all(
            len(t) <= SHORT_TEXT and "\n" not in t for t in (before, after)):
        marked = worddiff.changed_count(worddiff.diff_lines(before, after))
        return (f"text changed ({len(before):,} → {len(after):,} characters"
                + (f", {marked} passage{'s' if marked != 1 else ''} marked below)" if marked else ")"))
    return f"{_value(before, known)} → {_value(after)}"


def change_lines(node: str, edit: dict, params: dict, originals: dict, poriginals: dict) -> list:
    """What a fork will change, one plain sentence each (the page escapes them): a field the
    node reads (`question: "Why?" → "How?"`, or for a long text its size and how many passages
    changed), then a parameter of the node (`critique: temperature 0.7 → 0.9`)."""
    return ([f"{k}: {_change(originals.get(k), v, k in originals)}" for k, v in edit.items()]
            + [f"{node}: {k} {_change(poriginals.get(k), v, k in poriginals)}" for k, v in params.items()])


def side_effect_nodes(pipeline: Any) -> list:
    return [n for n in pipeline.actions if pipeline.policy(n).determinism == "side-effect"]


def side_effects_warning(nodes: list) -> str:
    return ("Side effects are ON: " + (", ".join(f"**{fmt.md_escape(n)}**" for n in nodes) or "side-effect nodes")
            + " will really be performed if the replay reaches them (messages sent, files written).")


def inherited_keys(points: list, key: str) -> list:
    keys = [p.key for p in points]
    return keys[: keys.index(key)] if key in keys else []


# --- the plan shown before anything runs (rw.plan_fork) ------------------------------------------

PLAN_ORDER = ("re-run", "may re-run", "cached", "dry-run", "inherited")


def plan_rows(plan: Any) -> list:
    """One row per step of the plan: what will happen to it and why, and its estimate."""
    return [{"Node": fmt.step_key(r.node, r.occurrence), "Will": r.verdict, "Why": r.reason,
             "Est. tokens": r.est_tokens, "Est. cost": fmt.fmt_dollars(r.est_dollars)}
            for r in plan.rows]


def plan_summary(plan: Any) -> list:
    """Markdown lines: the nodes that will re-run, may re-run, stay cached, are dry-run or are
    inherited (names escaped), then the estimate."""
    lines = []
    for verdict in PLAN_ORDER:
        keys = [fmt.step_key(r.node, r.occurrence) for r in plan.rows if r.verdict == verdict]
        if keys:
            label = {"re-run": "Will re-run", "may re-run": "May re-run (if an upstream output changes)",
                     "cached": "Stays cached", "dry-run": "Side effects skipped (dry-run)",
                     "inherited": "Inherited from the parent"}[verdict]
            lines.append(f"{fmt.status_dot(_PLAN_DOT[verdict])} **{label}:** {fmt.keys_list(keys)}")
    lines.append(f"**Estimate:** at most {fmt.fmt_tokens(plan.est_tokens)} tokens, "
                 f"{fmt.fmt_dollars(plan.est_dollars)} (every step that will or may re-run at its "
                 "recorded cost)")
    return lines


_PLAN_DOT = {"re-run": "executed", "may re-run": "executed", "cached": "cached", "dry-run": "dry-run",
             "inherited": "inherited"}


def confirmation_label(plan: Any) -> str:
    return "I understand: run this fork although " + " and ".join(plan.confirm_reasons)


# --- the last replay -----------------------------------------------------------------------------

def last_fork(forked: Any, parent: Any, at: str) -> dict:
    """What the page keeps of a replay (plain data, kept in the session), with the core's
    costs of both runs (rewind.costs) so the page compares like with like."""
    def keys(status: str) -> list:
        return [fmt.step_key(s.node, s.occurrence) for s in forked.steps if s.status == status]

    mine, theirs = run_costs(forked), run_costs(parent)
    return {"id": forked.id, "parent": parent.id, "at": at, "status": forked.status,
            "spent": mine["spent"], "saved": mine["saved"], "cost": mine["trajectory_cost"],
            "dollars": mine["dollars"], "original": theirs["trajectory_cost"],
            "original_spent": theirs["spent"],
            "error": forked.error, "executed": keys("executed"), "cached": keys("cached"),
            "dry_run": keys("dry-run")}


def last_fork_metrics(last: dict) -> list:
    """Like with like: the fork's trajectory cost against the original's (what each whole
    trajectory costs), then what the fork itself spent and was spared."""
    return [("Trajectory cost", fmt.fmt_tokens(last["cost"])),
            ("Original's trajectory cost", fmt.fmt_tokens(last["original"])),
            ("Tokens spent", fmt.fmt_tokens(last["spent"])),
            ("Tokens saved", fmt.fmt_tokens(last["saved"])),
            ("Cost (USD)", fmt.fmt_dollars(last.get("dollars"))),
            ("Nodes re-executed", len(last["executed"]))]


def last_fork_caption(last: dict) -> str:
    return (f"re-executed: {fmt.keys_list(last['executed'])} · cached: {fmt.keys_list(last['cached'])}"
            f" · dry-run: {fmt.keys_list(last['dry_run'])}")
