"""Settings: where the data lives, the model provider, the default temperature, the cache."""

import os

import streamlit as st

import rewind
from rewind_ui import core, fmt, shell

shell.page_guard()  # before anything is drawn: see rewind_ui/shell.py

rw = core.get_rw()
md = fmt.md_escape

st.title("Settings")

# --- data --------------------------------------------------------------------------------------
st.subheader("Data")
url = core.db_url()
backend = "PostgreSQL" if url.startswith(("postgresql://", "postgres://")) else "SQLite"
st.caption(f"{backend} store (from {'REWIND_DB' if os.environ.get('REWIND_DB') else 'the default ./rewind.db'})")
st.code(fmt.mask_url(url), language=None)
d1, d2 = st.columns(2)
d1.metric("Runs", fmt.fmt_count(core.runs_count()))
d2.metric("Forks", fmt.fmt_count(core.runs_count(forks_only=True)))

# --- model provider ----------------------------------------------------------------------------
st.subheader("Model provider")
info = rewind.llm.provider_info()
p1, p2, p3, p4 = st.columns(4)
p1.metric("Provider", info.get("provider", "?"))
p2.metric("Model", info.get("model", "?"))
p3.metric("API key", "present" if info.get("key_present") else "absent",
          help="Read from OPENAI_API_KEY in the environment of the dashboard process only; "
               "never shown, never stored.")
p4.metric("Simulator latency", fmt.fmt_ms(info.get("simulator_latency_ms", 0)))
st.caption("Base URL")
st.code(fmt.mask_url(info.get("base_url", "")), language=None)
with st.form("provider_form"):
    choice = st.radio(
        "Provider", ["auto", "simulator", "openai"], horizontal=True,
        index=["auto", "simulator", "openai"].index(
            info.get("provider") if (info.get("configured") or {}).get("provider") else "auto"),
        help="auto: the simulator unless OPENAI_API_KEY / OPENAI_BASE_URL are set",
    )
    base_url = st.text_input("OpenAI-compatible base URL", placeholder="https://api.openai.com/v1 (empty: from the environment)")
    model = st.text_input("Model", placeholder="e.g. gpt-4o-mini (empty: the default)")
    st.caption("The API key is never entered here: set OPENAI_API_KEY in the environment that runs "
               "`streamlit run app.py`.")
    if st.form_submit_button("Apply"):
        try:
            new = rewind.llm.configure(provider=choice, base_url=base_url.strip(), model=model.strip())
        except rewind.RewindError as e:
            st.error(md(e))
        else:
            st.success(f"Provider: {md(new.get('provider'))} · model {md(new.get('model'))} · key "
                       f"{'present' if new.get('key_present') else 'absent'}")

# --- default temperature -----------------------------------------------------------------------
st.subheader("Default temperature")
settings = core.ui_settings()
if "set_temperature" not in st.session_state:
    st.session_state["set_temperature"] = float(settings["default_temperature"])
temp = st.slider("Temperature offered on the Fork page for nodes with a `temperature` parameter",
                 min_value=0.0, max_value=2.0, step=0.05, key="set_temperature")
settings["default_temperature"] = float(temp)
st.caption("A fork sends a temperature only when you apply it to a node: the recorded value stays "
           "the default, so an untouched fork remains a pure cache replay.")

# --- cache -------------------------------------------------------------------------------------
st.subheader("Cache")
stats = core.cache_stats()
c = st.columns(5)
c[0].metric("Node entries", fmt.fmt_count(stats.get("entries", 0)))
c[1].metric("Hits served", fmt.fmt_count(stats.get("hits", 0)))
c[2].metric("Tool entries", fmt.fmt_count(stats.get("tool_entries", 0)),
            help=f"{fmt.fmt_count(stats.get('tool_hits', 0))} tool hits")
c[3].metric("Stored values", fmt.fmt_count(stats.get("blobs", 0)))
c[4].metric("Size", fmt.fmt_bytes(stats.get("blob_bytes", 0)), help="content-addressed values (blobs)")
if stats.get("oldest"):
    st.caption(f"Oldest node entry: {fmt.fmt_ts(stats['oldest'])}")

with st.container(border=True):
    st.markdown("**Purge old cache entries**")
    days = st.number_input("Older than (days)", min_value=0.0, value=30.0, step=1.0, key="purge_days")
    try:
        would = rw.purge_cache(float(days), dry_run=True)
    except rewind.RewindError as e:
        would = None
        st.error(md(e))
    if would is not None:
        st.caption(f"{fmt.fmt_count(would)} cache entries (node and tool) are older than {days:g} days.")
    confirm = st.checkbox("I understand these entries will be deleted: later replays of those "
                          "nodes will execute (and spend tokens) again.", key="purge_confirm")

    def _purge(days=float(days)) -> None:
        try:
            n = rw.purge_cache(days)
        except rewind.RewindError as e:
            st.session_state["purge_msg"] = ("error", str(e))
        else:
            core.bump()
            st.session_state["purge_msg"] = ("ok", f"Purged {fmt.fmt_count(n)} cache entries older than {days:g} days.")
        st.session_state["purge_confirm"] = False

    st.button("Purge", icon=":material/delete:", disabled=not confirm or not would, on_click=_purge)
    msg = st.session_state.pop("purge_msg", None)
    if msg:
        (st.success if msg[0] == "ok" else st.error)(md(msg[1]))

if core.demo_error():
    with st.expander("Demo pipeline"):
        st.caption(f"{md(core.DEMO_MODULE)} could not be loaded:")
        st.code(core.demo_error(), language=None)
