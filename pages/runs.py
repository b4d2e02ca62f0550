"""Runs: the table of runs (paged, filtered), starting a run, and the detail of one run."""

import json
import math

import plotly.graph_objects as go
import streamlit as st

import rewind
from rewind_ui import core, fmt
from rewind_ui import graph as ug
from rewind_ui import shell

shell.page_guard()  # before anything is drawn: see rewind_ui/shell.py

rw = core.get_rw()
md = fmt.md_escape

RUN_STATUSES = ("running", "completed", "failed", "interrupted")

# a deep link (?run=ID&node=NAME) wins over the session's selection when it is new
link = core.deep_link(("run", "node"))
if link and link.get("run"):
    core.select_run(link["run"], link.get("node"))


def start_run(pipeline, state: dict, use_cache: bool = True):
    """Run synchronously, one status line per finished node; select the new run."""
    with st.status(f"Running {pipeline.name}…", expanded=True) as status:
        def on_step(step):
            icon = fmt.status_dot(step.status)
            status.markdown(
                f"{icon} **{md(step.node)}** — {md(step.status)} · {fmt.fmt_tokens(step.tokens)} tokens"
                f" · {fmt.fmt_ms(step.latency_ms)}"
            )

        try:
            run = rw.run(pipeline, state, use_cache=use_cache, on_step=on_step)
        except rewind.RewindError as e:
            status.update(label="Run refused: nothing was written", state="error")
            st.error(md(e))
            return None
        ok = run.status == "completed"
        status.update(
            label=f"Run {run.id} {run.status}: {fmt.fmt_tokens(run.total_tokens)} tokens spent, "
                  f"{fmt.fmt_tokens(run.tokens_saved)} saved",
            state="complete" if ok else "error", expanded=not ok,
        )
    core.bump()
    core.select_run(run.id)
    return run


# --- header and the first demo run -------------------------------------------------------------

head, demo_col = st.columns([4, 1], vertical_alignment="bottom")
with head:
    st.title("Runs")
total_all = core.runs_count()
demo = core.demo_pipeline()
with demo_col:
    demo_clicked = st.button(
        "Create a demo run", icon=":material/auto_awesome:", type="primary" if total_all == 0 else "secondary",
        disabled=demo is None, width="stretch",
        help="Run the research demo pipeline on a sample question (offline simulator by default)"
        if demo is not None else f"The demo pipeline {core.DEMO_MODULE} is not available",
    )
if demo_clicked and demo is not None:
    questions = core.demo_questions()
    state = {"question": questions[total_all % len(questions)]} if questions else core.sample_state(demo)
    if start_run(demo, state) is not None:
        total_all = core.runs_count()

if total_all == 0:
    st.info(
        "No runs yet in this store. Create a demo run with the button above, or start a run of "
        "any registered pipeline below."
    )

with st.expander("Start a run", icon=":material/play_arrow:", expanded=total_all == 0):
    names = core.pipeline_names()
    if not names:
        st.warning(
            "No pipeline is registered in this process. Set REWIND_PIPELINES=package.module:attr "
            "before starting the dashboard, or install the demo pipeline."
        )
    else:
        pname = st.selectbox("Pipeline", names, key="start_pipeline", persist_state="session")
        pipeline = core.find_pipeline(pname)
        if pipeline is not None:
            if pipeline.description:
                st.caption(md(pipeline.description, 400))
            st.caption("Nodes: " + " → ".join(md(n) for n in pipeline.actions))
            state_key = f"start_state::{pname}"
            if state_key not in st.session_state:
                st.session_state[state_key] = json.dumps(core.sample_state(pipeline), indent=2)
            with st.form("start_run_form", border=False):
                st.text_area("Initial state (JSON object)", key=state_key, height=140)
                use_cache = st.checkbox("Serve cache hits (an identical re-run is free)", value=True)
                submitted = st.form_submit_button("Start run", type="primary")
            if submitted:
                raw = st.session_state.get(state_key, "")
                try:
                    state = json.loads(raw)
                except json.JSONDecodeError as e:
                    st.error(f"Initial state: not valid JSON ({md(e.msg)} at line {e.lineno}, column {e.colno}). Nothing was run.")
                    state = None
                if state is not None and not isinstance(state, dict):
                    st.error("Initial state: must be a JSON object like {\"question\": \"…\"}. Nothing was run.")
                    state = None
                if state is not None:
                    start_run(pipeline, state, use_cache=use_cache)
                    total_all = core.runs_count()

# --- the table ---------------------------------------------------------------------------------

st.subheader("All runs")
f1, f2, f3, f4, f5 = st.columns([2, 2, 3, 1.3, 1.2], vertical_alignment="bottom")
pipeline_filter = f1.selectbox("Pipeline", ["(all)"] + core.pipeline_names(), key="flt_pipeline",
                               persist_state="session")
status_filter = f2.selectbox("Status", ["(all)", *RUN_STATUSES], key="flt_status", persist_state="session")
search = f3.text_input("Search", key="flt_search", placeholder="run id, question or pipeline",
                       persist_state="session")
forks_only = f4.toggle("Forks only", key="flt_forks", persist_state="session")
page_size = f5.selectbox("Rows", [25, 50, 100, 200], index=1, key="flt_size", persist_state="session")

filters = dict(
    pipeline=None if pipeline_filter == "(all)" else pipeline_filter,
    status=None if status_filter == "(all)" else status_filter,
    forks_only=forks_only, search=search,
)
total = core.runs_count(**filters)
n_pages = max(1, math.ceil(total / page_size))
if st.session_state.get("flt_page", 1) > n_pages:
    st.session_state["flt_page"] = 1
pcol, ocol = st.columns([1, 3], vertical_alignment="bottom")
page_no = pcol.number_input(f"Page (of {n_pages:,})", min_value=1, max_value=n_pages, step=1, key="flt_page")
offset = (int(page_no) - 1) * page_size
rows = core.runs_page(limit=page_size, offset=offset, **filters)


def _open_typed_run() -> None:
    rid = (st.session_state.get("open_run_id") or "").strip()
    if rid:
        core.select_run(rid)


ocol.text_input("Open a run by id", key="open_run_id", on_change=_open_typed_run,
                placeholder="paste a run id and press Enter")

st.session_state["_runs_page_ids"] = [r["id"] for r in rows]


def _on_table_select() -> None:
    sel = st.session_state.get("runs_table")
    picked = (sel or {}).get("selection", {}).get("rows", []) if sel else []
    ids = st.session_state.get("_runs_page_ids", [])
    if picked and picked[0] < len(ids):
        core.select_run(ids[picked[0]])


table = [
    {
        "Run": r["id"], "Status": r["status"], "Pipeline": r["pipeline"],
        "Question / first input": r["summary"], "Started": r["started"], "Steps": r["steps"], "Tokens": r["tokens"],
        "Tokens saved": r["tokens_saved"], "Latency (s)": round((r["latency_ms"] or 0) / 1000, 2),
        "Parent": r["parent_id"] or "", "Fork at": r["fork_node"] or "",
    }
    for r in rows
]
if table:
    st.dataframe(
        table, key="runs_table", on_select=_on_table_select, selection_mode="single-row",
        hide_index=True, width="stretch",
        column_config={
            "Question / first input": st.column_config.TextColumn(width="medium"),
            "Run": st.column_config.TextColumn(width=140),
            "Latency (s)": st.column_config.NumberColumn(format="%.2f"),
        },
    )
    st.caption(
        f"Showing {offset + 1:,}–{offset + len(rows):,} of {total:,} runs · click a row to open it"
    )
else:
    st.caption("No runs match these filters." if total_all else "")

# --- the selected run --------------------------------------------------------------------------

sel_id = st.session_state.get(core.SEL_RUN)
if not sel_id and rows:
    sel_id = rows[0]["id"]
    core.select_run(sel_id)
run = core.find_run(sel_id)
if sel_id and run is None:
    st.warning(f"There is no run {md(sel_id)} in this store.")
if run is None:
    core.write_query_params({"run": None, "node": None})
    st.stop()

st.divider()
st.subheader(f"Run {run.id}")
st.caption(
    f"pipeline **{md(run.pipeline)}** · {md(run.status)} · started {fmt.fmt_ts(run.created_at)}"
    + (f" · fork of {md(run.parent_id)} at {md(run.fork_node)}" if run.parent_id else "")
)
st.text(run.summary or "(no text input)")

m = st.columns(5)
m[0].metric("Status", run.status)
m[1].metric("Steps", len(run.steps))
m[2].metric("Tokens spent", fmt.fmt_tokens(run.total_tokens))
m[3].metric("Tokens saved", fmt.fmt_tokens(run.tokens_saved))
m[4].metric("Latency", fmt.fmt_ms(run.latency_ms))
if run.error:
    st.error("The run did not complete:")
    st.code(run.error, language=None)
if run.parent_id and (run.edit or run.params):
    with st.expander("What this fork changed"):
        st.json(fmt.to_jsonable({"edit": run.edit, "params": run.params,
                                  "allow_side_effects": run.allow_side_effects}))

# nondeterminism alarms
run_alarms = core.alarms_for(run)
alarmed = sorted({a["node"] for a in run_alarms})
if run_alarms:
    st.warning(
        "Nondeterminism alarm on "
        + ", ".join(f"**{md(n)}**" for n in alarmed)
        + ": the same inputs gave a different output in another execution. Cached replays of "
          "these nodes may hide jitter; audit the run or lower the temperature."
    )
    with st.expander("Alarm details"):
        st.dataframe(
            [{"Node": a["node"], "Input hash": fmt.short_hash(a["input_hash"], 16),
              "Output (first)": fmt.short_hash(a["output_hash_a"], 16),
              "Output (later)": fmt.short_hash(a["output_hash_b"], 16), "Run": a["run_id"],
              "When": fmt.fmt_ts(a["created_at"])} for a in run_alarms],
            hide_index=True, width="stretch",
        )

# lineage
lin = core.lineage(run.id)
with st.container(border=True):
    st.markdown("**Lineage**")
    cols = st.columns(3)
    with cols[0]:
        st.caption("Ancestors (oldest first)")
        if not lin["ancestors"]:
            st.caption("— a root run")
        for a in lin["ancestors"]:
            if a["missing"]:
                st.button(f"{a['id']} (purged)", key=f"lin_up_{a['id']}", disabled=True)
            else:
                st.button(f"↑ {a['id']}", key=f"lin_up_{a['id']}", on_click=core.select_run, args=(a["id"],),
                          help="Open this ancestor")
    with cols[1]:
        st.caption("This run")
        st.button(f"● {run.id}", key="lin_self", disabled=True)
        if run.parent_id:
            if st.button("Diff with parent", key="diff_parent", icon=":material/difference:"):
                core.open_diff(run.parent_id, run.id)
                st.switch_page(core.DIFF_PAGE, query_params={"a": run.parent_id, "b": run.id})
    with cols[2]:
        st.caption("Forks of this run")
        if not lin["children"]:
            st.caption("— none yet")
        for c in lin["children"][:30]:
            st.button(f"↓ {c['id']} · at {c['fork_node']} · {c['status']}", key=f"lin_down_{c['id']}",
                      on_click=core.select_run, args=(c["id"],), help="Open this fork")
        if len(lin["children"]) > 30:
            st.caption(f"… and {len(lin['children']) - 30} more (filter the table by parent id)")

# graph and step choice
step_keys = [fmt.step_key(s.node, s.occurrence) for s in run.steps]
by_key = dict(zip(step_keys, run.steps))
nodes, edges = core.graph_of(run)
spec = ug.run_graph_spec(nodes, edges, run.steps, alarmed=alarmed)
st.markdown("**Graph** · hover a node for its reason, click it to open the step")
clicked = ug.show_graph(st, spec, f"_ag_run_{run.id}")
st.markdown(ug.legend_html(ug.STATUS_COLORS, ug.STATUS_HELP), unsafe_allow_html=True)
if clicked:
    cur_node, _ = fmt.parse_step_key(st.session_state.get(core.SEL_NODE))
    if cur_node != clicked:
        first = next((k for k in step_keys if fmt.parse_step_key(k)[0] == clicked), None)
        if first is not None:
            st.session_state[core.SEL_NODE] = first
        else:
            st.toast(f"{clicked} was not reached in this run")
scol, bcol = st.columns([3, 1], vertical_alignment="bottom")
with scol:
    if step_keys:
        sel_key = core.bound_selectbox(
            "Step", step_keys, core.SEL_NODE,
            format_func=lambda k: f"{step_keys.index(k) + 1}. {k} — {by_key[k].status}",
            help="Or click a node in the graph",
        )
    else:
        sel_key = None
        st.caption("This run has no steps.")
with bcol:
    if sel_key:
        if st.button("Fork from this step", icon=":material/call_split:", type="primary", width="stretch"):
            core.open_fork(run.id, sel_key)
            st.switch_page(core.FORK_PAGE)

core.write_query_params({"run": run.id, "node": sel_key})

# per-step table and charts
st.markdown("**Steps**")
st.dataframe(
    [
        {"#": i + 1, "Node": k, "Status": s.status, "Tokens": s.tokens, "Saved": s.tokens_saved,
         "Latency (ms)": round(s.latency_ms, 1), "Input hash": fmt.short_hash(s.input_hash, 12),
         "Output hash": fmt.short_hash(s.output_hash, 12), "Reason": s.reason or (s.error or "")}
        for i, (k, s) in enumerate(by_key.items())
    ],
    hide_index=True, width="stretch",
    column_config={"Reason": st.column_config.TextColumn(width="large")},
)
if run.steps:
    colors = [ug.STATUS_COLORS.get(s.status, "#607d8b") for s in run.steps]
    c1, c2 = st.columns(2)
    for col, title, values, unit in (
        (c1, "Tokens per node", [s.tokens for s in run.steps], "tokens"),
        (c2, "Latency per node", [round(s.latency_ms, 1) for s in run.steps], "ms"),
    ):
        fig = go.Figure(go.Bar(x=step_keys, y=values, marker_color=colors,
                               hovertext=[s.status for s in run.steps],
                               hovertemplate="%{x}: %{y} " + unit + " (%{hovertext})<extra></extra>"))
        fig.update_layout(title=title, height=280, margin=dict(l=10, r=10, t=40, b=10),
                          yaxis_title=unit, showlegend=False)
        col.plotly_chart(fig, width="stretch", key=f"chart_{unit}")

# the selected step
if sel_key and sel_key in by_key:
    step = by_key[sel_key]
    st.markdown(f"#### Step {md(sel_key)} · {md(step.status)}")
    sm = st.columns(4)
    sm[0].metric("Tokens", fmt.fmt_tokens(step.tokens),
                 help=f"prompt {step.prompt_tokens} · completion {step.completion_tokens}")
    sm[1].metric("Tokens saved", fmt.fmt_tokens(step.tokens_saved))
    sm[2].metric("Latency", fmt.fmt_ms(step.latency_ms))
    sm[3].metric("Occurrence", step.occurrence)
    st.caption("Reason")
    st.text(step.reason or "—")
    if step.error:
        st.caption("Error")
        st.code(step.error, language=None)
    st.caption("Hashes")
    st.code(f"input_hash  {step.input_hash or '—'}\noutput_hash {step.output_hash or '—'}", language=None)
    tabs = st.tabs(["Inputs", "Outputs", "Params", "State after this step", "Field hashes"])
    for tab, getter in (
        (tabs[0], lambda: step.inputs),
        (tabs[1], lambda: step.outputs),
        (tabs[2], lambda: step.params),
    ):
        with tab:
            try:
                st.json(fmt.to_jsonable(getter()), expanded=2)
            except rewind.RewindError as e:
                st.warning(f"Not available: {md(e)}")
    with tabs[3]:
        try:
            snap = rw.state_at(step)
        except rewind.RewindError as e:
            snap = None
            st.warning(f"Not available: {md(e)}")
        if snap is None:
            st.caption("No saved state for this step.")
        else:
            st.json(fmt.to_jsonable(fmt.public_state(snap)), expanded=1)
    with tabs[4]:
        st.json(step.field_hashes or {})

# determinism audit
st.divider()
st.subheader("Determinism audit")
st.caption(
    "Re-executes every step on its recorded inputs (no cache, side effects dry-run, nothing "
    "written) and counts distinct outputs per node."
)
a1, a2 = st.columns([1, 4], vertical_alignment="bottom")
repeats = a1.number_input("Repeats", min_value=1, max_value=20, value=3, step=1, key="audit_repeats")
audits = st.session_state.setdefault("audits", {})
if a2.button("Audit determinism", icon=":material/science:"):
    bar = st.progress(0.0, text="Auditing…")

    def on_progress(done, total=None, node=None, *rest):
        frac = (done / total) if total else 0.0
        bar.progress(min(1.0, max(0.0, float(frac))), text=f"Auditing {node or ''} ({done}/{total or '?'})")

    try:
        report = rw.audit(run.id, repeats=int(repeats), on_progress=on_progress)
    except Exception as e:  # a missing module or a bad request: say so, never crash the page
        bar.empty()
        st.error(f"Audit failed: {md(e)}")
    else:
        bar.progress(1.0, text="Audit complete")
        audits[run.id] = {
            "repeats": report.repeats,
            "rows": [
                {"Node": fmt.step_key(r.node, r.occurrence), "Status": getattr(r, "status", ""),
                 "Stable": {True: "✓ stable", False: "✗ unstable", None: "—"}[r.stable],
                 "Distinct outputs": r.distinct_outputs,
                 "Unstable fields": ", ".join(map(str, r.unstable_fields or [])),
                 "Samples": getattr(r, "samples", "")}
                for r in report.rows
            ],
            "unstable": list(report.unstable_nodes),
        }
if run.id in audits:
    rep = audits[run.id]
    if rep["unstable"]:
        st.warning("Unstable nodes (" + str(rep["repeats"]) + " repeats): " + ", ".join(md(n) for n in rep["unstable"]))
    else:
        st.success(f"Every audited node was stable over {rep['repeats']} repeats.")
    st.dataframe(rep["rows"], hide_index=True, width="stretch")
