"""The app shell: the titled pages (Runs, Fork, Diff, Batch, Settings), the navigation, the page config and the sidebar, in
one place for app.py, plus the guard every page file calls first.

Why the guard: Streamlit still supports its legacy multipage mode, in which every script in a
`pages/` folder beside the main script is a page of its own. The server decides once, when its
first session starts, whether it is in that mode (it is, because the design keeps a top-level
`pages/`), and leaves it only when some script run calls `st.navigation`. Until then a request
for `/diff` runs `pages/diff.py` *directly*, without app.py: no `st.navigation` (lowercase file
names in the sidebar), no wide layout, no Refresh button, and for every later session too,
until someone happens to open `/` first. `client.showSidebarNavigation = false` does not help:
it only hides the legacy menu, the page still runs without app.py, and it also hides the
navigation app.py draws. So a page that finds itself running outside app.py calls
the app shell itself: its `st.navigation` switches the whole server out of the legacy mode and
runs the same page inside the shell, in this very run (so the query string and any widget
event of the run are kept), exactly as the legacy mode runs app.py for `/`.
"""

from __future__ import annotations

import threading
from typing import Optional

import streamlit as st

import rewind

from . import access, core, fmt, model_settings, selection

RUNS_PAGE = "pages/runs.py"
FORK_PAGE = "pages/fork.py"
DIFF_PAGE = "pages/diff.py"
BATCH_PAGE = "pages/batch.py"
BLAME_PAGE = "pages/blame.py"
SETTINGS_PAGE = "pages/settings.py"

PAGE_TITLE = "Rewind"
PAGE_ICON = "⏪"

# (script, title, icon, url path); the first is the default page
PAGES = (
    (RUNS_PAGE, "Runs", ":material/list:", "runs"),
    (FORK_PAGE, "Fork", ":material/call_split:", "fork"),
    (DIFF_PAGE, "Diff", ":material/difference:", "diff"),
    (BATCH_PAGE, "Batch", ":material/dynamic_feed:", "batch"),
    (BLAME_PAGE, "Blame", ":material/troubleshoot:", "blame"),
    (SETTINGS_PAGE, "Settings", ":material/settings:", "settings"),
)
# Streamlit serves the default page at `/` only, and names it by a hash of its url path: the
# default page gets an internal path nobody links to, so that `/runs?…` can be a hidden alias
_DEFAULT_INTERNAL_PATH = "home"

# set while app.py runs a page: a page script running without it was started by the legacy mode
_inside = threading.local()


def pages() -> list:
    """The titled pages (Runs is the default, at `/`), then the hidden `/runs` alias."""
    listed = [st.Page(path, title=title, icon=icon, default=i == 0,
                      url_path=_DEFAULT_INTERNAL_PATH if i == 0 else url)
              for i, (path, title, icon, url) in enumerate(PAGES)]
    runs = listed[0]

    def runs_alias() -> None:
        st.switch_page(runs, query_params=st.query_params.to_dict())

    listed.append(st.Page(runs_alias, title=PAGES[0][1], url_path=PAGES[0][3], visibility="hidden"))
    return listed


def run_app() -> None:
    """app.py's whole body: page config, navigation, sidebar, then the chosen page."""
    st.set_page_config(page_title=PAGE_TITLE, page_icon=PAGE_ICON, layout="wide")
    listed = pages()
    try:
        viewer = access.viewer()
    except access.AccessDenied:
        # declared (hidden) so that Streamlit leaves its legacy pages mode, but never run
        st.navigation(listed, position="hidden")
        access.gate()  # draws the sign-in page (or why access is refused) and stops
        raise
    page = st.navigation(listed, position="sidebar")
    if "_session_seen" not in st.session_state:
        # a new browser session reads fresh data (cached queries otherwise live a few seconds)
        st.session_state["_session_seen"] = True
        core.bump()
    # a new `?a=…&b=…` on the default page is a diff link; the diff page itself leaves a and b
    # in the URL, so only a link this session has not seen yet counts
    link = selection.deep_link(("a", "b"), consume=False)
    if page is listed[0] and link and link["a"] and link["b"] and not st.query_params.get("run"):
        st.switch_page(listed[2], query_params={"a": link["a"], "b": link["b"]})
    with st.sidebar:
        st.caption("Rewind · counterfactual replay for LLM pipelines")
        if st.button("↻ Refresh data", help="Re-read runs written by other processes"):
            core.bump()
        access.sidebar_account(viewer)
    pipeline_banner()
    _inside.active = True
    try:
        with model_settings.active():
            warm_up()
            page.run()
    finally:
        _inside.active = False


def warm_up() -> None:
    """Load the tokenizer and build the model client now, under a spinner, so no node's latency
    pays for it (rewind.llm.warm_up is a no-op once warm for these settings)."""
    try:
        with st.spinner("Loading the tokenizer and the model client…"):
            rewind.llm.warm_up()
    except Exception as e:  # a bad setting: the page still opens; a model call will say why
        st.warning(f"Could not prepare the model client ({fmt.md_escape(e, 300)}); model calls may fail "
                   "until the model settings are fixed (Settings page).")


def pipeline_banner() -> None:
    """One banner per REWIND_PIPELINES entry that could not be loaded, naming the entry and
    the error; every other pipeline (and the demo) keeps working."""
    try:
        rw = core.get_rw()
        rw.pipelines()  # loads REWIND_PIPELINES, keeping what fails in rw.pipeline_errors
        broken = dict(getattr(rw, "pipeline_errors", {}) or {})
    except rewind.RewindError as e:
        st.error(f"The store could not be opened: {fmt.md_escape(e, 500)}")
        st.stop()
    if getattr(rw.store, "read_only", False):
        st.warning("The store is open **read-only** ("
                   f"{fmt.md_escape(getattr(rw.store, 'read_only_reason', '') or 'it cannot be written', 300)}"
                   "): runs can be browsed and compared, but nothing can be run, forked or purged.",
                   icon=":material/lock:")
    for entry, error in broken.items():
        st.error(f"REWIND_PIPELINES entry **{fmt.md_escape(entry)}** could not be loaded: "
                 f"{fmt.md_escape(error, 500)}. Fix or remove it and restart the dashboard; every other "
                 "pipeline keeps working.", icon=":material/error:")


def page_guard() -> None:
    """First line of every page script: if the legacy `pages/` mode ran this script without
    app.py, run the app shell here instead (its `st.navigation` leaves that mode for good and
    runs this same page inside it, with this run's query and widget events) and stop."""
    if getattr(_inside, "active", False):
        return
    run_app()
    st.stop()
