"""Diff: align two trajectories, say where they diverged and why, show what changed, what it
cost, and (optionally) whether a divergence is beyond the model's own noise."""

import json

import plotly.graph_objects as go
import streamlit as st

import rewind
from rewind_ui import core, fmt
from rewind_ui import graph as ug
from rewind_ui import shell

shell.page_guard()  # before anything is drawn: see rewind_ui/shell.py

rw = core.get_rw()
md = fmt.md_escape

st.title("Diff")

# --- choosing A and B --------------------------------------------------------------------------
link = core.deep_link(("a", "b"))
if link:
    if link.get("a"):
        st.session_state[core.DIFF_A] = link["a"]
    if link.get("b"):
        st.session_state[core.DIFF_B] = link["b"]

if not st.session_state.get(core.DIFF_A) or not st.session_state.get(core.DIFF_B):
    # default: the newest fork against its parent, else the two newest runs
    forks = core.runs_page(forks_only=True, limit=1)
    if forks:
        st.session_state[core.DIFF_A] = forks[0]["parent_id"]
        st.session_state[core.DIFF_B] = forks[0]["id"]
    else:
        two = core.runs_page(limit=2)
        if len(two) == 2:
            st.session_state[core.DIFF_A], st.session_state[core.DIFF_B] = two[1]["id"], two[0]["id"]

recent = core.runs_page(limit=100)
labels = {r["id"]: core.run_label(r) for r in recent}
a_id, b_id = st.session_state.get(core.DIFF_A), st.session_state.get(core.DIFF_B)
if not a_id or not b_id:
    st.info("A diff needs two runs: create a run and fork it first.")
    st.page_link(core.RUNS_PAGE, label="Go to Runs", icon=":material/list:")
    st.stop()
options = list(dict.fromkeys([a_id, b_id, *labels]))


def _swap() -> None:
    st.session_state[core.DIFF_A], st.session_state[core.DIFF_B] = (
        st.session_state.get(core.DIFF_B), st.session_state.get(core.DIFF_A))


c1, c2, c3 = st.columns([5, 5, 1], vertical_alignment="bottom")
with c1:
    a_id = core.bound_selectbox("A (original)", options, core.DIFF_A, format_func=lambda i: labels.get(i, i),
                                accept_new_options=True)
with c2:
    b_id = core.bound_selectbox("B (replay)", options, core.DIFF_B, format_func=lambda i: labels.get(i, i),
                                accept_new_options=True)
c3.button("⇄ Swap", on_click=_swap, width="stretch")
core.write_query_params({"a": a_id, "b": b_id})

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
compared = [r for r in d.rows if r.identical is not None]
n_same = sum(1 for r in compared if r.identical)
if not d.diverged:
    st.success(icon=":material/check_circle:", body=f"Identical: {n_same} of {len(compared)} compared nodes have the same output hash.")
else:
    st.warning(
        icon=":material/call_split:", body=f"Diverged at **{md(d.first_divergence)}**: {n_same} of {len(compared)} compared nodes "
        f"identical, {len(d.diverged)} diverged."
    )
st.caption(f"Verdict: {md(d.verdict)}")
if run_b.parent_id == run_a.id:
    st.caption(f"B is a fork of A at **{md(run_b.fork_node)}**"
               + (f" · edit: {md(json.dumps(fmt.to_jsonable(run_b.edit)), 300)}" if run_b.edit else "")
               + (f" · params: {md(json.dumps(fmt.to_jsonable(run_b.params)), 300)}" if run_b.params else ""))
m = st.columns(5)
m[0].metric("Identical nodes", f"{n_same} / {len(compared)}")
m[1].metric("First divergence", d.first_divergence or "none")
m[2].metric("Tokens A", fmt.fmt_tokens(d.tokens_a))
m[3].metric("Tokens B", fmt.fmt_tokens(d.tokens_b), delta=int(d.tokens_b - d.tokens_a), delta_color="inverse")
m[4].metric("Saved by B (cache)", fmt.fmt_tokens(getattr(d, "tokens_saved_b", 0)))

# --- graph and rows ----------------------------------------------------------------------------
row_keys = [fmt.step_key(r.node, r.occurrence) for r in d.rows]
rows_by_key = dict(zip(row_keys, d.rows))
nodes, edges = core.graph_of(run_b)
clicked = ug.show_graph(st, ug.diff_graph_spec(nodes, edges, d.rows), f"_ag_diff_{a_id}_{b_id}")
st.markdown(ug.legend_html(ug.DIFF_COLORS, ug.DIFF_HELP), unsafe_allow_html=True)
focus_key = f"diff_node:{a_id}:{b_id}"
if st.session_state.get(focus_key) not in rows_by_key and row_keys:
    first = next((k for k, r in rows_by_key.items() if r.identical is False), row_keys[0])
    st.session_state[focus_key] = first
if clicked:
    hit = next((k for k in row_keys if fmt.parse_step_key(k)[0] == clicked), None)
    if hit:
        st.session_state[focus_key] = hit
scol, _ = st.columns([2, 2])
with scol:
    focus = core.bound_selectbox(
        "Node", row_keys, focus_key,
        format_func=lambda k: f"{k} — {ug.diff_outcome(rows_by_key[k])}",
        help="Or click a node in the graph",
    ) if row_keys else None

MARK = {True: "✓ same", False: "✗ differs", None: "– n/a"}
st.dataframe(
    [
        {"Node": k, "Match": MARK[r.identical], "Outcome": ug.diff_outcome(r),
         "A status": r.a_status or "—", "B status": r.b_status or "—",
         "A output hash": fmt.short_hash(r.a_hash, 12), "B output hash": fmt.short_hash(r.b_hash, 12),
         "A tokens": r.a_tokens, "B tokens": r.b_tokens,
         "A reason": r.a_reason, "B reason": r.b_reason,
         **({"Noise": r.noise or "—"} if noisy is not None else {})}
        for k, r in rows_by_key.items()
    ],
    hide_index=True, width="stretch",
    column_config={"A reason": st.column_config.TextColumn(width="medium"),
                   "B reason": st.column_config.TextColumn(width="medium")},
)

# --- one node side by side ---------------------------------------------------------------------
if focus:
    r = rows_by_key[focus]
    node, occ = r.node, r.occurrence
    st.markdown(f"#### {md(focus)} · {md(ug.diff_outcome(r))}")
    if r.noise:
        (st.warning if r.noise == "beyond noise" else st.info)(f"Noise band: {md(r.noise)}")
        if r.noise_detail:
            st.json(fmt.to_jsonable(r.noise_detail), expanded=False)
    ca, cb = st.columns(2)
    for col, label, run, h, status, reason in (
        (ca, "A", run_a, r.a_hash, r.a_status, r.a_reason),
        (cb, "B", run_b, r.b_hash, r.b_status, r.b_reason),
    ):
        with col:
            st.markdown(f"**{label}** · {md(status or 'absent')}")
            st.text(reason or "—")
            st.code(h or "—", language=None)
            try:
                outputs = run.step(node, occ).outputs if status else None
            except (KeyError, rewind.RewindError) as e:
                outputs = None
                st.caption(f"outputs unavailable: {md(e)}")
            if outputs is not None:
                st.json(fmt.to_jsonable(outputs), expanded=2)
    if r.text_diffs:
        st.markdown("**Text diff**")
        for field, text in r.text_diffs.items():
            st.caption(md(field))
            st.code(text or "(whitespace only)", language="diff")
    if r.field_diffs:
        st.markdown("**Field-level diff**")
        flat = []
        for field, changes in r.field_diffs.items():
            for ch in changes:
                flat.append({
                    "Path": ch.get("path"), "Change": ch.get("change"),
                    "A": json.dumps(fmt.to_jsonable(ch.get("a")), ensure_ascii=False)[:500],
                    "B": json.dumps(fmt.to_jsonable(ch.get("b")), ensure_ascii=False)[:500],
                })
        st.dataframe(flat, hide_index=True, width="stretch")
    if r.identical is False and not r.text_diffs and not r.field_diffs:
        st.caption("The output hashes differ but no field-level change could be listed (a failed "
                   "step, a missing side, or an ignored field).")

# --- cost and latency --------------------------------------------------------------------------
c1, c2 = st.columns(2)
a_tok = [r.a_tokens for r in d.rows]
b_tok = [r.b_tokens for r in d.rows]
fig = go.Figure()
fig.add_bar(name="A (original)", x=row_keys, y=a_tok, marker_color="#90a4ae")
fig.add_bar(name="B (replay)", x=row_keys, y=b_tok, marker_color="#1565c0")
fig.add_bar(name="delta (B − A)", x=row_keys, y=[b - a for a, b in zip(a_tok, b_tok)],
            marker_color=["#2e7d32" if b <= a else "#c62828" for a, b in zip(a_tok, b_tok)])
fig.update_layout(title="Tokens per node", barmode="group", height=320,
                  margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.2))
c1.plotly_chart(fig, width="stretch", key="diff_cost")
fig2 = go.Figure()
fig2.add_bar(name="A", x=row_keys, y=[round(r.a_latency_ms, 1) for r in d.rows], marker_color="#90a4ae")
fig2.add_bar(name="B", x=row_keys, y=[round(r.b_latency_ms, 1) for r in d.rows], marker_color="#1565c0")
fig2.update_layout(title="Latency per node (ms)", barmode="group", height=320,
                   margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.2))
c2.plotly_chart(fig2, width="stretch", key="diff_latency")

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

        def on_progress(done, total=None, node=None, *rest):
            frac = (done / total) if total else 0.0
            bar.progress(min(1.0, max(0.0, float(frac))), text=f"Sampling {node or ''} ({done}/{total or '?'})")

        try:
            nd = rw.diff(a_id, b_id, noise_samples=int(k), on_progress=on_progress)
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
        marked = [(fmt.step_key(r.node, r.occurrence), r.noise) for r in d.rows if r.identical is False]
        st.dataframe([{"Node": k_, "Noise (k=" + str(noisy["k"]) + ")": v or "—"} for k_, v in marked],
                     hide_index=True, width="stretch")
