"""Every number, time, hash, label and safe text the dashboard prints, in one place, so each
page says `1.23 s` and `1,234 tokens` the same way. Pure functions: no streamlit import.

Model output is untrusted: it is shown with st.text / st.code / st.json, never as markdown with
HTML. Where a short untrusted string must sit inside markdown (a label, a caption), it goes
through `md_escape`, which neutralises HTML and markdown syntax.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import html
import json
import math
import re
from typing import Any, Optional

from rewind.redaction import redact_url
from rewind.fmt import (  # noqa: F401  (one formatting library for the CLI and the pages)
    fmt_bytes, fmt_count, fmt_ms, fmt_tokens, fmt_ts, latency_value, short_hash, truncate,
)

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~:$>])")


def md_escape(text: Any, limit: Optional[int] = None) -> str:
    """`text` made inert inside Streamlit markdown: HTML entities escaped, markdown syntax
    (emphasis, links, `:color[]` directives, `$` maths) backslash-escaped, newlines flattened."""
    s = "" if text is None else str(text)
    if limit is not None and len(s) > limit:
        s = s[: max(0, limit - 1)] + "…"
    s = s.replace("\r", " ").replace("\n", " ")
    # quotes stay as typed: no markdown turns text into an attribute, and an entity's `#`
    # would be backslash-escaped below (`it's` showed as `it&#x27;s`)
    s = html.escape(s, quote=False)
    return _MD_SPECIAL.sub(r"\\\1", s)


_ASCII_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")


def md_cell(text: Any, limit: Optional[int] = 600) -> str:
    """`text` made inert in an st.table cell (markdown without entity decoding there): every
    ASCII punctuation character backslash-escaped, so `<img>` and `**` show as typed."""
    s = "" if text is None else str(text)
    if limit is not None and len(s) > limit:
        s = s[: max(0, limit - 1)] + "…"
    s = s.replace("\r", " ").replace("\n", " ")
    return _ASCII_PUNCT.sub(r"\\\1", s)


def md_rows(rows: list, limit: int = 600) -> list:
    """Rows for st.table, which renders every cell as markdown: each text cell md_cell'd
    (numbers stay numbers), so model text in a cell is shown, never rendered."""
    return [{k: (md_cell(v, limit) if isinstance(v, str) else v) for k, v in r.items()} for r in rows]


def tooltip_escape(text: Any, limit: int = 600) -> str:
    """Text for a vis-network tooltip (streamlit-agraph puts it in a div via innerHTML):
    every HTML special character escaped, so `<img onerror>` is shown, never parsed."""
    s = "" if text is None else str(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=True)


# A display distinction, never a stored status (Step.status stays executed|cached|dry-run|
# failed|inherited): a step that ran again but had every model call answered by the model-call
# cache spent nothing and sent nothing, which "executed · 0 tokens" in the colour of a real
# re-run hides.
SERVED_RERUN = "re-ran · calls served"


def shown_status(step: Any) -> str:
    """The status a page shows for a step: SERVED_RERUN for an executed step that made at
    least one model call and had every one served from the model-call cache, else its status."""
    status = getattr(step, "status", None) or ""
    calls = list(getattr(step, "calls", None) or [])
    if status == "executed" and calls and all(isinstance(c, dict) and c.get("served") for c in calls):
        return SERVED_RERUN
    return status


STATUS_DOT = {
    "executed": ":green[●]", "cached": ":blue[●]", "dry-run": ":orange[●]", "failed": ":red[●]",
    "inherited": ":violet[●]", SERVED_RERUN: ":blue[◐]",
}


def status_dot(status: str) -> str:
    """A coloured dot (Streamlit markdown colour directive) for a step status."""
    return STATUS_DOT.get(status, ":gray[●]")










def fmt_started(ts: Any, now: Optional[_dt.datetime] = None) -> str:
    """A run's start for the runs table, short: `Dec 6 10:08`, with the year for another
    year's run (`2025-12-06`); `—` when unknown."""
    try:
        when = _dt.datetime.fromtimestamp(float(ts))
    except (TypeError, ValueError, OverflowError, OSError):
        return "—"
    if when.year != (now or _dt.datetime.now()).year:
        return when.strftime("%Y-%m-%d")
    return f"{when:%b} {when.day} {when:%H:%M}"


# tables and charts carry latency as a number (sortable, plottable), always in this unit
LATENCY_UNIT = "ms"
LATENCY_COLUMN = f"Latency ({LATENCY_UNIT})"




MATCH_MARK = {True: "✓ same", False: "✗ differs", None: "– n/a"}
STABLE_MARK = {True: "✓ stable", False: "✗ unstable", None: "—"}


def step_line(step: Any) -> str:
    """One progress line for a finished step (markdown; names escaped)."""
    key = step_key(step.node, getattr(step, "occurrence", 1))
    saved = getattr(step, "tokens_saved", 0)
    status = shown_status(step)
    return (f"{status_dot(status)} **{md_escape(key)}** — {md_escape(status)} · "
            f"{fmt_tokens(step.tokens)} tokens" + (f" (saved {fmt_tokens(saved)})" if saved else "")
            + f" · {fmt_ms(step.latency_ms)}")


def spent_saved(run: Any) -> str:
    """`1,911 tokens spent, 119 saved` with the core's definitions (rewind.costs)."""
    spent = getattr(run, "spent", None)
    spent = run.total_tokens if spent is None else spent
    saved = getattr(run, "saved", None)
    saved = run.tokens_saved if saved is None else saved
    return f"{fmt_tokens(spent)} tokens spent, {fmt_tokens(saved)} saved"


def fmt_dollars(usd: Any) -> str:
    """`$0.0123` from the price table (rewind.costs), `$0` for free models, `unpriced` when a
    model has no price (set REWIND_PRICES)."""
    if usd is None:
        return "unpriced"
    usd = float(usd)
    if usd == 0:
        return "$0"
    return f"${usd:.4f}" if abs(usd) < 100 else f"${usd:,.2f}"


# a field's text longer than this is cut in previews (the full value is sent, never dumped)
PREVIEW_CHARS = 2_000


def preview_text(text: Any, limit: int = PREVIEW_CHARS) -> str:
    """`text` cut at `limit` characters with a note of its real size (plain text)."""
    s = "" if text is None else str(text)
    if len(s) <= limit:
        return s
    return s[:limit] + f"\n… ({len(s) - limit:,} more characters, {len(s):,} in all)"


# a list or dict longer than this shows its first items and how many more there are
PREVIEW_ITEMS = 100
# a recorded value larger than this (bytes as stored) is loaded onto a page only when asked:
# the page holds every tab's content up front, and the value may sit in an object store
LARGE_VALUE_BYTES = 256 * 1024


def preview_value(value: Any, limit: int = PREVIEW_CHARS, items: int = PREVIEW_ITEMS) -> Any:
    """A value for st.json previews with every long string cut (see preview_text) and every
    long list or dict cut to its first `items` (a note says how many more there are)."""
    if isinstance(value, str):
        return preview_text(value, limit)
    if isinstance(value, dict):
        out = {k: preview_value(v, limit, items) for k, v in list(value.items())[:items]}
        if len(value) > items:
            out["…"] = f"{len(value) - items:,} more keys, {len(value):,} in all"
        return out
    if isinstance(value, list):
        out = [preview_value(v, limit, items) for v in value[:items]]
        if len(value) > items:
            out.append(f"… {len(value) - items:,} more items, {len(value):,} in all")
        return out
    return value


def json_size(value: Any) -> int:
    """About the bytes a value takes as JSON (its UTF-8 text for a string)."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "replace")) + 2
    return len(json.dumps(to_jsonable(value), ensure_ascii=False).encode("utf-8", "replace"))


def keys_list(keys: Any) -> str:
    """`plan, critique` (escaped) or `none`."""
    return ", ".join(md_escape(k) for k in keys) or "none"


def json_line(value: Any, limit: int = 500) -> str:
    """Compact one-line JSON of any value, cut at `limit` characters (plain text)."""
    text = json.dumps(to_jsonable(value), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_label(row: Any) -> str:
    """`id · pipeline ↳fork-node · question…` for selectboxes (a row dict or a Run)."""
    get = row.get if isinstance(row, dict) else (lambda k, d=None: getattr(row, k, d))
    fork = f" ↳{get('fork_node')}" if get("parent_id") else ""
    return f"{get('id')} · {get('pipeline')}{fork} · {truncate(get('summary'), 48)}"






def mask_url(url: Any) -> str:
    """A store or model URL with any password or secret query value replaced by ***."""
    return redact_url(url)


def step_key(node: str, occurrence: int = 1) -> str:
    """The label of a step: `critique`, or `critique#2` for a second visit."""
    return node if int(occurrence or 1) == 1 else f"{node}#{int(occurrence)}"


def parse_step_key(key: Optional[str]) -> tuple:
    if not key:
        return None, 1
    node, sep, occ = str(key).rpartition("#")
    if sep and occ.isdigit() and node:
        return node, int(occ)
    return str(key), 1


def to_jsonable(value: Any, _depth: int = 0) -> Any:
    """A value st.json can show faithfully: dataclasses, sets, tuples, bytes, datetimes and
    objects with no JSON form become plain JSON (repr as the last resort)."""
    if _depth > 50:
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, _depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_jsonable(v, _depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value), _depth + 1)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return to_jsonable(dump(), _depth + 1)
        except Exception:
            pass
    return repr(value)


EXACT_IN_A_BROWSER = 2**53 - 1  # the largest integer a JavaScript number holds exactly


def exact_in_a_browser(value: Any, _depth: int = 0) -> bool:
    """Whether a JSON value's integers survive the browser's numbers (st.json, a number
    input): past 2**53 they round (10**20 shows as 100000000000000000000, 2**53 + 1 as
    its neighbour)."""
    if isinstance(value, bool) or _depth > 60:
        return True
    if isinstance(value, int):
        return abs(value) <= EXACT_IN_A_BROWSER
    if isinstance(value, dict):
        return all(exact_in_a_browser(v, _depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(exact_in_a_browser(v, _depth + 1) for v in value)
    return True


class JsonTextError(ValueError):
    """JSON typed into a page that Python's parser cannot give back: its reason as a phrase."""


def parse_json_text(text: str, **options: Any) -> Any:
    """`json.loads(text, **options)`, where JSON nested past Python's recursion limit or an
    integer of more than 4,300 digits is a `JsonTextError` (a JSONDecodeError stays one)."""
    try:
        return json.loads(text, **options)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise JsonTextError("is nested too deeply for Python's JSON parser; flatten it") from None
    except ValueError as e:
        if "digits" not in str(e):  # a parse_constant / parse_float hook's own refusal
            raise
        raise JsonTextError(f"holds an integer too long for Python ({str(e).split(';')[0]})") from None


def json_text(value: Any) -> str:
    """Pretty JSON for an editor: exact for JSON values, best effort otherwise."""
    return json.dumps(to_jsonable(value), indent=2, ensure_ascii=False, sort_keys=False)


def public_state(state: Optional[dict]) -> dict:
    """A state snapshot without Burr's internal `__` keys."""
    return {k: v for k, v in (state or {}).items() if not str(k).startswith("__")}


