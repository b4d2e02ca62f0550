"""Batch: one change replayed across many stored runs. Pick the pipeline, a filter, the node and
the change; see the fork plan (how many runs, which nodes may re-run, a token bound); run it with
live progress; read which outcomes flipped, with a link to each diff, and charts of the outcomes
and of tokens spent vs saved. Everything goes through `rewind.batch` (plan_batch, batch_fork)."""

import json

import plotly.graph_objects as go
import streamlit as st

import rewind
from rewind.batch import OUTCOMES, batch_fork, plan_batch
from rewind_ui import core, fmt, shell

shell.page_guard()  # before anything is drawn: see rewind_ui/shell.py

rw = core.get_rw()
md = fmt.md_escape
REPORT, PLAN = "batch_report", "batch_plan"
OUTCOME_COLORS = {"same": "#90a4ae", "changed": "#c62828", "failed": "#6a1b9a", "skipped": "#cfd8dc"}
LAST_WRITES = "(the last node's writes)"

st.title("Batch")
st.caption("Replay one change across many stored runs before you ship it: each run is forked at "
           "the node, only what the change reaches re-runs (the rest comes from the cache), and "
           "the table says for which runs the outcome changed.")

stored = set(rw.stored_pipelines())
names = [n for n in core.pipeline_names() if n in stored] or core.pipeline_names()
if not names:
    st.info("No registered pipeline has runs in this store: create runs on the Runs page first.")
    st.page_link(shell.RUNS_PAGE, label="Go to Runs", icon=":material/list:")
    st.stop()

# --- what to replay ------------------------------------------------------------------------------
c1, c2, c3, c4 = st.columns([3, 2, 3, 1])
name = c1.selectbox("Pipeline", names, key="batch_pipeline")
pipeline = core.find_pipeline(name)
status = c2.selectbox("Runs with status", ["completed", "failed", "any"], key="batch_status")
search = c3.text_input("Filter (text in the run's first input)", key="batch_search",
                       max_chars=rewind.MAX_SEARCH)
limit = c4.number_input("At most", min_value=1, max_value=100_000, value=100, step=10, key="batch_limit")

nodes = list(pipeline.actions)
default_node = "critique" if "critique" in nodes else nodes[min(1, len(nodes) - 1)]
c1, c2, c3 = st.columns([2, 3, 3])
at = c1.selectbox("Fork at node", nodes, index=nodes.index(default_node), key="batch_at")
params_text = c2.text_area(
    "Params (JSON object)", value='{"temperature": 0.7}' if "temperature" in pipeline.param_names(at) else "{}",
    key=f"batch_params:{name}:{at}", height=90,
    help=f"{at}'s parameters: {', '.join(sorted(pipeline.param_names(at))) or 'none'}")
edit_text = c3.text_area("Edit (JSON object of fields the node reads)", value="{}",
                         key=f"batch_edit:{name}:{at}", height=90,
                         help=f"{at} reads: {', '.join(pipeline.reads(at)) or 'nothing'}")

writes = sorted({w for n in nodes for w in pipeline.writes(n)})
c1, c2, c3, c4 = st.columns(4)
# the demo's last real node checks citations; its result is the report
outcome_options = [LAST_WRITES] + writes
outcome = c1.selectbox("Outcome field", outcome_options, key=f"batch_outcome:{name}",
                       index=outcome_options.index("report") if "report" in writes else 0,
                       help="The state field that is a run's result")
noise = c2.number_input("Noise samples", min_value=0, max_value=20, value=0, key="batch_noise",
                        help="Re-sample each re-executed node K times: is a change beyond the model's own noise?")
executor = c3.selectbox("Executor", ["local", "ray"], key="batch_executor")
workers = c4.number_input("Workers", min_value=1, max_value=64, value=2, key="batch_workers")


def _json_object(text: str, label: str):
    try:
        value = fmt.parse_json_text(text or "{}")
    except json.JSONDecodeError as e:
        st.error(f"{label}: invalid JSON ({md(e.msg)} at line {e.lineno} column {e.colno})")
        st.stop()
    except fmt.JsonTextError as e:
        st.error(f"{label}: {md(e)}")
        st.stop()
    if not isinstance(value, dict):
        st.error(f"{label}: expected a JSON object like {{\"temperature\": 0.7}}")
        st.stop()
    return value


params, edit = _json_object(params_text, "Params"), _json_object(edit_text, "Edit")
selection: dict = {"pipeline": name, "status": None if status == "any" else status, "limit": int(limit)}
if search.strip():
    try:
        found = rw.list_runs(pipeline=name, status=selection["status"], search=search.strip(),
                             limit=min(int(limit) * 4, 10_000))
    except rewind.UserError as e:
        st.error(md(e))
        st.stop()
    ids = [r.id for r in found if r.parent_id is None][: int(limit)]
    if not ids:
        st.info(f"No {md(name)} run matches {md(search.strip())!r}.")
        st.stop()
    selection = {"runs": ids}
change = dict(at=at, edit=edit, params=params, outcome=None if outcome == LAST_WRITES else outcome)

b1, b2, _ = st.columns([1, 1, 4])
if b1.button("Plan", icon=":material/checklist:"):
    try:
        st.session_state[PLAN] = plan_batch(rw, **change, **selection)
    except rewind.RewindError as e:
        st.session_state.pop(PLAN, None)
        st.error(md(e))
refused = core.read_only_help("forked")
run_clicked = b2.button("Run batch", type="primary", icon=":material/play_arrow:",
                        disabled=refused is not None, help=refused)

plan = st.session_state.get(PLAN)
if plan is not None and plan.at == at:
    st.subheader("Fork plan")
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Runs", plan.runs)
    m2.metric("Reach the node", len(plan.reaching), help="the others never reached it: skipped")
    m3.metric("Tokens, at most", f"{plan.estimated_tokens:,}",
              help="what the steps from the node on first cost; the cache makes it less")
    m4.metric("A full re-run", f"{plan.full_rerun_tokens:,}")
    st.write("Nodes that may re-run: " + (" → ".join(f"`{n}`" for n in plan.nodes) or "none"))

if run_clicked:
    bar = st.progress(0.0, text="starting workers…")

    def on_progress(done, total, row) -> None:
        bar.progress(done / max(total, 1), text=f"{done}/{total} forked · {row.run_id} {row.outcome}")

    try:
        st.session_state[REPORT] = batch_fork(
            rw, **change, **selection, noise_samples=int(noise), executor=executor,
            workers=int(workers), on_progress=on_progress)
    except rewind.RewindError as e:
        st.error(md(e))
    bar.empty()
    core.bump()  # the forks are new runs: other pages re-read

# --- the result ----------------------------------------------------------------------------------
report = st.session_state.get(REPORT)
if report is None:
    st.stop()
st.subheader(f"Result: forked at {report.at}")
counts = report.counts
m = st.columns(6)
for col, key in zip(m, OUTCOMES):
    col.metric(key.capitalize(), counts[key])
m[4].metric("Tokens spent", f"{report.tokens_spent:,}")
m[5].metric("Tokens saved", f"{report.tokens_saved:,}")
st.caption(md(report.summary) + f" · {report.executor}, {report.workers} workers, "
           f"{report.elapsed_s:.1f} s")

only_flips = st.toggle("Changed runs only", value=bool(counts["changed"]), key="batch_only_flips")
rows = []
for r in report.rows:
    if only_flips and r.outcome != "changed":
        continue
    rows.append({
        "Run": r.run_id, "Fork": r.fork_id or "", "Outcome": r.outcome,
        "First divergence": r.first_divergence or "", "Verdict": r.verdict or "",
        "Tokens": r.tokens_spent, "Saved": r.tokens_saved, "Reason": r.reason,
        "Diff": f"/diff?a={r.run_id}&b={r.fork_id}" if r.fork_id else None,
    })
st.dataframe(rows, hide_index=True, width="stretch", column_config={
    "Diff": st.column_config.LinkColumn("Diff", display_text="open diff"),
    "Reason": st.column_config.TextColumn(width="large"),
})

c1, c2 = st.columns(2)
fig = go.Figure(go.Bar(x=list(OUTCOMES), y=[counts[o] for o in OUTCOMES],
                       marker_color=[OUTCOME_COLORS[o] for o in OUTCOMES]))
fig.update_layout(title="Outcomes", height=300, margin=dict(l=10, r=10, t=40, b=10),
                  yaxis_title="runs")
c1.plotly_chart(fig, width="stretch", key="batch_outcomes")
fig = go.Figure(go.Bar(x=["spent", "saved"], y=[report.tokens_spent, report.tokens_saved],
                       marker_color=["#1565c0", "#2e7d32"]))
fig.update_layout(title="Tokens: spent vs served from cache", height=300,
                  margin=dict(l=10, r=10, t=40, b=10), yaxis_title="tokens")
c2.plotly_chart(fig, width="stretch", key="batch_tokens")
