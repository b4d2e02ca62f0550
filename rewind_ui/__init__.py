"""Thin UI helpers for the Streamlit dashboard (app.py, pages/). Not part of `rewind`:
`rewind` never imports streamlit; this package only calls rewind's public API.

    shell       the app shell: the sign-in gate, the six pages, navigation, sidebar, page guard
    access      who is signed in (Streamlit OIDC), admins, loopback-only without sign-in,
                whether the server allows side effects
    core        the Rewind handle per (store URL, owner), cached read queries, registered pipelines
    model_settings  this browser session's provider, base URL, model, own key, temperature
    selection   session selection (run, node, fork point, diff pair), deep links, URL sync
    picker      the graph + step picker component shared by Runs, Fork and Diff
    progress    the progress bar behind audit and noise-band callbacks
    editors     the Fork page's value widgets and change detection
    textview    a step's fields (text with its line breaks) and its model calls, drawn as text

pure (no streamlit import, tested in tests/test_ui_views.py):

    fmt         every number, time, hash, label and safe text the dashboard prints
    redact      another owner's run ids taken out of reasons before a page draws them
    graph       graph specs: node colours and tooltips by step status or diff outcome
    steps       the picker's choices and how a deep link or a click becomes one
    charts      the plotly bar charts
    calls_view  what the step view says about a step's model calls and the noise band's detail
    runs_view   fork_view   diff_view   blame_view   the four pages' view-models
    worddiff    a text diff with the changed words marked, as escaped HTML that wraps
"""
