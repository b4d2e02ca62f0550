"""Fork: pick a run and a node, change what the node reads or its params, replay, and see
what it cost. Only the fields that really changed are sent as `edit` / `params`. The fork
points, the preview and the replay summary come from rewind_ui/fork_view.py."""

import streamlit as st

import rewind
from rewind_ui import access, core, editors, fmt, selection, shell
from rewind_ui import model_settings
from rewind_ui import fork_view as view
from rewind_ui import graph as ug
from rewind_ui.picker import graph_picker

shell.page_guard()  # before anything is drawn: see rewind_ui/shell.py

rw = core.get_rw()
md = fmt.md_escape

st.title("Fork & replay")
st.caption(
    "Change exactly what one node reads (or its params) and replay: nodes whose inputs did not "
    "change come back from the cache with the same output hash and zero tokens."
)

# --- which run ---------------------------------------------------------------------------------
link = selection.deep_link(("run", "node"))
if link and link.get("run"):
    selection.open_fork(link["run"], link.get("node"))

recent = core.runs_page(limit=100)
labels = {r["id"]: fmt.run_label(r) for r in recent}
if not st.session_state.get(selection.FORK_RUN):
    st.session_state[selection.FORK_RUN] = (st.session_state.get(selection.SEL_RUN)
                                            or (recent[0]["id"] if recent else None))
chosen = st.session_state.get(selection.FORK_RUN)
options = ([chosen] if chosen and chosen not in labels else []) + list(labels)
if not options:
    st.info("No runs yet: create one on the Runs page first.")
    st.page_link(shell.RUNS_PAGE, label="Go to Runs", icon=":material/list:")
    st.stop()

run_id = selection.bound_selectbox(
    "Run to fork", options, selection.FORK_RUN, format_func=lambda i: labels.get(i, i),
    accept_new_options=True, help="The 100 most recent runs; paste any run id to fork an older one",
)
run = core.find_run(run_id)
if run is None:
    st.error(f"There is no run {md(run_id)} in this store.")
    st.stop()
pipeline = core.find_pipeline(run.pipeline)
if pipeline is None:
    st.error(
        f"Pipeline **{md(run.pipeline)}** is not registered in this dashboard process, so its "
        "runs cannot be replayed. Start the dashboard with REWIND_PIPELINES=package.module:attr."
    )
    st.stop()
# an interrupted run can also be forked at the node it never reached
points = view.fork_points(run, core.next_node(run.id) if run.status == "interrupted" else None, pipeline)
if not points:
    st.warning("This run has no steps to fork from.")
    st.stop()

# --- which node --------------------------------------------------------------------------------
by_key = {p.key: p for p in points}
nodes, edges = core.graph_of(run)
key, _ = graph_picker(
    ug.run_graph_spec(nodes, edges, run.steps), (ug.STATUS_COLORS, ug.STATUS_HELP), view.choices(points),
    selection.FORK_NODE, f"_ag_fork_{run.id}", "Fork at node",
    fork_point=run.fork_node if run.parent_id else None,
)
selection.write_query_params({"run": run.id, "node": key})
point = by_key[key]
prefix = f"fk:{run.id}:{key}"

st.caption(f"Recorded reason for {md(key)}:")
st.text(point.reason or "—")

large: dict = {}
closed: set = set()
try:
    large = point.large_inputs()  # not loaded (nor fetched from an object store) unless asked
    closed = {n for n in large if not st.session_state.get(f"{prefix}:open:{n}")}
    recorded_inputs = point.inputs(skip=closed)
except rewind.RewindError as e:
    recorded_inputs = {}
    st.warning(f"The recorded inputs of this step could not be loaded ({md(e)}); fields start empty.")


def _reset() -> None:
    for k in [k for k in st.session_state if str(k).startswith(prefix + ":")]:
        del st.session_state[k]


# --- the editors -------------------------------------------------------------------------------
left, right = st.columns(2)
kinds, raws, originals = {}, {}, {}
with left:
    st.subheader("Fields it reads")
    reads = pipeline.reads(point.node)
    if not reads:
        st.caption("This node reads nothing from the state.")
    for name in reads:
        if name in large:
            st.checkbox(f"Load {fmt.md_escape(name)} to edit it ({fmt.fmt_bytes(large[name])} recorded)",
                        key=f"{prefix}:open:{name}",
                        help="Too large to put in an editor unless you ask; left closed, the "
                             "fork keeps the recorded value.")
            if name in closed:
                continue
        originals[name] = recorded_inputs.get(name)
        kinds[name], raws[name] = editors.render_value_widget(
            st, name, originals[name], f"{prefix}:edit:{name}",
            help=None if name in recorded_inputs else "not recorded in this step's inputs",
        )

pkinds, praws, poriginals = {}, {}, {}
with right:
    st.subheader("Its parameters")
    shown = view.shown_params(pipeline, point)
    if not shown:
        st.caption("This node has no parameters.")
    for name, value, default in shown:
        poriginals[name] = value
        wkey = f"{prefix}:param:{name}"
        kind = editors.kind_of(value)
        if kind == editors.INT and editors.kind_of(default) == editors.FLOAT:
            kind = editors.FLOAT  # canonical JSON records 0.0 as 0: keep the float widget
        pkinds[name], praws[name] = editors.render_value_widget(st, name, value, wkey, kind=kind, name=name)
        if name == "temperature" and pkinds[name] in (editors.FLOAT, editors.INT):
            default_t = model_settings.default_temperature()

            def _use_default(k=wkey, v=default_t, kind=pkinds[name]):
                st.session_state[k] = int(v) if kind == editors.INT else v

            st.button(f"Use the default temperature ({default_t:g})", key=f"{wkey}:dflt",
                      on_click=_use_default, help="Set in Settings")
    st.button("↺ Reset to the recorded values", on_click=_reset)

edit, edit_errors = editors.changes(originals, kinds, raws)
params, param_errors = editors.changes(poriginals, pkinds, praws)
errors = edit_errors + param_errors

# --- preview -----------------------------------------------------------------------------------
st.subheader("What will change")
for e in errors:
    st.error(f"Field **{md(e.field)}** {md(e.sentence)} Nothing will run until it is fixed.")
if errors:
    pass  # a field that cannot be read is not "no changes": the errors above say what to fix
elif not edit and not params:
    st.info(
        "No changes: a replay will serve every node from the cache (0 tokens, identical output "
        "hashes) — useful to prove the cache is sound."
    )
else:
    # in words, one change a line; a long text's changed words marked below it (wrapping, so an
    # edit in the middle of a long prompt is on screen; long values are cut here, the replay
    # sends them whole)
    st.markdown(f"Replaying from **{md(key)}** changes:\n"
                + "\n".join(f"- {md(line, 400)}"
                            for line in view.change_lines(point.node, edit, params, originals, poriginals)))
    for _name, html in view.text_diffs({**edit, **params}, {**poriginals, **originals}):
        st.html(html)

side_nodes = view.side_effect_nodes(pipeline)
if access.side_effects_allowed():
    allow = st.toggle("Allow side effects", value=False, key=f"{prefix}:side",
                      help="Off: side-effect nodes are dry-run (recorded, not performed)")
else:  # the server decides: a visitor cannot make the demo publish for real
    allow = False
if allow:
    st.warning(view.side_effects_warning(side_nodes))
elif side_nodes:
    st.caption("Side-effect nodes (" + ", ".join(md(n) for n in side_nodes) + ") will be dry-run"
               + ("." if access.side_effects_allowed() else
                  f": this server does not allow side effects from the dashboard ({access.SIDE_EFFECTS_ENV})."))

# --- the plan: what the replay will re-run, keep, skip, and cost, before anything is paid ----------
plan, confirmed = None, True
if not errors:
    st.subheader("Fork plan")
    try:
        plan = rw.plan_fork(run.id, point.node, edit=edit or None, params=params or None,
                            occurrence=point.occurrence,
                            allow_side_effects=bool(allow) and access.side_effects_allowed())
    except rewind.RewindError as e:
        st.error(f"No plan for this fork: {md(e)}")
    else:
        for line in view.plan_summary(plan):
            st.markdown(line)
        with st.expander("Every step of the plan, and why"):
            st.dataframe(view.plan_rows(plan), hide_index=True, width="stretch",
                         column_config={"Why": st.column_config.TextColumn(width="large")})
        if plan.needs_confirmation:
            st.warning("This fork needs an explicit confirmation: " + md("; ".join(plan.confirm_reasons)) + ".")
            confirmed = st.checkbox(md(view.confirmation_label(plan), 300), value=False,
                                    key=f"{prefix}:confirm:{plan.est_tokens}:{plan.edit_chars}")

# --- replay ------------------------------------------------------------------------------------
refused = core.read_only_help("forked")
if st.button("▶ Replay", type="primary", disabled=refused is not None, help=refused):
    if errors:
        st.error("Nothing was run or written: fix the fields above first.")
    elif not confirmed:
        st.error("Nothing was run or written: tick the confirmation above first (the plan says why "
                 "it is needed).")
    else:
        inherited = view.inherited_keys(points, key)
        with st.status(f"Replaying from {key}…", expanded=True) as status:
            if inherited:
                status.markdown(fmt.status_dot("inherited") + " inherited from the parent: " + fmt.keys_list(inherited))
            try:
                forked = rw.fork(run.id, at=point.node, edit=edit or None, params=params or None,
                                 allow_side_effects=bool(allow) and access.side_effects_allowed(), occurrence=point.occurrence,
                                 on_step=lambda s: status.markdown(fmt.step_line(s)))
            except Exception as e:  # RewindError names the problem; anything else is still shown
                forked = None
                status.update(label="Replay refused", state="error")
                st.error(md(e))
            if forked is not None:
                status.update(label=f"Fork {forked.id} {forked.status}: {fmt.spent_saved(forked)}",
                              state="complete" if forked.status == "completed" else "error", expanded=True)
        if forked is not None:
            core.bump()
            st.session_state[selection.LAST_FORK] = view.last_fork(forked, run, key)
            selection.open_diff(run.id, forked.id)

last = st.session_state.get(selection.LAST_FORK)
if last:
    st.divider()
    st.subheader(f"Last replay: fork {last['id']}")
    st.caption(f"of run {md(last['parent'])} at {md(last['at'])} · {md(last['status'])}")
    summary = view.last_fork_metrics(last)
    for row in (summary[:3], summary[3:]):
        for col, (label, value) in zip(st.columns(3), row):
            col.metric(label, value)
    st.caption(view.last_fork_caption(last))
    if last.get("error"):
        st.code(last["error"], language=None)
    b1, b2, _ = st.columns([1, 1, 3])
    if b1.button("Open the diff", icon=":material/difference:", type="primary", width="stretch"):
        selection.open_diff(last["parent"], last["id"])
        st.switch_page(shell.DIFF_PAGE, query_params={"a": last["parent"], "b": last["id"]})
    if b2.button("Open the fork", icon=":material/list:", width="stretch"):
        selection.select_run(last["id"])
        st.switch_page(shell.RUNS_PAGE, query_params={"run": last["id"]})
