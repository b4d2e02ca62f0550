"""Rewind dashboard: `streamlit run app.py`.

Runs on the embedded defaults: the SQLite file in `REWIND_DB` (else ./rewind.db) and the
offline model simulator. Pages: Runs, Fork, Diff, Settings. Deep links: `?run=ID&node=NAME`
opens a run, `?a=ID&b=ID` opens the diff of two runs.
"""

import streamlit as st

from rewind_ui import core

st.set_page_config(page_title="Rewind", page_icon="⏪", layout="wide")

runs = st.Page(core.RUNS_PAGE, title="Runs", icon=":material/list:", url_path="runs", default=True)
fork = st.Page(core.FORK_PAGE, title="Fork", icon=":material/call_split:", url_path="fork")
diff = st.Page(core.DIFF_PAGE, title="Diff", icon=":material/difference:", url_path="diff")
settings = st.Page(core.SETTINGS_PAGE, title="Settings", icon=":material/settings:", url_path="settings")

page = st.navigation([runs, fork, diff, settings])

if "_session_seen" not in st.session_state:
    # a new browser session reads fresh data (cached queries otherwise live a few seconds)
    st.session_state["_session_seen"] = True
    core.bump()

# `?a=…&b=…` on the default page is a diff link
if page.url_path == runs.url_path and st.query_params.get("a") and st.query_params.get("b") \
        and not st.query_params.get("run"):
    st.switch_page(diff, query_params={"a": st.query_params["a"], "b": st.query_params["b"]})

with st.sidebar:
    st.caption("Rewind · counterfactual replay for LLM pipelines")
    if st.button("↻ Refresh data", help="Re-read runs written by other processes"):
        core.bump()

page.run()
