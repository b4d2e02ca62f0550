"""What this browser session has selected (run, node, fork point, diff pair) and how it
follows the URL: selection lives in plain session keys (Streamlit never clears those on a
page switch), deep links are read once when they change, and the URL mirrors the selection.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import streamlit as st

# session-state keys (plain keys, not widget keys: Streamlit never clears them on page switch)
SEL_RUN, SEL_NODE = "sel_run", "sel_node"
FORK_RUN, FORK_NODE = "fork_run", "fork_node"
DIFF_A, DIFF_B = "diff_a", "diff_b"
LAST_FORK = "last_fork"
AUDITS = "audits"


def deep_link(names: tuple, consume: bool = True) -> Optional[dict]:
    """The query params `names` when they changed since this session last read or wrote them
    (an opened or edited URL), else None. `consume=False` only looks: the page that acts on
    the link still gets it."""
    current = {k: (st.query_params.get(k) or None) for k in names}
    seen_key = "_qp_seen:" + ",".join(names)
    if any(current.values()) and st.session_state.get(seen_key) != current:
        if consume:
            st.session_state[seen_key] = current
        return current
    return None


def write_query_params(values: dict) -> None:
    """Reflect the current selection in the URL, so it can be shared or reloaded."""
    names = tuple(values)
    for k, v in values.items():
        if v:
            if st.query_params.get(k) != str(v):
                st.query_params[k] = str(v)
        elif k in st.query_params:
            del st.query_params[k]
    st.session_state["_qp_seen:" + ",".join(names)] = {k: (str(v) if v else None) for k, v in values.items()}


def bound_selectbox(label: str, options: list, state_key: str,
                    format_func: Callable = str, **kwargs: Any) -> Any:
    """A selectbox whose value lives in a plain session key (surviving page switches and
    programmatic changes from buttons, graph clicks and deep links)."""
    wkey = "_w_" + state_key
    options = list(options)
    cur = st.session_state.get(state_key)
    if cur not in options:
        cur = options[0] if options else None
        st.session_state[state_key] = cur
    st.session_state[wkey] = cur

    def _sync() -> None:
        st.session_state[state_key] = st.session_state[wkey]

    st.selectbox(label, options, key=wkey, format_func=format_func, on_change=_sync, **kwargs)
    return st.session_state.get(state_key)


def select_run(run_id: Optional[str], node: Optional[str] = None) -> None:
    st.session_state[SEL_RUN] = run_id
    st.session_state[SEL_NODE] = node


def open_fork(run_id: str, node_key: Optional[str]) -> None:
    st.session_state[FORK_RUN] = run_id
    st.session_state[FORK_NODE] = node_key


def open_diff(a: str, b: str) -> None:
    st.session_state[DIFF_A] = a
    st.session_state[DIFF_B] = b
