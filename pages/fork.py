"""Fork: pick a run and a node, change what the node reads or its params, replay, and see
what it cost. Only the fields that really changed are sent as `edit` / `params`."""

import difflib

import streamlit as st

import rewind
from rewind_ui import core, editors, fmt
from rewind_ui import graph as ug
from rewind_ui import shell

shell.page_guard()  # before anything is drawn: see rewind_ui/shell.py

rw = core.get_rw()
md = fmt.md_escape

st.title("Fork & replay")
st.caption(
    "Change exactly what one node reads (or its params) and replay: nodes whose inputs did not "
    "change come back from the cache with the same output hash and zero tokens."
)

# --- which run ---------------------------------------------------------------------------------
link = core.deep_link(("run", "node"))
if link and link.get("run"):
    core.open_fork(link["run"], link.get("node"))

recent = core.runs_page(limit=100)
labels = {r["id"]: core.run_label(r) for r in recent}
if not st.session_state.get(core.FORK_RUN):
    st.session_state[core.FORK_RUN] = st.session_state.get(core.SEL_RUN) or (recent[0]["id"] if recent else None)
chosen = st.session_state.get(core.FORK_RUN)
options = ([chosen] if chosen and chosen not in labels else []) + list(labels)
if not options:
    st.info("No runs yet: create one on the Runs page first.")
    st.page_link(core.RUNS_PAGE, label="Go to Runs", icon=":material/list:")
    st.stop()

run_id = core.bound_selectbox(
    "Run to fork", options, core.FORK_RUN, format_func=lambda i: labels.get(i, i),
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
next_visit = core.next_visit(run) if run.status == "interrupted" else None
if not run.steps and next_visit is None:
    st.warning("This run has no steps to fork from.")
    st.stop()

# --- which node --------------------------------------------------------------------------------
step_keys = [fmt.step_key(s.node, s.occurrence) for s in run.steps]
by_key = dict(zip(step_keys, run.steps))
if next_visit is not None:
    step_keys.append(fmt.step_key(next_visit.node, next_visit.occurrence))
    by_key[step_keys[-1]] = next_visit
if st.session_state.get(core.FORK_NODE) not in by_key:
    # a bare node name (deep link, graph) means its first visit
    node_name, _ = fmt.parse_step_key(st.session_state.get(core.FORK_NODE))
    st.session_state[core.FORK_NODE] = next(
        (k for k in step_keys if fmt.parse_step_key(k)[0] == node_name), step_keys[0]
    )
nodes, edges = core.graph_of(run)
clicked = ug.show_graph(st, ug.run_graph_spec(nodes, edges, run.steps), f"_ag_fork_{run.id}")
st.markdown(ug.legend_html(ug.STATUS_COLORS, ug.STATUS_HELP), unsafe_allow_html=True)
if clicked and fmt.parse_step_key(st.session_state.get(core.FORK_NODE))[0] != clicked:
    first = next((k for k in step_keys if fmt.parse_step_key(k)[0] == clicked), None)
    if first:
        st.session_state[core.FORK_NODE] = first
scol, _ = st.columns([2, 2])
with scol:
    key = core.bound_selectbox(
        "Fork at node", step_keys, core.FORK_NODE,
        format_func=lambda k: f"{step_keys.index(k) + 1}. {k} — {by_key[k].status}",
        help="Or click a node in the graph",
    )
core.write_query_params({"run": run.id, "node": key})
step = by_key[key]
node, occurrence = step.node, step.occurrence
prefix = f"fk:{run.id}:{key}"

st.caption(f"Recorded reason for {md(key)}:")
st.text(step.reason or "—")

try:
    recorded_inputs = dict(step.inputs)
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
    reads = pipeline.reads(node)
    if not reads:
        st.caption("This node reads nothing from the state.")
    for field in reads:
        originals[field] = recorded_inputs.get(field)
        kinds[field], raws[field] = editors.render_value_widget(
            st, field, originals[field], f"{prefix}:edit:{field}",
            help=None if field in recorded_inputs else "not recorded in this step's inputs",
        )

pkinds, praws, poriginals = {}, {}, {}
with right:
    st.subheader("Its parameters")
    defaults = pipeline.params(node)
    recorded = dict(step.params or {})
    names = list(defaults) + sorted(n for n in pipeline.param_names(node) if n not in defaults)
    shown = [n for n in names if n in recorded or n in defaults]
    if not shown:
        st.caption("This node has no parameters.")
    for name in shown:
        value = recorded.get(name, defaults.get(name))
        poriginals[name] = value
        wkey = f"{prefix}:param:{name}"
        kind = editors.kind_of(value)
        if kind == editors.INT and editors.kind_of(defaults.get(name)) == editors.FLOAT:
            kind = editors.FLOAT  # canonical JSON records 0.0 as 0: keep the float widget
        pkinds[name], praws[name] = editors.render_value_widget(st, name, value, wkey, kind=kind, name=name)
        if name == "temperature" and pkinds[name] in (editors.FLOAT, editors.INT):
            default_t = float(core.ui_settings()["default_temperature"])

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
    st.error(f"Field **{md(e.field)}** {md(e.message)} Nothing will run until it is fixed.")
if not edit and not params:
    st.info(
        "No changes: a replay will serve every node from the cache (0 tokens, identical output "
        "hashes) — useful to prove the cache is sound."
    )
else:
    st.json(fmt.to_jsonable({"at": key, "edit": edit, "params": params}))
    for field, value in {**edit, **params}.items():
        before = originals.get(field, poriginals.get(field))
        if isinstance(before, str) and isinstance(value, str):
            text = "\n".join(difflib.unified_diff(
                before.splitlines(), value.splitlines(), f"recorded/{field}", f"edited/{field}", lineterm="", n=1,
            ))
            if text:
                st.code(text, language="diff")

side_nodes = [n for n in pipeline.actions if pipeline.policy(n).determinism == "side-effect"]
allow = st.toggle("Allow side effects", value=False, key=f"{prefix}:side",
                  help="Off: side-effect nodes are dry-run (recorded, not performed)")
if allow:
    st.warning(
        "Side effects are ON: "
        + (", ".join(f"**{md(n)}**" for n in side_nodes) or "side-effect nodes")
        + " will really be performed if the replay reaches them (messages sent, files written)."
    )
elif side_nodes:
    st.caption("Side-effect nodes (" + ", ".join(md(n) for n in side_nodes) + ") will be dry-run.")

# --- replay ------------------------------------------------------------------------------------
if st.button("▶ Replay", type="primary"):
    if errors:
        st.error("Nothing was run or written: fix the fields above first.")
    else:
        inherited = step_keys[: step_keys.index(key)]
        with st.status(f"Replaying from {key}…", expanded=True) as status:
            if inherited:
                status.markdown(fmt.status_dot("inherited") + " inherited from the parent: " + ", ".join(md(k) for k in inherited))

            def on_step(s):
                icon = fmt.status_dot(s.status)
                status.markdown(
                    f"{icon} **{md(fmt.step_key(s.node, s.occurrence))}** — {md(s.status)} · "
                    f"{fmt.fmt_tokens(s.tokens)} tokens"
                    + (f" (saved {fmt.fmt_tokens(s.tokens_saved)})" if s.tokens_saved else "")
                )

            try:
                forked = rw.fork(run.id, at=node, edit=edit or None, params=params or None,
                                 allow_side_effects=bool(allow), occurrence=occurrence, on_step=on_step)
            except Exception as e:  # RewindError names the problem; anything else is still shown
                forked = None
                status.update(label="Replay refused", state="error")
                st.error(md(e))
            if forked is not None:
                status.update(
                    label=f"Fork {forked.id} {forked.status}: {fmt.fmt_tokens(forked.total_tokens)} "
                          f"tokens spent, {fmt.fmt_tokens(forked.tokens_saved)} saved",
                    state="complete" if forked.status == "completed" else "error", expanded=True,
                )
        if forked is not None:
            core.bump()
            st.session_state[core.LAST_FORK] = {
                "id": forked.id, "parent": run.id, "at": key, "status": forked.status,
                "spent": forked.total_tokens, "saved": forked.tokens_saved,
                "original": run.total_tokens, "error": forked.error,
                "executed": [fmt.step_key(s.node, s.occurrence) for s in forked.steps if s.status == "executed"],
                "cached": [fmt.step_key(s.node, s.occurrence) for s in forked.steps if s.status == "cached"],
                "dry_run": [fmt.step_key(s.node, s.occurrence) for s in forked.steps if s.status == "dry-run"],
            }
            core.open_diff(run.id, forked.id)

last = st.session_state.get(core.LAST_FORK)
if last:
    st.divider()
    st.subheader(f"Last replay: fork {last['id']}")
    st.caption(f"of run {md(last['parent'])} at {md(last['at'])} · {md(last['status'])}")
    m = st.columns(4)
    m[0].metric("Tokens spent", fmt.fmt_tokens(last["spent"]))
    m[1].metric("Tokens saved (cache hits)", fmt.fmt_tokens(last["saved"]))
    m[2].metric("Original run spent", fmt.fmt_tokens(last["original"]))
    m[3].metric("Nodes re-executed", len(last["executed"]))
    st.caption(
        "re-executed: " + (", ".join(md(k) for k in last["executed"]) or "none")
        + " · cached: " + (", ".join(md(k) for k in last["cached"]) or "none")
        + " · dry-run: " + (", ".join(md(k) for k in last["dry_run"]) or "none")
    )
    if last.get("error"):
        st.code(last["error"], language=None)
    b1, b2, _ = st.columns([1, 1, 3])
    if b1.button("Open the diff", icon=":material/difference:", type="primary", width="stretch"):
        core.open_diff(last["parent"], last["id"])
        st.switch_page(core.DIFF_PAGE, query_params={"a": last["parent"], "b": last["id"]})
    if b2.button("Open the fork", icon=":material/list:", width="stretch"):
        core.select_run(last["id"])
        st.switch_page(core.RUNS_PAGE, query_params={"run": last["id"]})
