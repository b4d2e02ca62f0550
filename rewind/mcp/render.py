"""What the MCP tools return: the public API's objects (Run, Step, ForkPlan, TrajectoryDiff,
BlameReport) shaped as plain JSON data (the structured content, matching `rewind.mcp.schema`) and
as a short plain-text rendering in the CLI's words (the text content).

Pure functions with no `mcp` import. Every string that leaves here has been through
`rewind.redaction.redact` (`scrub`): a key a provider echoed into an error, or one a pipeline
wrote into its state, never reaches the client. Large values are cut to pages (`value_pages`)
and say how to get the rest.

The spelling of durations, times, hashes and tables is `rewind.fmt`'s, shared with the CLI and
the dashboard (the CLI imports this package for `rewind mcp`, so nothing here imports the CLI).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from ..errors import InvalidRequest
from ..fmt import cut, fmt_ms, fmt_ts, json_default, node_label, one_line, short_hash, table
from ..redaction import redact

MAX_VALUE_CHARS = 20_000     # one value's JSON text per page (get_step)
MAX_DIFF_TEXT = 4_000        # one field's unified diff in `diff`
MAX_FIELD_CHANGES = 50       # changes listed per field in `diff` (the CLI's --changes shows 50)
MAX_CHANGE_VALUE = 300       # a changed value's JSON text in a field change


# --- plain values --------------------------------------------------------------------------

def json_text(value: Any, indent: Optional[int] = None) -> str:
    return json.dumps(value, ensure_ascii=False, default=json_default, indent=indent)


def plain(value: Any) -> Any:
    """`value` as JSON data (tuples, sets, bytes and dataclasses spelled as `json_text` does)."""
    return json.loads(json_text(value))


def scrub(value: Any) -> Any:
    """`value` with every string (keys included) through `redact`."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    return value


# --- runs ----------------------------------------------------------------------------------

def run_summary(run: Any) -> dict:
    return {"id": run.id, "pipeline": run.pipeline, "status": str(run.status),
            "parent_id": run.parent_id, "fork_node": run.fork_node,
            "fork_occurrence": run.fork_occurrence, "steps": int(run.step_count or len(run.steps)),
            "total_tokens": int(run.total_tokens or 0), "tokens_saved": int(run.tokens_saved or 0),
            "latency_ms": float(run.latency_ms or 0), "created_at": float(run.created_at or 0),
            "summary": run.summary or "", "error": run.error}


def runs_text(runs: list, next_after: Optional[str]) -> str:
    if not runs:
        return "no runs"
    rows = [(r["id"], r["pipeline"], r["status"], r["steps"], r["total_tokens"],
             fmt_ms(r["latency_ms"]), fmt_ts(r["created_at"]),
             f"{r['parent_id']}@{r['fork_node']}" if r["parent_id"] else "", cut(r["summary"], 40))
            for r in runs]
    text = table(("id", "pipeline", "status", "steps", "tokens", "latency", "created", "fork of",
                  "summary"), rows, right=(3, 4, 5))
    if next_after:
        text += f"\n\nmore: list_runs with after={next_after!r}"
    return text


def step_row(step: Any) -> dict:
    return {"index": step.index + 1, "node": step.node, "occurrence": step.occurrence,
            "status": str(step.status), "reason": step.reason or "", "error": step.error,
            "tokens": int(step.tokens or 0), "tokens_saved": int(step.tokens_saved or 0),
            "latency_ms": float(step.latency_ms or 0), "params": plain(step.params or {}),
            "input_hash": step.input_hash, "output_hash": step.output_hash,
            "source_run": step.source_run, "model_calls": len(step.calls or []),
            "inputs": sorted(step.input_refs), "outputs": sorted(step.output_refs)}


def trajectory(run: Any) -> dict:
    return {"id": run.id, "pipeline": run.pipeline, "status": str(run.status),
            "parent_id": run.parent_id, "fork_node": run.fork_node,
            "fork_occurrence": run.fork_occurrence, "edit": capped(run.edit or {}),
            "params": capped(run.params or {}), "total_tokens": int(run.total_tokens or 0),
            "saved": int(run.saved if run.steps else run.tokens_saved or 0),
            "latency_ms": float(run.latency_ms or 0), "created_at": float(run.created_at or 0),
            "finished_at": run.finished_at, "summary": run.summary or "", "error": run.error,
            "steps": [step_row(s) for s in run.steps]}


def run_headline(t: dict) -> str:
    kind = (f"fork of {t['parent_id']} at {node_label(t['fork_node'], t['fork_occurrence'])}"
            if t["parent_id"] else f"run of {t['pipeline']}")
    return (f"run {t['id']}  {t['status']}  ({kind}; {len(t['steps'])} steps, "
            f"{t['total_tokens']} tokens spent, {t['saved']} saved, {fmt_ms(t['latency_ms'])})")


def steps_table(steps: list) -> str:
    rows = [(s["index"], node_label(s["node"], s["occurrence"]), s["status"], s["tokens"],
             s["tokens_saved"] or "", fmt_ms(s["latency_ms"]), short_hash(s["output_hash"]),
             cut(s["error"] if s["status"] == "failed" and s["error"] else s["reason"], 70))
            for s in steps]
    return table(("#", "node", "status", "tokens", "saved", "latency", "output", "reason"), rows,
                 right=(0, 3, 4, 5))


def trajectory_text(t: dict) -> str:
    lines = [run_headline(t), f"pipeline: {t['pipeline']}   created: {fmt_ts(t['created_at'])}"]
    if t["summary"]:
        lines.append(f"summary:  {cut(t['summary'], 100)}")
    for label in ("edit", "params"):
        if t[label]:
            lines.append(f"{label + ':':<9} {cut(json_text(t[label]), 100)}")
    if t["error"]:
        lines.append(f"error:    {one_line(t['error'])}")
    lines += ["", steps_table(t["steps"]), "",
              "values: get_step with run, node (and occurrence for a later visit)"]
    return "\n".join(lines)


def capped(value: Any, limit: int = MAX_VALUE_CHARS) -> Any:
    """`value`, or a preview of its JSON text when that is over `limit` characters."""
    text = json_text(value)
    if len(text) <= limit:
        return plain(value)
    return {"truncated": True, "total_chars": len(text), "preview": text[:limit]}


# --- one step's values ---------------------------------------------------------------------

def step_values(step: Any) -> list:
    """[(name, value)] of a step: what it read and wrote, its runtime inputs, its model and
    tool calls. A value that cannot be loaded (a purged blob) is named with the reason."""
    out: list = []
    for part, getter in (("inputs", lambda: step.inputs), ("outputs", lambda: step.outputs),
                         ("runtime_inputs", lambda: step.runtime_inputs)):
        try:
            values = getter()
        except Exception as e:  # noqa: BLE001 - a purged blob: say so, show the rest
            out.append((part, {"unavailable": one_line(f"{type(e).__name__}: {e}")}))
            continue
        out += [(f"{part}.{k}", v) for k, v in (values or {}).items()]
    out += [(f"calls[{i}]", c) for i, c in enumerate(step.calls or [])]
    out += [(f"tools[{i}]", c) for i, c in enumerate(step.tools or [])]
    return out


def page(name: str, value: Any, offset: int, max_chars: int) -> dict:
    """One page of a value's (redacted) JSON text; `next_offset` when more follows."""
    text = redact(json_text(value, indent=2 if isinstance(value, (dict, list)) else None))
    if offset and offset >= len(text):
        raise InvalidRequest(f"offset {offset:,} is past the end of {name} ({len(text):,} characters); "
                             "start below it", field="offset")
    chunk = text[offset: offset + max_chars]
    end = offset + len(chunk)
    return {"name": name, "text": chunk, "offset": offset, "total_chars": len(text),
            "truncated": end < len(text), "next_offset": end if end < len(text) else None}


def page_note(run_id: str, node: str, occurrence: int, pages: list) -> str:
    cut_ones = [p for p in pages if p["truncated"]]
    if not cut_ones:
        return ""
    p = cut_ones[0]
    more = f" ({len(cut_ones) - 1} more value(s) were cut too)" if len(cut_ones) > 1 else ""
    return (f"{p['name']} was cut at character {p['next_offset']:,} of {p['total_chars']:,}: "
            f"call get_step with run={run_id!r}, node={node!r}, occurrence={occurrence}, "
            f"field={p['name']!r}, offset={p['next_offset']} for the rest{more}")


def step_text(detail: dict) -> str:
    s = detail["step"]
    lines = [f"step {s['index']} {node_label(s['node'], s['occurrence'])} of run "
             f"{detail['run_id']}: {s['status']}, {s['tokens']} tokens, {fmt_ms(s['latency_ms'])}"]
    if s["reason"]:
        lines.append(f"reason: {one_line(s['reason'])}")
    if s["error"]:
        lines.append(f"error: {one_line(s['error'])}")
    if s["params"]:
        lines.append(f"params: {cut(json_text(s['params']), 200)}")
    for p in detail["values"]:
        span = (f"characters {p['offset']:,}–{p['offset'] + len(p['text']):,} of {p['total_chars']:,}"
                if p["truncated"] or p["offset"] else f"{p['total_chars']:,} characters")
        lines += ["", f"-- {p['name']} ({span})", p["text"]]
    if detail["note"]:
        lines += ["", detail["note"]]
    return "\n".join(lines)


# --- plans, diffs, blame, pipelines ---------------------------------------------------------

def plan_data(plan: Any) -> dict:
    return {"run_id": plan.run_id, "at": plan.at, "occurrence": plan.occurrence,
            "rows": [{"node": r.node, "occurrence": r.occurrence, "verdict": r.verdict,
                      "reason": r.reason, "est_tokens": int(r.est_tokens or 0)} for r in plan.rows],
            "est_tokens": int(plan.est_tokens or 0), "est_dollars": plan.est_dollars,
            "needs_confirmation": bool(plan.confirm_reasons),
            "confirm_reasons": list(plan.confirm_reasons)}


def plan_text(p: dict) -> str:
    rows = [[node_label(r["node"], r["occurrence"]), r["verdict"], r["est_tokens"], r["reason"]]
            for r in p["rows"]]
    dollars = ("unknown (a model has no price)" if p["est_dollars"] is None
               else f"${p['est_dollars']:.4f}")
    lines = [table(["node", "plan", "est tok", "why"], rows, right=(2,)), "",
             f"estimate: at most {p['est_tokens']:,} tokens, {dollars}"]
    lines += [f"needs confirmation: {why} (fork with confirm=true)" for why in p["confirm_reasons"]]
    return "\n".join(lines)


def _change(c: dict) -> dict:
    out = {k: plain(v) for k, v in c.items() if k not in ("a", "b")}
    for side in ("a", "b"):
        if side in c:
            text = json_text(c[side])
            out[side] = plain(c[side]) if len(text) <= MAX_CHANGE_VALUE else text[:MAX_CHANGE_VALUE] + "…"
    return out


def diff_data(d: Any) -> dict:
    rows = []
    for r in d.rows:
        texts = {k: (v if len(v) <= MAX_DIFF_TEXT else
                     v[:MAX_DIFF_TEXT] + f"\n… ({len(v) - MAX_DIFF_TEXT:,} more characters; "
                     "get_step shows the whole values)")
                 for k, v in (r.text_diffs or {}).items()}
        fields = {k: [_change(c) for c in changes[:MAX_FIELD_CHANGES]]
                  for k, changes in (r.field_diffs or {}).items()}
        rows.append({"node": r.node, "occurrence": r.occurrence, "identical": r.identical,
                     "a_status": None if r.a_status is None else str(r.a_status),
                     "b_status": None if r.b_status is None else str(r.b_status),
                     "a_hash": r.a_hash, "b_hash": r.b_hash, "a_tokens": int(r.a_tokens or 0),
                     "b_tokens": int(r.b_tokens or 0), "a_reason": r.a_reason or "",
                     "b_reason": r.b_reason or "", "text_changes": texts, "field_changes": fields})
    return {"a": d.a, "b": d.b, "first_divergence": d.first_divergence, "verdict": d.verdict,
            "tokens_a": int(d.tokens_a or 0), "tokens_b": int(d.tokens_b or 0),
            "cost_a": int(d.cost_a or 0), "cost_b": int(d.cost_b or 0),
            "cost_delta": int(d.cost_delta or 0), "rows": rows}


def diff_text(d: dict) -> str:
    lines = [f"A: {d['a']}   B: {d['b']}", f"first divergence: {d['first_divergence'] or 'none'}",
             f"verdict: {d['verdict']}",
             f"tokens spent: A {d['tokens_a']}, B {d['tokens_b']}; trajectory cost: A {d['cost_a']}, "
             f"B {d['cost_b']} (change {d['cost_delta']:+d} on the nodes whose inputs changed)", ""]
    rows = [[node_label(r["node"], r["occurrence"]), r["a_status"] or "-", r["b_status"] or "-",
             short_hash(r["a_hash"]), short_hash(r["b_hash"]),
             "n/a" if r["identical"] is None else ("yes" if r["identical"] else "NO"),
             r["a_tokens"], r["b_tokens"]] for r in d["rows"]]
    lines.append(table(["node", "A status", "B status", "A output", "B output", "same", "A tok",
                        "B tok"], rows, right=(6, 7)))
    diverged = [r for r in d["rows"] if r["identical"] is False]
    if diverged and (diverged[0]["b_reason"] or diverged[0]["a_reason"]):
        lines.append(f"\nwhy {diverged[0]['node']} differs: "
                     f"{one_line(diverged[0]['b_reason'] or diverged[0]['a_reason'])}")
    for r in diverged:
        if not (r["text_changes"] or r["field_changes"]):
            continue
        lines.append(f"\n== {node_label(r['node'], r['occurrence'])}")
        lines += list(r["text_changes"].values())
        for changes in r["field_changes"].values():
            lines += [f"  {c.get('path')}: {c.get('change')}  {cut(json_text(c.get('a')), 60)} → "
                      f"{cut(json_text(c.get('b')), 60)}" for c in changes]
    return "\n".join(lines)


def blame_data(report: Any) -> dict:
    decisive = report.decisive or (None, None)
    return {"run_id": report.run_id, "samples": report.samples, "strategy": report.strategy,
            "resample": list(report.resample or []), "decisive_node": decisive[0],
            "decisive_occurrence": decisive[1], "summary": report.summary,
            "steps": [{"index": r.index + 1, "node": r.node, "occurrence": r.occurrence,
                       "resampled": r.resampled, "trials": r.trials, "successes": r.successes,
                       "success_rate": r.success_rate, "low": r.low, "high": r.high,
                       "verdict": r.verdict} for r in report.steps],
            "trial_runs": list(report.trial_runs), "tokens": int(report.tokens or 0),
            "budget_exhausted": bool(report.budget_exhausted)}


def blame_text(b: dict) -> str:
    rows = [[s["index"], node_label(s["node"], s["occurrence"]),
             f"{s['successes']}/{s['trials']} = {s['success_rate']:.0%}" if s["trials"] else "-",
             f"{s['low']:.0%}–{s['high']:.0%}" if s["trials"] else "-",
             s["verdict"] if s["resampled"] else "not re-sampled"] for s in b["steps"]]
    lines = [table(["step", "node", "success when re-rolled", "95% interval", "verdict"], rows), "",
             b["summary"], f"trials: {len(b['trial_runs'])} ({b['strategy']}, {b['samples']} samples "
             f"a step); tokens: {b['tokens']:,}" + ("; the token budget ran out"
                                                    if b["budget_exhausted"] else "")]
    if b["trial_runs"]:
        lines.append(f"\nnext: diff a={b['run_id']!r} b={b['trial_runs'][-1]!r}")
    return "\n".join(lines)


def pipelines_data(registry: dict, with_runs: list, errors: dict) -> dict:
    return {"pipelines": [{"name": name, "entrypoint": p.entrypoint, "nodes": list(p.actions),
                           "description": p.description or ""}
                          for name, p in sorted(registry.items())],
            "with_runs": sorted(with_runs), "errors": {k: one_line(v) for k, v in errors.items()}}


def pipelines_text(d: dict) -> str:
    rows = [(p["name"], p["entrypoint"], " → ".join(p["nodes"]), cut(p["description"], 50))
            for p in d["pipelines"]]
    lines = [table(("name", "entrypoint", "nodes", "description"), rows)]
    unregistered = sorted(set(d["with_runs"]) - {p["name"] for p in d["pipelines"]})
    if unregistered:
        lines.append(f"\nruns of pipelines not registered here (readable, not forkable): "
                     f"{', '.join(unregistered)}")
    lines += [f"\nREWIND_PIPELINES entry {k!r} was not loaded: {v}" for k, v in d["errors"].items()]
    return "\n".join(lines)
