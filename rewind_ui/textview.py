"""Drawing untrusted text as text: a step's fields (strings with their real line breaks, the
rest as JSON) and the model calls it made (chat messages, response, tool calls, model, params,
tokens, latency, whether it was served). Everything goes through st.text / st.code / st.json,
or markdown with md_escape: model output is never live HTML.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from rewind.redaction import redact

from . import fmt
from .calls_view import call_metrics, call_params, call_reply, call_title, message_text, split_fields


# the chat bubbles: the role's own avatar where Streamlit has one, a neutral icon otherwise
_AVATAR_NAME = {"user": "user", "assistant": "assistant", "system": "ai", "tool": "ai", "developer": "ai"}
_AVATARS = {"system": ":material/settings:", "developer": ":material/settings:", "tool": ":material/build:"}


SHOW_CHARS = 20_000  # of one field's text on a page


def show_fields(values: Any, empty: str = "Nothing recorded.", expanded: int = 2) -> None:
    """Each text field under its name with its line breaks; the other fields as JSON."""
    texts, rest = split_fields(values)
    if not texts and not rest:
        st.caption(empty)
        return
    for name, text in texts.items():
        st.caption(fmt.md_escape(name))
        # a page holds every tab's text up front: a megabyte there stalls the browser
        st.text(fmt.preview_text(text, SHOW_CHARS) if text else "(empty text)")
        if len(text) > SHOW_CHARS:
            st.caption(f"Cut at {SHOW_CHARS:,} characters; the whole value: `rewind show RUN --json`.")
    if rest:
        show_json(fmt.preview_value(fmt.to_jsonable(rest), SHOW_CHARS), expanded=expanded)


def closed_large_fields(sizes: dict, key: str) -> set:
    """The large fields (over fmt.LARGE_VALUE_BYTES as stored) not to load: each is shown by
    its size with a box that loads it. Returns those whose box is not ticked."""
    closed = set()
    for name, n in sizes.items():
        if n > fmt.LARGE_VALUE_BYTES and not st.checkbox(
                f"Show {fmt.md_escape(name)} ({fmt.fmt_bytes(n)} recorded)", key=f"{key}:{name}",
                help="Large: loaded (from the object store, if it is there) only when asked"):
            closed.add(name)
    return closed


def show_json(value: Any, expanded: Any = True) -> None:
    """A JSON value as st.json, or as JSON text where st.json would round an integer."""
    if fmt.exact_in_a_browser(value):
        st.json(value, expanded=expanded)
    else:
        st.code(json.dumps(value, indent=2, ensure_ascii=False), language="json")


def show_calls(calls: list) -> None:
    """Every model call of a step: its messages as a chat, the response, and its numbers."""
    if not calls:
        st.caption("This step made no model call (or ran before calls were recorded).")
        return
    for i, call in enumerate(calls):
        with st.expander(fmt.md_escape(call_title(i, call)), expanded=i == 0):
            for col, (label, value) in zip(st.columns(4), call_metrics(call)):
                col.metric(label, value)
            reply = call_reply(call)
            if reply["served"]:
                st.caption(fmt.md_escape(reply["served"]))
            st.caption(f"model {fmt.md_escape(call.get('model') or '?')} · params "
                       f"{fmt.md_escape(call_params(call), 300)}")
            for message in call.get("messages") or []:
                role, text = message_text(message)
                with st.chat_message(_AVATAR_NAME.get(role, "user" if role.startswith("user") else "ai"),
                                     avatar=_AVATARS.get(role)):
                    st.caption(fmt.md_escape(role))
                    st.text(text or "(empty)")
            with st.chat_message("assistant"):
                st.caption("response" + (f" · stop: {fmt.md_escape(str(reply['stop']))}"
                                         if reply["stop"] else ""))
                st.text(call.get("response_text") or ("" if reply["tool_calls"] else "(no text)"))
                for line in reply["tool_calls"]:  # a tool call is often the whole reply
                    st.text("tool call: " + fmt.preview_text(line, 2000))
            if call.get("error"):  # a row written before errors were redacted may echo a key
                st.caption("error")
                st.code(redact(str(call["error"])), language=None)
