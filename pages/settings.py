"""Settings: where the data lives, this session's model provider and default temperature,
and (admins only) the cache. Model settings apply to this browser session only
(rewind_ui/model_settings.py): nothing here changes another visitor's settings or the process
environment, and the server's API key never goes to a base URL entered here."""

import os

import streamlit as st

import rewind
from rewind_ui import access, core, fmt, shell
from rewind_ui import model_settings as ms

shell.page_guard()  # before anything is drawn: see rewind_ui/shell.py

rw = core.get_rw()
viewer = access.viewer()
admin = core.can_maintain()
md = fmt.md_escape

st.title("Settings")

# --- data --------------------------------------------------------------------------------------
st.subheader("Data")
url = core.db_url()
if admin:
    backend = "PostgreSQL" if url.startswith(("postgresql://", "postgres://")) else "SQLite"
    st.caption(f"{backend} store (from {'REWIND_DB' if os.environ.get('REWIND_DB') else 'the default ./rewind.db'})")
    st.code(fmt.mask_url(url), language=None)
if viewer.signed_in:
    st.caption(f"Runs of every owner ({md(viewer.owner)} is an admin)" if viewer.admin
               else f"Your runs ({md(viewer.owner)}): other users' runs are not shown to you")
d1, d2 = st.columns(2)
d1.metric("Runs", fmt.fmt_count(core.runs_count()))
d2.metric("Forks", fmt.fmt_count(core.runs_count(forks_only=True)))

# --- model provider (this session) -------------------------------------------------------------
st.subheader("Model provider")
st.caption("These settings apply to this browser session only: other visitors keep theirs.")
cur = ms.current()
info = ms.provider_info()
if cur["own_key"]:
    key_label = "yours"
elif cur["base_url"]:
    key_label = "none"  # a base URL chosen here never gets the server's key
else:
    key_label = "present" if info.get("key_present") else "absent"
p1, p2, p3, p4 = st.columns(4)
p1.metric("Provider", info.get("provider", "?"))
p2.metric("Model", info.get("model", "?"))
p3.metric("API key", key_label,
          help="present: the server's OPENAI_API_KEY, sent only to the server's own base URL. "
               "yours: the key you gave for this session. none: a base URL chosen here gets no "
               "server key. Never shown, never stored.")
p4.metric("Simulator latency", fmt.fmt_ms(info.get("simulator_latency_ms", 0)))
st.caption("Base URL" + (" (chosen in this session)" if cur["base_url"] else " (the server's)"))
st.code(fmt.mask_url(info.get("base_url", "")), language=None)
if not ms.supported():
    st.warning("This Rewind core cannot scope model settings to one session, so they cannot be "
               "changed here; the server's environment decides (OPENAI_BASE_URL, REWIND_MODEL).")
with st.form("provider_form", clear_on_submit=True):
    choice = st.radio(
        "Provider", list(ms.PROVIDERS), horizontal=True, index=list(ms.PROVIDERS).index(cur["provider"]),
        help="auto: the server's choice (the simulator unless OPENAI_API_KEY / OPENAI_BASE_URL are set)",
    )
    base_url = st.text_input("OpenAI-compatible base URL", value=ms.shown_base_url(),
                             placeholder="empty: the server's base URL")
    model = st.text_input("Model", value=cur["model"], placeholder="e.g. gpt-4o-mini (empty: the default)")
    own_key = st.text_input(
        "Your API key for this session (optional)", type="password", value="",
        placeholder="kept for this session only, never shown again" + (" (one is set)" if cur["own_key"] else ""),
        help="The server's key is only ever sent to the server's own base URL. A base URL you "
             "enter here gets your key, or none.",
    )
    submitted = st.form_submit_button("Apply", disabled=not ms.supported())
if submitted:
    try:
        ms.apply(choice, base_url, model, api_key=own_key)
    except ms.SettingsError as e:
        st.error(md(e))
    else:
        st.rerun()  # redraw the metrics above with this session's new settings
del own_key  # the key lives in the session's settings only, never in a page variable
b1, b2, _ = st.columns([1, 1, 3])
if cur["own_key"]:
    b1.button("Forget my key", icon=":material/key_off:", on_click=ms.forget_key)
if ms.customised():
    b2.button("Use the server's settings", icon=":material/restart_alt:", on_click=ms.reset)

# --- default temperature (this session) --------------------------------------------------------
st.subheader("Default temperature")
if "set_temperature" not in st.session_state:
    st.session_state["set_temperature"] = ms.default_temperature()
temp = st.slider("Temperature offered on the Fork page for nodes with a `temperature` parameter",
                 min_value=0.0, max_value=2.0, step=0.05, key="set_temperature")
ms.set_default_temperature(temp)
st.caption("A fork sends a temperature only when you apply it to a node: the recorded value stays "
           "the default, so an untouched fork remains a pure cache replay.")

# --- cache and gc (admins only: they touch every owner's data) ---------------------------------
st.subheader("Cache")
if not admin:
    st.caption("Each user's cache entries are their own (another user's run never serves yours); "
               f"the admins ({access.ADMINS_ENV}) maintain the store.")
else:
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
            would = core.purge_cache(float(days), dry_run=True)
        except rewind.RewindError as e:
            would = None
            st.error(md(e))
        if would is not None:
            st.caption(f"{fmt.fmt_count(would)} cache entries (node and tool) are older than {days:g} days.")
        confirm = st.checkbox("I understand these entries will be deleted: later replays of those "
                              "nodes will execute (and spend tokens) again.", key="purge_confirm")

        def _purge(days=float(days)) -> None:
            try:
                n = core.purge_cache(days)
            except (rewind.RewindError, access.AccessDenied) as e:
                st.session_state["purge_msg"] = ("error", str(e))
            else:
                core.bump()
                st.session_state["purge_msg"] = ("ok", f"Purged {fmt.fmt_count(n)} cache entries older than {days:g} days.")
            st.session_state["purge_confirm"] = False

        st.button("Purge", icon=":material/delete:", disabled=not confirm or not would, on_click=_purge)
        msg = st.session_state.pop("purge_msg", None)
        if msg:
            (st.success if msg[0] == "ok" else st.error)(md(msg[1]))

    with st.container(border=True):
        st.markdown("**Garbage collection**: old cache entries, runs created before the cutoff "
                    "(every owner's), then stored values nothing refers to")
        gdays = st.number_input("Older than (days)", min_value=0.0, value=90.0, step=1.0, key="gc_days")
        try:
            plan = core.gc(float(gdays), dry_run=True)
        except rewind.RewindError as e:
            plan = None
            st.error(md(e))
        if plan is not None:
            st.caption(f"Would delete {fmt.fmt_count(plan.get('runs', 0))} runs, "
                       f"{fmt.fmt_count(plan.get('cache_entries', 0) + plan.get('tool_entries', 0))} cache "
                       f"entries and {fmt.fmt_count(plan.get('blobs', 0))} stored values "
                       f"({fmt.fmt_bytes(plan.get('bytes', 0))}).")
        gconfirm = st.checkbox("I understand these runs and values will be deleted for every user.",
                               key="gc_confirm")

        def _gc(days=float(gdays)) -> None:
            try:
                done = core.gc(days)
            except (rewind.RewindError, access.AccessDenied) as e:
                st.session_state["gc_msg"] = ("error", str(e))
            else:
                core.bump()
                st.session_state["gc_msg"] = ("ok", f"gc deleted {fmt.fmt_count(done.get('runs', 0))} runs and "
                                              f"{fmt.fmt_count(done.get('blobs', 0))} stored values.")
            st.session_state["gc_confirm"] = False

        st.button("Run gc", icon=":material/delete_sweep:", disabled=not gconfirm, on_click=_gc)
        gmsg = st.session_state.pop("gc_msg", None)
        if gmsg:
            (st.success if gmsg[0] == "ok" else st.error)(md(gmsg[1]))

if core.demo_error():
    with st.expander("Demo pipeline"):
        st.caption(f"{md(core.DEMO_MODULE)} could not be loaded:")
        st.code(core.demo_error(), language=None)
