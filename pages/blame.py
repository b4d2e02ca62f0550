"""Blame: which step decided a failed run? Pick the run and what success means (a field of the
final state and a value); Rewind re-rolls the run from its steps (forks that re-sample) with
live progress, then shows each step's success rate with its 95% interval, the decisive step,
the graph coloured by verdict, and every trial linked to its diff against the run. Everything
goes through `rw.blame`; what each part shows is computed in rewind_ui/blame_view.py."""

import streamlit as st

import rewind
from rewind.analysis.blame import final_state
from rewind_ui import blame_view as view
from rewind_ui import core, fmt, selection, shell
from rewind_ui import graph as ug
from rewind_ui.picker import draw_graph

shell.page_guard()  # before anything is drawn: see rewind_ui/shell.py

rw = core.get_rw()
md = fmt.md_escape
REPORT = "blame_report"

st.title("Blame")
st.caption("This run failed: at which step was the failure locked in? Each trial re-rolls the "
           "run from a step (what came before is inherited, the re-sampled nodes run afresh); "
           "the decisive step is the latest one from which re-rolling clearly recovers success.")

link = selection.deep_link(("run",))
recent = core.runs_page(limit=100)
if not recent:
    st.info("No runs yet: create one on the Runs page first.")
    st.page_link(shell.RUNS_PAGE, label="Go to Runs", icon=":material/list:")
    st.stop()
ids = [r["id"] for r in recent]
if link and link.get("run") and link["run"] in ids:
    st.session_state["blame_run"] = link["run"]
labels = {r["id"]: fmt.run_label(r) for r in recent}
run_id = st.selectbox("Run to blame", ids, format_func=lambda i: labels.get(i, i), key="blame_run")
run = core.get_run(run_id)
final = final_state(rw, run)  # what the outcome will judge

# --- what success means, and how hard to try ---------------------------------------------------
c1, c2, c3 = st.columns([2, 1, 3])
fields = sorted(final) or ["(no field)"]
field = c1.selectbox("Succeeded when the field", fields, key=f"blame_field:{run_id}")
op = c2.selectbox("…", [view.EQUALS, view.NOT_EQUALS], key="blame_op", label_visibility="hidden")
value_text = c3.text_input("this JSON value", key=f"blame_value:{run_id}:{field}",
                           help="JSON: true, 3, \"a string\", {\"valid\": true}")
if field in final:
    st.caption(f"In this run `{md(field)}` is `{md(fmt.json_text(final[field]), 200)}`.")

pipeline = core.find_pipeline(run.pipeline)
nodes = list(pipeline.actions) if pipeline else []
c1, c2, c3, c4 = st.columns([1, 1, 3, 1])
samples = c1.number_input("Samples a step", min_value=1, max_value=64, value=8, key="blame_samples",
                          help="16 tells a 75% recovery from none reliably")
strategy = c2.selectbox("Strategy", ["bisect", "each"], key="blame_strategy",
                        help="bisect searches for the boundary with fewer trials; each tries every step")
resample = c3.multiselect("Re-sample these nodes", nodes, default=[n for n in view.default_resample(run) if n in nodes],
                          key=f"blame_resample:{run_id}")
budget = c4.number_input("Token budget (0: none)", min_value=0, value=0, step=1000, key="blame_budget")
wider = st.toggle("Re-sample at a temperature of", key="blame_wider")
temperature = st.slider("temperature", 0.0, 2.0, 0.9, 0.1, key="blame_temperature",
                        label_visibility="collapsed", disabled=not wider)

refused = core.read_only_help("re-rolled")
if st.button("Blame", type="primary", icon=":material/troubleshoot:", disabled=refused is not None,
             help=refused):
    try:
        test = view.outcome(field, op, value_text or "null")
        with st.status("Re-rolling the run…", expanded=True) as status:
            bar = st.progress(0.0)

            def on_progress(done, total, where) -> None:
                bar.progress(min(done / max(total, 1), 1.0), text=f"{done} trials · {where}")

            st.session_state[REPORT] = rw.blame(
                run_id, test, samples=int(samples), strategy=strategy, resample=resample or None,
                params={"temperature": float(temperature)} if wider else None,
                budget_tokens=int(budget) or None, on_progress=on_progress)
            status.update(label="Done", state="complete", expanded=False)
        core.bump()  # the trials are new runs: other pages re-read
    except ValueError as e:
        st.error(md(e))
    except rewind.RewindError as e:
        st.error(md(e))

# --- the result ----------------------------------------------------------------------------------
report = st.session_state.get(REPORT)
if report is None or report.run_id != run_id:
    st.stop()
(st.success if report.decisive else st.info)(md(report.summary))
m1, m2, m3 = st.columns(3)
m1.metric("Trials", len(report.trial_runs))
m2.metric("Tokens spent", f"{report.tokens:,}")
m3.metric("Trying every step would cost", f"{report.tokens_each_estimate:,}")
if report.budget_exhausted:
    st.warning("The token budget ran out: the steps marked *not tried* were not re-rolled.")
if any(r.trials for r in report.steps):
    st.plotly_chart(view.rate_chart(report), width="stretch", key="blame_chart")
nodes_, edges = core.graph_of(run)
draw_graph(view.color_by_verdict(ug.run_graph_spec(nodes_, edges, run.steps), report), "blame_graph")
st.caption(" · ".join(f"{v}: {md(h)}" for v, h in view.VERDICT_HELP.items()))
st.dataframe(view.table_rows(report), hide_index=True, width="stretch", column_config={
    "Success rate": st.column_config.NumberColumn(format="%d%%"),
    "Diff": st.column_config.LinkColumn("Diff", display_text="last trial's diff"),
})
with st.expander(f"Every trial ({len(report.trial_runs)})"):
    for where, trial, href in view.trial_links(report):
        st.markdown(f"{md(where)} · [{trial}]({href})")
