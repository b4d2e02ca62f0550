"""Runs: the table of runs (paged, filtered), starting a run, and the detail of one run.
What each part shows is computed in rewind_ui/runs_view.py; this file lays it out."""

import json

import pandas as pd
import streamlit as st

import rewind
from rewind_ui import charts, core, fmt, progress, selection, shell, textview
from rewind_ui import graph as ug
from rewind_ui import runs_view as view
from rewind_ui.picker import graph_picker

shell.page_guard()  # before anything is drawn: see rewind_ui/shell.py

rw = core.get_rw()
md = fmt.md_escape
# set while the shown run was asked for by id (a deep link, the open box): a filter that matches
# nothing still hides a run picked from an earlier table, never one asked for by id
EXPLICIT = "_sel_explicit"


def _filters_changed() -> None:
    st.session_state[EXPLICIT] = False

# a deep link (?run=ID&node=NAME) wins over the session's selection when it is new
link = selection.deep_link(("run", "node"))
if link and link.get("run"):
    selection.select_run(link["run"], link.get("node"))
    st.session_state[EXPLICIT] = True


def start_run(pipeline, state: dict, use_cache: bool = True):
    """Run synchronously, one status line per finished node; select the new run."""
    with st.status(f"Running {pipeline.name}…", expanded=True) as status:
        try:
            run = rw.run(pipeline, state, use_cache=use_cache,
                         on_step=lambda step: status.markdown(fmt.step_line(step)))
        except rewind.RewindError as e:
            status.update(label="Run refused: nothing was written", state="error")
            st.error(md(e))
            return None
        ok = run.status == "completed"
        status.update(label=view.run_finished_label(run), state="complete" if ok else "error", expanded=not ok)
    core.bump()
    selection.select_run(run.id)
    return run


# --- header and the first demo run -------------------------------------------------------------

head, demo_col = st.columns([3, 1], vertical_alignment="bottom")  # the button's label whole at 1280 px
with head:
    st.title("Runs")
total_all = core.runs_count()
demo = core.demo_pipeline()
refused = core.read_only_help("run")
read_only = refused is not None
with demo_col:
    demo_clicked = st.button(
        "Create a demo run", icon=":material/auto_awesome:", type="primary" if total_all == 0 else "secondary",
        disabled=demo is None or read_only, width="stretch",
        help=refused if read_only
        else "Run the research demo pipeline on a sample question (offline simulator by default)"
        if demo is not None else f"The demo pipeline {core.DEMO_MODULE} is not available",
    )
if demo_clicked and demo is not None:
    if start_run(demo, view.demo_state(core.demo_questions(), total_all, core.sample_state(demo))) is not None:
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
                state, problem = view.parse_initial_state(st.session_state.get(state_key, ""), pipeline)
                if problem:
                    st.error(problem)
                else:
                    start_run(pipeline, state, use_cache=use_cache)
                    total_all = core.runs_count()

# --- the table ---------------------------------------------------------------------------------

st.subheader("All runs")
f1, f2, f3, f4, f5 = st.columns([2, 2, 2.6, 1.6, 1.2], vertical_alignment="bottom")  # "Forks only" whole
pipeline_filter = f1.selectbox("Pipeline", [view.ALL] + core.pipeline_names(), key="flt_pipeline",
                               persist_state="session", on_change=_filters_changed)
status_filter = f2.selectbox("Status", [view.ALL, *view.RUN_STATUSES], key="flt_status", persist_state="session", on_change=_filters_changed)
search = f3.text_input("Search", key="flt_search", placeholder="run id, question or pipeline",
                       max_chars=rewind.MAX_SEARCH, persist_state="session", on_change=_filters_changed)
forks_only = f4.toggle("Forks only", key="flt_forks", persist_state="session", on_change=_filters_changed)
page_size = f5.selectbox("Rows", view.PAGE_SIZES, index=1, key="flt_size", persist_state="session")

filters = view.filters(pipeline_filter, status_filter, forks_only, search)
try:
    total = core.runs_count(**filters)
except rewind.UserError as e:  # a search the store refuses (too long): one line, not a traceback
    st.error(md(e))
    st.stop()
n_pages = view.page_count(total, page_size)
if st.session_state.get("flt_page", 1) > n_pages:
    st.session_state["flt_page"] = 1
pcol, ocol = st.columns([1, 3], vertical_alignment="bottom")
page_no = pcol.number_input(f"Page (of {fmt.fmt_count(n_pages)})", min_value=1, max_value=n_pages, step=1,
                            key="flt_page")
query = view.page_query(st.session_state.get("_runs_page_marker"), filters, page_size, page_no)
offset = query["offset"]
rows = core.runs_page(limit=page_size, **query, **filters)
st.session_state["_runs_page_marker"] = view.page_marker(filters, page_size, page_no, rows)


def _open_typed_run() -> None:
    rid = (st.session_state.get("open_run_id") or "").strip()
    if rid:
        selection.select_run(rid)
        st.session_state[EXPLICIT] = True


ocol.text_input("Open a run by id", key="open_run_id", on_change=_open_typed_run,
                placeholder="paste a run id and press Enter")

st.session_state["_runs_page_ids"] = [r["id"] for r in rows]


def _on_table_select() -> None:
    sel = st.session_state.get("runs_table")
    picked = (sel or {}).get("selection", {}).get("rows", []) if sel else []
    ids = st.session_state.get("_runs_page_ids", [])
    if picked and picked[0] < len(ids):
        selection.select_run(ids[picked[0]])
        st.session_state[EXPLICIT] = False


if rows:
    open_id = st.session_state.get(selection.SEL_RUN) or rows[0]["id"]  # the first row opens by default
    # the open run's row highlighted (a table selection cannot be set from code: a run opened
    # by a link, the lineage or the id box would otherwise be unmarked)
    styles = view.open_row_styles(rows, open_id)
    frame = pd.DataFrame(view.table(rows))
    st.dataframe(
        frame.style.apply(lambda row: [styles[row.name]] * len(row), axis=1)
        .format(thousands=",", subset=["Tokens"]),
        key="runs_table", on_select=_on_table_select, selection_mode="single-row",
        hide_index=True, width="stretch",
        column_config={name: (st.column_config.NumberColumn if name == "Tokens" else st.column_config.TextColumn)(
            width=px, help=view.COLUMN_HELP.get(name)) for name, px in view.column_widths().items()},
    )
    note = view.open_note(rows, open_id)
    st.caption(view.showing(offset, len(rows), total) + (f" · {md(note)}" if note else ""))
else:
    st.caption("No runs match these filters." if total_all else "")

# a filter that matches nothing shows nothing below it: the run opened before belongs to
# another result (a run opened by id or a deep link is still shown)
filtered = bool(filters["pipeline"] or filters["status"] or filters["forks_only"] or filters["search"])
if total_all and filtered and not rows and not st.session_state.get(EXPLICIT):
    selection.write_query_params({"run": None, "node": None})
    st.stop()

# --- the selected run --------------------------------------------------------------------------

sel_id = st.session_state.get(selection.SEL_RUN)
if not sel_id and rows:
    sel_id = rows[0]["id"]
    selection.select_run(sel_id)
run = core.find_run(sel_id)
if sel_id and run is None:
    st.warning(f"There is no run {md(sel_id)} in this store.")
if run is None:
    selection.write_query_params({"run": None, "node": None})
    st.stop()

st.divider()
st.subheader(f"Run {run.id}")
st.caption(view.run_caption(run))
st.text(run.summary or "(no text input)")

header = view.run_metrics(run)
for row in (header[:4], header[4:]):  # four to a row: every label whole at 1280 px
    for col, (label, value, help_text) in zip(st.columns(4), row):
        col.metric(label, value, help=help_text)
if run.error or run.status in ("interrupted", "failed"):
    st.error(view.incomplete_message(run))
    if run.error:
        st.code(run.error, language=None)
    if run.status in ("interrupted", "failed") and not read_only:
        if st.button("Resume this run", icon=":material/play_arrow:", key=f"resume_{run.id}",
                     help="Carry on from the last committed step (a failed step runs again)"):
            with st.status(f"Resuming {run.id}…", expanded=True) as status:
                try:
                    resumed = rw.resume(run.id, on_step=lambda step: status.markdown(fmt.step_line(step)))
                except rewind.RewindError as e:
                    status.update(label="Resume refused", state="error")
                    st.error(md(e))
                else:
                    status.update(label=view.run_finished_label(resumed),
                                  state="complete" if resumed.status == "completed" else "error")
                    core.bump()
                    st.rerun()
change = view.fork_change(run)
if change is not None:
    with st.expander("What this fork changed"):
        textview.show_json(change)

run_alarms = core.alarms_for(run)
alarmed = view.alarmed_nodes(run_alarms)
if run_alarms:
    st.warning(view.alarm_message(alarmed))
    with st.expander("Alarm details"):
        st.dataframe(view.alarm_rows(run_alarms), hide_index=True, width="stretch")

lin = view.lineage_view(core.lineage(run.id))
with st.container(border=True):
    st.markdown("**Lineage**")
    cols = st.columns(3)
    with cols[0]:
        st.caption("Ancestors (oldest first)")
        if not lin.ancestors:
            st.caption("— a root run")
        for rid, label, enabled in lin.ancestors:
            st.button(label, key=f"lin_up_{rid}", disabled=not enabled, on_click=selection.select_run,
                      args=(rid,), help="Open this ancestor")
    with cols[1]:
        st.caption("This run")
        st.button(f"● {run.id}", key="lin_self", disabled=True)
        if run.parent_id:
            if st.button("Diff with parent", key="diff_parent", icon=":material/difference:"):
                selection.open_diff(run.parent_id, run.id)
                st.switch_page(shell.DIFF_PAGE, query_params={"a": run.parent_id, "b": run.id})
    with cols[2]:
        st.caption("Forks of this run")
        if not lin.children:
            st.caption("— none yet")
        for rid, label, _ in lin.children:
            st.button(label, key=f"lin_down_{rid}", on_click=selection.select_run, args=(rid,),
                      help="Open this fork")
        if lin.more_children:
            st.caption(f"… and {lin.more_children} more (filter the table by parent id)")

# graph and step choice
by_key = view.steps_by_key(run)
nodes, edges = core.graph_of(run)
st.markdown("**Graph** · hover a node for its reason, click it to open the step")
sel_key, side = graph_picker(
    ug.run_graph_spec(nodes, edges, run.steps, alarmed=alarmed), (ug.STATUS_COLORS, ug.STATUS_HELP),
    view.step_choices(run), selection.SEL_NODE, f"_ag_run_{run.id}", "Step", side=True,
    empty="This run has no steps.", fork_point=run.fork_node if run.parent_id else None,
)
if sel_key:
    with side:
        if st.button("Fork from this step", icon=":material/call_split:", type="primary", width="stretch"):
            selection.open_fork(run.id, sel_key)
            st.switch_page(shell.FORK_PAGE)

selection.write_query_params({"run": run.id, "node": sel_key})

st.markdown("**Steps**")
step_rows = view.step_rows(run)
status_css = view.status_cell_styles(step_rows)
# a Styler's display values win over column formats: the latency keeps its one decimal here
st.dataframe(pd.DataFrame(step_rows).style.apply(lambda col: status_css, subset=["Status"])
             .format(precision=1, subset=[fmt.LATENCY_COLUMN]).format(thousands=",", subset=["Spent", "Cost"])
             if step_rows else step_rows,
             hide_index=True, width="stretch",
             column_config={name: (st.column_config.TextColumn if name in ("Node", "Status", "Reason")
                                   else st.column_config.NumberColumn)(width=px)
                            for name, px in view.step_column_widths(step_rows).items()})
if run.steps:
    keys, colors, hover = list(by_key), view.status_colors(run.steps), [fmt.shown_status(s) for s in run.steps]
    for col, (title, values, unit, chart_key) in zip(st.columns(2), view.chart_series(run)):
        col.plotly_chart(charts.node_bars(title, keys, values, unit, colors, hover), width="stretch", key=chart_key)

# the selected step
if sel_key and sel_key in by_key:
    step = by_key[sel_key]
    st.markdown(view.step_title(sel_key, step))
    note = view.step_note(step)
    if note:
        st.caption(note)
    for col, (label, value, help_text) in zip(st.columns(5), view.step_metrics(step)):  # short labels
        col.metric(label, value, help=help_text)
    st.caption("Reason")
    st.text(step.reason or "—")
    if step.error:
        st.caption("Error")
        st.code(step.error, language=None)
    st.caption("Hashes")
    st.code(view.hashes_text(step), language=None)
    calls = list(step.calls or [])
    tabs = st.tabs(["Inputs", "Outputs", f"Model calls ({len(calls)})", "Params",
                    "State after this step", "Field hashes"])
    big = f"big:{run.id}:{sel_key}"  # a large value is loaded when its box is ticked
    for tab, sizes, load, refs in ((tabs[0], step.input_sizes, step.load_inputs, step.input_refs),
                                   (tabs[1], step.output_sizes, step.load_outputs, step.output_refs)):
        with tab:
            try:
                closed = textview.closed_large_fields(sizes(), f"{big}:{'in' if tab is tabs[0] else 'out'}")
                textview.show_fields(load([k for k in refs if k not in closed]),
                                     empty="Tick a box above to show it." if closed else "Nothing recorded.")
            except rewind.RewindError as e:
                st.warning(f"Not available: {md(e)}")
    with tabs[2]:
        textview.show_calls(calls)
    with tabs[3]:
        textview.show_json(fmt.to_jsonable(step.params or {}), expanded=2)
    with tabs[4]:
        try:
            snap = rw.state_at(step, skip=textview.closed_large_fields(
                rw.state_at(step, sizes=True) or {}, f"{big}:state"))
        except rewind.RewindError as e:
            snap = None
            st.warning(f"Not available: {md(e)}")
        if snap is None:
            st.caption("No saved state for this step.")
        else:
            textview.show_json(fmt.preview_value(fmt.to_jsonable(fmt.public_state(snap)),
                                                 textview.SHOW_CHARS), expanded=1)
    with tabs[5]:
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
audits = st.session_state.setdefault(selection.AUDITS, {})
if a2.button("Audit determinism", icon=":material/science:"):
    bar = st.progress(0.0, text="Auditing…")
    try:
        report = rw.audit(run.id, repeats=int(repeats), on_progress=progress.reporter(bar, "Auditing"))
    except Exception as e:  # a missing module or a bad request: say so, never crash the page
        bar.empty()
        st.error(f"Audit failed: {md(e)}")
    else:
        bar.progress(1.0, text="Audit complete")
        audits[run.id] = view.audit_view(report)
if run.id in audits:
    kind, text = view.audit_verdict(audits[run.id])
    (st.warning if kind == "warning" else st.success)(text)
    st.dataframe(audits[run.id]["rows"], hide_index=True, width="stretch")
