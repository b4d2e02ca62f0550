"""Diff: align two trajectories, say where they diverged and why, show what changed, what it
cost, and (optionally) whether a divergence is beyond the model's own noise. What each part
shows is computed in rewind_ui/diff_view.py; this file lays it out."""

import streamlit as st

import rewind
from rewind import costs
from rewind_ui import calls_view, charts, core, fmt, progress, selection, shell, textview
from rewind_ui import diff_view as view
from rewind_ui import graph as ug
from rewind_ui.picker import graph_picker

shell.page_guard()  # before anything is drawn: see rewind_ui/shell.py

rw = core.get_rw()
md = fmt.md_escape

st.title("Diff")

# --- choosing A and B --------------------------------------------------------------------------
link = selection.deep_link(("a", "b"))
if link:
    if link.get("a"):
        st.session_state[selection.DIFF_A] = link["a"]
    if link.get("b"):
        st.session_state[selection.DIFF_B] = link["b"]


def _partner(run_id: str, want: str) -> str | None:
    """The run to set beside `run_id` when a link names one side only: for B, its newest fork;
    for A, the run it was forked from; else the newest other run."""
    run = core.find_run(run_id)
    if run is not None:
        if want == "b":
            kids = core.lineage(run_id)["children"]
            if kids:
                return kids[-1]["id"]
        elif run.parent_id and core.visible(run.parent_id):
            return run.parent_id
    return next((r["id"] for r in core.runs_page(limit=2) if r["id"] != run_id), None)


have_a, have_b = st.session_state.get(selection.DIFF_A), st.session_state.get(selection.DIFF_B)
if have_a and not have_b:  # a link with only a= keeps that A (a default pair would replace it)
    st.session_state[selection.DIFF_B] = _partner(have_a, "b")
elif have_b and not have_a:
    st.session_state[selection.DIFF_A] = _partner(have_b, "a")
elif not have_a and not have_b:
    forks = core.runs_page(forks_only=True, limit=1)
    a0, b0 = view.default_pair(forks[0] if forks else None, [] if forks else core.runs_page(limit=2))
    if a0 and b0:
        st.session_state[selection.DIFF_A], st.session_state[selection.DIFF_B] = a0, b0

recent = core.runs_page(limit=100)
labels = {r["id"]: fmt.run_label(r) for r in recent}
a_id, b_id = st.session_state.get(selection.DIFF_A), st.session_state.get(selection.DIFF_B)
if not a_id or not b_id:
    st.info("A diff needs two runs: create a run and fork it first.")
    st.page_link(shell.RUNS_PAGE, label="Go to Runs", icon=":material/list:")
    st.stop()
options = list(dict.fromkeys([a_id, b_id, *labels]))


def _swap() -> None:
    st.session_state[selection.DIFF_A], st.session_state[selection.DIFF_B] = (
        st.session_state.get(selection.DIFF_B), st.session_state.get(selection.DIFF_A))


c1, c2, c3 = st.columns([4, 4, 1], vertical_alignment="bottom")
with c1:
    a_id = selection.bound_selectbox("A (original)", options, selection.DIFF_A,
                                     format_func=lambda i: labels.get(i, i), accept_new_options=True)
with c2:
    b_id = selection.bound_selectbox("B (replay)", options, selection.DIFF_B,
                                     format_func=lambda i: labels.get(i, i), accept_new_options=True)
c3.button("⇄ Swap", on_click=_swap, width="stretch")
selection.write_query_params({"a": a_id, "b": b_id})

run_a, run_b = core.find_run(a_id), core.find_run(b_id)
missing = [x for x, r in ((a_id, run_a), (b_id, run_b)) if r is None]
if missing:
    st.error("No such run in this store: " + ", ".join(md(m) for m in missing))
    st.stop()

try:
    d = core.diff(a_id, b_id)
except rewind.RewindError as e:
    st.error(md(e))
    st.stop()

# a noise-band diff, when one was computed for this pair, replaces the plain one
noise_key = f"noise:{a_id}:{b_id}"
noisy = st.session_state.get(noise_key)
if noisy is not None:
    d = noisy["diff"]

# --- verdict -----------------------------------------------------------------------------------
kind, text = view.verdict(d)
if kind == "success":
    st.success(icon=":material/check_circle:", body=text)
else:
    st.warning(icon=":material/call_split:", body=text)
fork_caption = view.fork_caption(run_a, run_b)
if fork_caption:
    st.caption(fork_caption)
headline = view.metrics(d)
for row in (headline[:4], headline[4:]):  # four to a row: every label whole at 1280 px
    for col, (label, value, delta, help_text) in zip(st.columns(4), row):
        col.metric(label, value, help=help_text,
                   **({"delta": delta, "delta_color": "inverse"} if delta is not None else {}))
st.caption(view.dollars_caption(costs.run_costs(run_a), costs.run_costs(run_b)))

# --- graph and rows ----------------------------------------------------------------------------
rows_by_key = view.rows_by_key(d)
shown = view.shown_statuses(run_a, run_b)
nodes, edges = core.graph_of(run_b)
focus, _ = graph_picker(
    ug.diff_graph_spec(nodes, edges, d.rows, shown),
    (ug.STATUS_COLORS, ug.STATUS_HELP, ug.DIFF_MARKS, ug.DIFF_SIDES_HELP), view.choices(d),
    f"diff_node:{a_id}:{b_id}", f"_ag_diff_{a_id}_{b_id}", "Node", default=view.first_diverged(d),
    empty="Neither run has steps.", where="in these runs",
    fork_point=run_b.fork_node if run_b.parent_id == run_a.id else None,
)

# a static table wraps its text: every reason is on screen at 1280 px, no horizontal scrolling
# (st.table renders cells as markdown, hence md_rows)
st.table(fmt.md_rows(view.table(d, with_noise=noisy is not None, shown=shown)), hide_index=True)

# --- one node side by side ---------------------------------------------------------------------
if focus:
    r = rows_by_key[focus]
    st.markdown(f"#### {md(focus)} · {md(ug.diff_outcome(r))}")
    if r.noise:
        (st.warning if r.noise == "beyond noise" else st.info)(f"Noise band: {md(r.noise)}")
        if r.noise_detail:
            st.table(fmt.md_rows(calls_view.noise_detail_rows(r.noise_detail)), hide_index=True)
    outputs = {}
    for col, (label, run, h, status, reason) in zip(st.columns(2), view.sides(r, run_a, run_b)):
        with col:
            side = label.lower()
            st.markdown(f"**{label}** · {md(shown.get((side, r.node, r.occurrence), status) or 'absent')}")
            st.text(reason or "—")
            st.code(h or "—", language=None, wrap_lines=True)  # a whole hash, never cut at the edge
            try:
                outputs[side] = run.step(r.node, r.occurrence).outputs if status else None
            except (KeyError, rewind.RewindError) as e:
                outputs[side] = None
                st.caption(f"outputs unavailable: {md(e)}")
            if outputs[side] is not None:
                textview.show_fields(outputs[side])
    if r.text_diffs:
        st.markdown("**Text diff** · the changed words marked: A's struck through on red, B's on green")
        for name, html, unified in view.text_diff_views(r, outputs.get("a"), outputs.get("b")):
            st.caption(md(name))
            if html:
                st.html(html)
            # the unified diff too (to copy), wrapped: an edit in a long line stays on screen
            with st.expander("Unified diff", expanded=html is None):
                st.code(unified or "(whitespace only)", language="diff", wrap_lines=True)
    if r.field_diffs:
        st.markdown("**Field-level diff**")
        st.dataframe(view.field_rows(r), hide_index=True, width="stretch")
    if r.identical is False and not r.text_diffs and not r.field_diffs:
        st.caption("The output hashes differ but no field-level change could be listed (a failed "
                   "step, a missing side, or an ignored field).")

# --- cost and latency --------------------------------------------------------------------------
keys = list(rows_by_key)
c1, c2 = st.columns(2)
a_cost, b_cost, cost_delta = view.cost_series(d)
c1.plotly_chart(charts.compare_bars("Trajectory cost per node (Δ only where inputs changed)", keys, a_cost,
                                    b_cost, "tokens", delta=cost_delta), width="stretch", key="diff_cost")
c2.plotly_chart(charts.compare_bars(f"Latency per node ({fmt.LATENCY_UNIT})", keys, *view.latency_series(d),
                                    fmt.LATENCY_UNIT), width="stretch", key="diff_latency")

# --- noise band --------------------------------------------------------------------------------
with st.expander("Noise band: is a divergence beyond the model's own jitter?", expanded=noisy is not None):
    st.caption(
        "Re-samples each re-executed node of B k times on A's inputs (spends tokens, writes "
        "nothing) and marks each diverged node within or beyond that noise."
    )
    k = st.number_input("Samples (k)", min_value=1, max_value=20, value=3, step=1, key="noise_k")
    n1, n2 = st.columns([1, 4])
    if n1.button("Compute noise band"):
        bar = st.progress(0.0, text="Sampling…")
        try:
            nd = core.noise_diff(a_id, b_id, int(k), on_progress=progress.reporter(bar, "Sampling"))
        except Exception as e:
            bar.empty()
            st.error(f"Noise band failed: {md(e)}")
        else:
            bar.empty()
            st.session_state[noise_key] = {"k": int(k), "diff": nd}
            st.rerun()
    if noisy is not None:
        if n2.button("Clear noise band"):
            st.session_state.pop(noise_key, None)
            st.rerun()
        st.dataframe(view.noise_rows(d, noisy["k"]), hide_index=True, width="stretch")
