"""The graph + step picker, one component for the Runs, Fork and Diff pages: the pipeline
graph (streamlit-agraph), its legend, and a selectbox beside it bound to a session key.

Why both: agraph has no `key` and returns the last clicked node on every rerun, so a click
cannot be the selection itself; a click only *moves* the selectbox, and only when agraph's
value changes, and the selectbox (which survives reruns, page switches and deep links) is
what the page reads.
"""

from __future__ import annotations

from typing import Any, Optional

import streamlit as st

from . import graph as ug
from .fmt import md_escape, parse_step_key
from .selection import bound_selectbox
from .steps import after_click, resolve

CLICK_HELP = "Or click a node in the graph"


# a graph this large is drawn taller and may be zoomed (a 40-node chain is 40 levels wide)
LARGE_GRAPH = 12


def _vis_node(n: dict, Node: Any) -> Any:
    """One vis-network node from a spec node: fill, the diff's A-side border, the fork point's
    dashed border and the selection's halo (options vis-network documents for nodes)."""
    border = n.get("border")
    color = {"background": n["color"], "border": border or n["color"],
             "highlight": {"background": n["color"], "border": "#263238"},
             "hover": {"background": n["color"], "border": "#263238"}}
    extra: dict = {}
    if n.get("dashed"):
        extra["shapeProperties"] = {"borderDashes": [6, 4]}
    if n.get("selected"):
        extra["shadow"] = {"enabled": True, "color": ug.SELECTED_HALO, "size": 16, "x": 0, "y": 0}
    width = 5 if border else (3 if n.get("dashed") else 1)
    if n.get("dashed") and not border:
        color["border"] = "#263238"
    return Node(id=n["id"], label=n["label"], title=n["title"], color=color, shape="box",
                font={"color": "#ffffff", "size": 16, "face": "sans-serif"}, margin=12,
                borderWidth=width, borderWidthSelected=width + 1, **extra,
                **({"level": n["level"]} if "level" in n else {}))


def draw_graph(spec: dict, state_key: str, height: int = 140) -> Optional[str]:
    """Draw `spec`; the node id clicked since the last rerun, else None."""
    try:
        from streamlit_agraph import Config, Edge, Node, agraph
    except Exception:  # pragma: no cover - the component is an install-time dependency
        st.caption("(graph component unavailable: install streamlit-agraph)")
        return None
    nodes = [_vis_node(n, Node) for n in spec["nodes"]]
    large = len(nodes) > LARGE_GRAPH
    edges = [
        Edge(source=e["source"], target=e["target"], color="#90a4ae", arrows="to",
             **({"label": e["label"], "font": {"size": 10, "color": "#607d8b"}} if e["label"] else {}))
        for e in spec["edges"]
    ]
    config = Config(height=height * 2 if large else height, directed=True, physics=False, hierarchical=True,
                    interaction={"hover": True, "tooltipDelay": 120, "zoomView": large, "dragView": True})
    # layout options go inside `layout.hierarchical`: Config copies any other keyword to the
    # top level, where vis.js ignores it ("Unknown option") and the graph is laid out top-down
    # "directed" levels follow the edges (a branch fans out, a loop's back edge points left);
    # shakeTowards roots keeps the entrypoint at the left
    config.layout["hierarchical"].update(direction="LR", sortMethod="directed", levelSeparation=120,
                                         nodeSpacing=80, shakeTowards="roots")
    config.width = "100%"
    # Config sets `groups` to None, which vis-network rejects ("Invalid type received for groups")
    config.__dict__.pop("groups", None)
    value = agraph(nodes=nodes, edges=edges, config=config)
    # report a click only when the value changes (a redrawn graph with new data starts again
    # from None)
    prev = st.session_state.get(state_key)
    st.session_state[state_key] = value
    if value and value != prev:
        return str(value)
    return None


def graph_picker(spec: dict, legend: tuple, choices: list, state_key: str, graph_key: str,
                 label: str, *, default: Optional[str] = None, side: bool = False,
                 empty: str = "Nothing to pick here.", where: str = "in this run",
                 fork_point: Optional[str] = None) -> tuple:
    """Draw the graph (the fork point and the selected node marked), its legend and the picker;
    returns (chosen key or None, the column beside the picker when `side`, for the page's own
    button, else None). `legend` is (colours, help) or (colours, help, marks, note).

    The key in `state_key` is kept valid: a bare node name becomes its first visit, a click
    on the graph moves it (and redraws the graph with the new selection), a wish with no step
    (an old deep link) is said and replaced."""
    key, unknown = resolve(choices, st.session_state.get(state_key), default)
    clicked = draw_graph(ug.mark(spec, fork_point, parse_step_key(key)[0] if key else None), graph_key)
    st.markdown(ug.legend_html(*legend), unsafe_allow_html=True)
    if unknown:
        st.warning(f"There is no step {md_escape(unknown)} {where}"
                   + (f": showing {md_escape(key)}." if key else "."))
    moved, unreached = after_click(choices, key, clicked)
    if moved:
        st.session_state[state_key] = moved
        st.rerun()  # draw the halo on the node just clicked
    elif unreached:
        st.toast(f"{clicked} has no step {where}")
    st.session_state[state_key] = key
    cols: Any = st.columns([3, 1] if side else [2, 2], vertical_alignment="bottom")
    with cols[0]:
        if not choices:
            st.caption(empty)
            return None, (cols[1] if side else None)
        labels = {c.key: c.label for c in choices}
        key = bound_selectbox(label, [c.key for c in choices], state_key,
                              format_func=lambda k: labels.get(k, k), help=CLICK_HELP)
    return key, (cols[1] if side else None)
