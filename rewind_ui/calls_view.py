"""What the step view says about the model calls a step made (`Step.calls`, recorded by the
core: whether each was served from a recording, its tool calls and stop reason) and how a
step's fields split into text (shown with its real line breaks) and other values.
Pure (no streamlit); rewind_ui/textview.py draws it, always as text, never as HTML.
"""

from __future__ import annotations

from typing import Any

from rewind.model.calls import recorded_reply

from . import fmt

SERVED = "served from the recording (not sent)"


def call_title(i: int, call: dict) -> str:
    """`Call 1 · chat.completions · sim-small` (plain text: an expander label is not markdown
    we trust, so it goes through md_escape when drawn)."""
    parts = [f"Call {i + 1}", str(call.get("api") or "model call"), str(call.get("model") or "?")]
    if call.get("error"):
        parts.append("failed")
    if call.get("served"):  # answered by the model-call cache or a snapshot: no request went out
        parts.append("served")
    return " · ".join(parts)


def call_reply(call: dict) -> dict:
    """What the recorded reply says beyond its text: {"tool_calls": ["name(arguments)", ...],
    "stop": the finish reason or status, "served": a line when it was served, else ""}."""
    reply = recorded_reply(call) or {}
    tools, stop = [], None
    if call.get("api") == "responses":
        for item in reply.get("output") or []:
            if isinstance(item, dict) and item.get("type") == "function_call":
                tools.append(f"{item.get('name')}({item.get('arguments') or ''})")
        stop = ((reply.get("incomplete_details") or {}).get("reason") or reply.get("status")) if reply else None
    else:
        choices = [c for c in reply.get("choices") or [] if isinstance(c, dict)]
        for c in choices[:1]:
            stop = c.get("finish_reason")
            for tc in (c.get("message") or {}).get("tool_calls") or []:
                f = (tc.get("function") or {}) if isinstance(tc, dict) else {}
                tools.append(f"{f.get('name')}({f.get('arguments') or ''})")
    return {"tool_calls": tools, "stop": stop, "served": SERVED if call.get("served") else ""}


def call_metrics(call: dict) -> list:
    """(label, value) of one call: tokens in and out, latency, whether usage was reported."""
    prompt, completion = call.get("prompt_tokens") or 0, call.get("completion_tokens") or 0
    return [("Prompt tokens", fmt.fmt_tokens(prompt)), ("Completion tokens", fmt.fmt_tokens(completion)),
            ("Latency", fmt.fmt_ms(call.get("latency_ms"))),
            ("Usage", "reported by the provider" if call.get("usage_reported") else "counted locally")]


def call_params(call: dict) -> str:
    """`temperature=0.0, max_tokens=200` or `defaults`."""
    params = call.get("params") or {}
    return ", ".join(f"{k}={fmt.json_line(v, 80)}" for k, v in params.items()) or "defaults"


def message_text(message: Any) -> tuple:
    """(role, content as text) of one chat message; multi-part content joined by lines."""
    if not isinstance(message, dict):
        return "message", str(message)
    role = str(message.get("role") or "message")
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts: text pieces, images by reference
        content = "\n".join(str(p.get("text", fmt.json_line(p))) if isinstance(p, dict) else str(p)
                            for p in content)
    elif content is None:
        content = fmt.json_line({k: v for k, v in message.items() if k != "role"})
    name = message.get("name")
    return (f"{role} ({name})" if name else role), str(content)


def split_fields(values: Any) -> tuple:
    """({name: text} for the string fields, {name: value} for the rest) of a step's inputs or
    outputs: text is shown with st.text (real line breaks), the rest as JSON."""
    if not isinstance(values, dict):
        return {}, values
    texts = {k: v for k, v in values.items() if isinstance(v, str)}
    rest = {k: v for k, v in values.items() if not isinstance(v, str)}
    return texts, rest


def noise_detail_rows(detail: dict) -> list:
    """The noise band's evidence for one node as readable rows (never a collapsed `{...}`)."""
    rows = []
    for key, value in (detail or {}).items():
        label = str(key).replace("_", " ")
        if isinstance(value, float):
            shown = f"{value:.4g}"
        elif isinstance(value, (str, int, bool)) or value is None:
            shown = "—" if value is None else str(value)
        else:
            shown = fmt.json_line(value, 300)
        rows.append({"Measure": label, "Value": shown})
    return rows
