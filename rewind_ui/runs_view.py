"""The Runs page's view-model: what the table, the run header, the lineage, the alarms, the step
list, the charts, the step detail and the audit show, computed from rewind's records. Pure (no
streamlit): pages/runs.py only lays these out, and tests check them without a browser.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from rewind.costs import run_costs, step_dollars
from rewind.models import RUN_STATUSES  # the Status filter: every RunStatus, halted included

from . import fmt
from .graph import STATUS_COLORS
from .steps import numbered

ALL = "(all)"
PAGE_SIZES = (25, 50, 100, 200)
MAX_CHILDREN = 30
OTHER_COLOR = "#607d8b"


# --- starting a run --------------------------------------------------------------------------

class _NotANumber(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotANumber(name)


def state_fields(pipeline: Any) -> tuple:
    """(fields some node reads or writes, fields read before any node writes them): what an
    initial state may hold, and what it must."""
    reads = {f for n in pipeline.actions for f in pipeline.reads(n)}
    writes = {f for n in pipeline.actions for f in pipeline.writes(n)}
    return reads | writes, reads - writes


def parse_initial_state(raw: Optional[str], pipeline: Any = None) -> tuple:
    """(state dict, None) or (None, an error naming the problem) for the Start-a-run editor.

    Refused before anything runs: invalid JSON, NaN or Infinity (not JSON, and a NaN seed would
    be recorded as the text "nan"), a non-object, an empty object or one missing a field the
    pipeline needs, and a field no node of the pipeline reads or writes (a typo)."""
    try:
        state = fmt.parse_json_text(raw or "", parse_constant=_refuse_constant)
    except _NotANumber as e:
        return None, (f"Initial state: {e} is not a JSON number; write a finite number (or a "
                      "string) instead. Nothing was run.")
    except json.JSONDecodeError as e:
        return None, (f"Initial state: not valid JSON ({fmt.md_escape(e.msg)} at line {e.lineno}, "
                      f"column {e.colno}). Nothing was run.")
    except fmt.JsonTextError as e:
        return None, f"Initial state: {fmt.md_escape(e)}. Nothing was run."
    if not isinstance(state, dict):
        return None, "Initial state: must be a JSON object like {\"question\": \"…\"}. Nothing was run."
    if pipeline is None:
        return state, None
    known, needed = state_fields(pipeline)
    name = fmt.md_escape(pipeline.name)
    unknown = [k for k in state if k not in known]
    if unknown:
        return None, (f"Initial state: no node of pipeline **{name}** reads "
                      + ", ".join(f"**{fmt.md_escape(k)}**" for k in unknown)
                      + " (known fields: " + (", ".join(fmt.md_escape(k) for k in sorted(known)) or "none")
                      + "). Nothing was run.")
    missing = sorted(needed - set(state))
    if missing:
        return None, ((f"Initial state: empty, but pipeline **{name}** needs " if not state else
                       f"Initial state: pipeline **{name}** also needs ")
                      + ", ".join(f"**{fmt.md_escape(k)}**" for k in missing)
                      + " (no node writes it before it is read). Nothing was run.")
    return state, None


def demo_state(questions: list, n_runs: int, sample: dict) -> dict:
    """The next sample question (one after another as runs accumulate), else the sample state."""
    return {"question": questions[n_runs % len(questions)]} if questions else dict(sample)


def incomplete_message(run: Any) -> str:
    """Why a run stopped short, in one line (its error, if any, is shown beside it as text)."""
    if run.status == "interrupted":
        return ("The run was interrupted before it finished (its process stopped or a commit "
                "failed): every step shown was committed, and it can be resumed from the next one.")
    if run.status == "failed":
        return "The run failed: resuming it runs the failed step again."
    return "The run did not complete."


def run_finished_label(run: Any) -> str:
    return f"Run {run.id} {run.status}: {fmt.spent_saved(run)}"


# --- the table -------------------------------------------------------------------------------

def filters(pipeline: str, status: str, forks_only: bool, search: str) -> dict:
    return {"pipeline": None if pipeline == ALL else pipeline, "status": None if status == ALL else status,
            "forks_only": bool(forks_only), "search": search}


def page_count(total: int, page_size: int) -> int:
    return max(1, math.ceil(total / page_size))


def page_query(last: Optional[tuple], filters: dict, page_size: int, page_no: int) -> dict:
    """How to fetch page `page_no`: after the last run of the page shown before it when that was
    the previous page under the same filters and size (an index seek however deep the page),
    else by offset. `last` is `page_marker` of the page shown before."""
    offset = (int(page_no) - 1) * int(page_size)
    if last and last[:3] == (*_listing(filters, page_size), int(page_no) - 1):
        return {"offset": offset, "after": last[3]}
    return {"offset": offset, "after": None}


def page_marker(filters: dict, page_size: int, page_no: int, rows: list) -> Optional[tuple]:
    """What `page_query` needs to continue after this page (None for an empty one)."""
    if not rows:
        return None
    return (*_listing(filters, page_size), int(page_no), rows[-1]["id"])


def _listing(filters: dict, page_size: int) -> tuple:
    """Which listing a page belongs to: its filters and page size."""
    return repr(sorted(filters.items())), int(page_size)


def table(rows: list) -> list:
    """The runs table: one dict per run row (from core.runs_page). The lineage (Parent, Fork at)
    comes right after the id; Tokens is the core's *spent*. Every column fits the main block at
    1280 px (see column_widths): a run's steps and latency are in its header once it is open."""
    return [
        {
            "Run": r["id"], "Parent": r["parent_id"] or "", "Fork at": r["fork_node"] or "",
            "Status": r["status"], "Pipeline": r["pipeline"], "Question / first input": r["summary"],
            "Started": fmt.fmt_started(r.get("created_at")), "Tokens": r["tokens"],
        }
        for r in rows
    ]


# pixels per column: a 16-character run id and `interrupted` whole, the question in what is
# left of the 820 px main block (1280 px window, sidebar open) after the row checkbox
_WIDTHS = {"Run": 128, "Parent": 128, "Fork at": 66, "Status": 84, "Pipeline": 72,
           "Question / first input": 146, "Started": 92, "Tokens": 62}
COLUMN_HELP = {"Tokens": "tokens this run spent (a fork does not pay for what it inherits or gets "
                         "from the cache)",
               "Started": "local time; the year is shown for runs of another year"}


def column_widths() -> dict:
    return dict(_WIDTHS)


OPEN_ROW_BACKGROUND = "#fff3c4"  # the graph's selection halo, lightened


def open_row(rows: list, open_id: Optional[str]) -> Optional[int]:
    """The index of the open run among the table's rows, or None."""
    return next((i for i, r in enumerate(rows) if open_id and r["id"] == open_id), None)


def open_row_styles(rows: list, open_id: Optional[str]) -> list:
    """CSS for each row of the runs table: the open run's row highlighted."""
    i = open_row(rows, open_id)
    return [f"background-color: {OPEN_ROW_BACKGROUND}" if j == i else "" for j in range(len(rows))]


def open_note(rows: list, open_id: Optional[str]) -> Optional[str]:
    """What the caption under the table says about the open run, or None when none is open."""
    if not open_id:
        return None
    if open_row(rows, open_id) is None:
        return f"The open run {open_id} is not on this page"
    return f"Highlighted: the open run {open_id}"


def showing(offset: int, n: int, total: int) -> str:
    return (f"Showing {fmt.fmt_count(offset + 1)}–{fmt.fmt_count(offset + n)} of "
            f"{fmt.fmt_count(total)} runs · click a row to open it")


# --- one run ---------------------------------------------------------------------------------

def run_caption(run: Any) -> str:
    """`pipeline **research** · completed · started … · fork of X at critique` (markdown)."""
    md = fmt.md_escape
    return (f"pipeline **{md(run.pipeline)}** · {md(run.status)} · started {fmt.fmt_ts(run.created_at)}"
            + (f" · fork of {md(run.parent_id)} at {md(run.fork_node)}" if run.parent_id else ""))


COST_HELP = {
    "spent": "tokens this run paid for (executed and failed steps)",
    "trajectory": "what the whole trajectory would cost run fresh: inherited and cached steps at "
                  "their recorded cost",
    "saved": "trajectory cost minus spent: what the cache and the parent run spared this run",
    "dollars": "the trajectory cost in USD from the price table (REWIND_PRICES overrides it)",
}


def run_metrics(run: Any) -> list:
    """(label, value, help) of a run's header: the core's cost definitions (rewind.costs)."""
    costs = run_costs(run)
    return [("Status", run.status, None), ("Steps", len(run.steps), None),
            ("Tokens spent", fmt.fmt_tokens(costs["spent"]), COST_HELP["spent"]),
            ("Trajectory cost", fmt.fmt_tokens(costs["trajectory_cost"]), COST_HELP["trajectory"]),
            ("Tokens saved", fmt.fmt_tokens(costs["saved"]), COST_HELP["saved"]),
            ("Cost (USD)", fmt.fmt_dollars(costs["dollars"]), COST_HELP["dollars"]),
            ("Latency", fmt.fmt_ms(run.latency_ms), None)]


def fork_change(run: Any) -> Optional[dict]:
    """What a fork changed (edit, params, side effects), or None for a root or an untouched fork."""
    if not run.parent_id or not (run.edit or run.params):
        return None
    return fmt.to_jsonable({"edit": run.edit, "params": run.params,
                            "allow_side_effects": run.allow_side_effects})


def alarmed_nodes(alarms: list) -> list:
    return sorted({a["node"] for a in alarms})


def alarm_message(nodes: list) -> str:
    return ("Nondeterminism alarm on " + ", ".join(f"**{fmt.md_escape(n)}**" for n in nodes)
            + ": the same inputs gave a different output in another execution. Cached replays of "
              "these nodes may hide jitter; audit the run or lower the temperature.")


def alarm_rows(alarms: list) -> list:
    return [{"Node": a["node"], "Input hash": fmt.short_hash(a["input_hash"], 16),
             "Output (first)": fmt.short_hash(a["output_hash_a"], 16),
             "Output (later)": fmt.short_hash(a["output_hash_b"], 16), "Run": a["run_id"],
             "When": fmt.fmt_ts(a["created_at"])} for a in alarms]


@dataclass(frozen=True)
class LineageView:
    """Buttons of the lineage box: (id, label, enabled) up and down, and what did not fit."""

    ancestors: list = field(default_factory=list)
    children: list = field(default_factory=list)
    more_children: int = 0


def lineage_view(lin: dict) -> LineageView:
    up = [(a["id"], f"{a['id']} (purged)" if a["missing"] else f"↑ {a['id']}", not a["missing"])
          for a in lin["ancestors"]]
    kids = lin["children"]
    down = [(c["id"], f"↓ {c['id']} · at {c['fork_node']} · {c['status']}", True) for c in kids[:MAX_CHILDREN]]
    return LineageView(up, down, max(0, len(kids) - MAX_CHILDREN))


# --- its steps -------------------------------------------------------------------------------

def step_choices(run: Any) -> list:
    return numbered((s.node, s.occurrence, fmt.shown_status(s)) for s in run.steps)


def steps_by_key(run: Any) -> dict:
    return {fmt.step_key(s.node, s.occurrence): s for s in run.steps}


def step_rows(run: Any) -> list:
    """The step list: the reason right after the status; Spent is what this run paid for the
    step, Cost its recorded cost (rewind.costs). The hashes are in the step's view, whole: the
    list fits the main block at 1280 px (step_column_widths)."""
    return [
        {"#": i + 1, "Node": k, "Status": fmt.shown_status(s), "Reason": s.reason or (s.error or ""),
         "Spent": s.tokens, "Cost": s.cost, fmt.LATENCY_COLUMN: fmt.latency_value(s.latency_ms),
         "Calls": len(s.calls or [])}
        for i, (k, s) in enumerate(steps_by_key(run).items())
    ]


def step_column_widths(rows: list) -> dict:
    """Pixels per column of the step list: the status as wide as its longest label (`re-ran ·
    calls served` only when there is one), the reason in what is left of the 780 px."""
    status = 140 if any(r["Status"] == fmt.SERVED_RERUN for r in rows) else 84
    widths = {"#": 36, "Node": 84, "Status": status, "Spent": 56, "Cost": 56, fmt.LATENCY_COLUMN: 92,
              "Calls": 48}
    return {**widths, "Reason": 780 - sum(widths.values())}


def status_colors(steps: list) -> list:
    return [STATUS_COLORS.get(fmt.shown_status(s), OTHER_COLOR) for s in steps]


def status_cell_styles(rows: list) -> list:
    """CSS for each row's Status cell of the step list: the text in its status colour, the
    colour the graph and the charts use (so "re-ran · calls served" reads apart from a re-run)."""
    return [f"color: {STATUS_COLORS.get(r['Status'], OTHER_COLOR)}; font-weight: 600" for r in rows]


def chart_series(run: Any) -> list:
    """(title, values, unit, chart key) for the two per-node charts."""
    return [("Tokens spent per node", [s.tokens for s in run.steps], "tokens", "chart_tokens"),
            ("Latency per node", [fmt.latency_value(s.latency_ms) for s in run.steps],
             fmt.LATENCY_UNIT, "chart_latency")]


def step_title(key: str, step: Any) -> str:
    return f"#### Step {fmt.md_escape(key)} · {fmt.md_escape(fmt.shown_status(step))}"


def step_note(step: Any) -> Optional[str]:
    """A line under the title of a step that re-ran with every model call served, saying why it
    spent nothing (markdown), else None."""
    if fmt.shown_status(step) != fmt.SERVED_RERUN:
        return None
    n = len(step.calls or [])
    return (f"{fmt.status_dot(fmt.SERVED_RERUN)} Re-ran, and its {n} model call{'s' if n != 1 else ''} "
            f"{'were' if n != 1 else 'was'} served from the model-call cache: nothing was sent, "
            "0 tokens spent.")


def step_metrics(step: Any) -> list:
    """(label, value, help) for the selected step."""
    return [("Step spent", fmt.fmt_tokens(step.tokens),
             f"prompt {fmt.fmt_tokens(step.prompt_tokens)} · completion {fmt.fmt_tokens(step.completion_tokens)}"),
            ("Step cost", fmt.fmt_tokens(step.cost), "what producing these outputs cost when they were "
                                                "produced (cached and inherited steps included)"),
            ("Step cost (USD)", fmt.fmt_dollars(step_dollars(step)), COST_HELP["dollars"]),
            ("Latency", fmt.fmt_ms(step.latency_ms), None), ("Occurrence", step.occurrence, None)]


def hashes_text(step: Any) -> str:
    return f"input_hash  {step.input_hash or '—'}\noutput_hash {step.output_hash or '—'}"


# --- the determinism audit -------------------------------------------------------------------

def audit_view(report: Any) -> dict:
    """What the page keeps of an audit report (plain data, kept in the session)."""
    return {
        "repeats": report.repeats,
        "rows": [
            {"Node": fmt.step_key(r.node, r.occurrence), "Status": getattr(r, "status", ""),
             "Stable": fmt.STABLE_MARK[r.stable], "Distinct outputs": r.distinct_outputs,
             "Unstable fields": ", ".join(map(str, r.unstable_fields or [])),
             "Samples": getattr(r, "samples", "")}
            for r in report.rows
        ],
        "unstable": list(report.unstable_nodes),
    }


def audit_verdict(view: dict) -> tuple:
    """("warning" | "success", text) for a kept audit."""
    if view["unstable"]:
        return "warning", (f"Unstable nodes ({view['repeats']} repeats): "
                           + ", ".join(fmt.md_escape(n) for n in view["unstable"]))
    return "success", f"Every audited node was stable over {view['repeats']} repeats."
