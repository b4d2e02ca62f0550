"""Editing a node's read fields and params on the Fork page.

Each value gets a widget that fits its type (text area for text, number input for numbers, a
checkbox for booleans, a validated JSON editor for anything else). Parsing is separate from
rendering so it can be tested without Streamlit, and only values that really changed are sent
to `rw.fork` as `edit` / `params`.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from .fmt import JsonTextError, exact_in_a_browser, json_text, parse_json_text, to_jsonable

TEXT, INT, FLOAT, BOOL, JSON = "text", "int", "float", "bool", "json"


class FieldError(ValueError):
    """A widget value that cannot be used, naming the field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    @property
    def sentence(self) -> str:
        """The message as a sentence (a page puts another one after it)."""
        m = self.message.rstrip()
        return m if m.endswith((".", "!", "?")) else m + "."


def kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        # a number input holds a JavaScript double: past 2**53 it rounds (and Streamlit resets
        # a value it cannot hold to 0), so a big integer is edited as exact JSON text
        return INT if exact_in_a_browser(value) else JSON
    if isinstance(value, float) and math.isfinite(value):
        return FLOAT
    if isinstance(value, str):
        return TEXT
    return JSON


def _nonfinite_text(value: Any) -> Optional[str]:
    """`NaN` / `Infinity` / `-Infinity` for a non-finite float (shown as what it is, never as
    the text "nan" that to_jsonable would make of it), else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return None


class _NotANumber(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotANumber(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: JSON spells it, a run cannot record it
        raise _NotANumber(text)
    return value


def widget_initial(kind: str, value: Any) -> Any:
    """What the widget starts with for a recorded value."""
    if kind == JSON:
        return _nonfinite_text(value) or json_text(value)
    if kind == FLOAT:
        return float(value)
    return value


def parse_value(kind: str, raw: Any, field: str) -> Any:
    """The Python value a widget's raw content stands for; `FieldError` naming the field."""
    if kind == JSON:
        text = "" if raw is None else str(raw)
        if not text.strip():
            raise FieldError(field, "is empty; write JSON (for example null, 42, \"text\" or {})")
        try:
            return parse_json_text(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        except _NotANumber as e:
            # the whole value, or a number somewhere inside a list or object
            where = "is" if text.strip().lstrip("-") == str(e).lstrip("-") else "holds"
            there = "" if where == "is" else " there"
            raise FieldError(field, f"{where} {e}, which is not a number a run can record; write "
                                    f"a finite number{there} (for example 0 or 42)") from None
        except json.JSONDecodeError as e:
            raise FieldError(
                field, f"is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}"
            ) from None
        except JsonTextError as e:
            raise FieldError(field, str(e)) from None
    if kind == INT:
        if raw is None:
            raise FieldError(field, "needs a whole number")
        return int(raw)
    if kind == FLOAT:
        if raw is None:
            raise FieldError(field, "needs a number")
        return float(raw)
    if kind == BOOL:
        return bool(raw)
    return "" if raw is None else str(raw)


def _canon(value: Any) -> str:
    return json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def same_value(a: Any, b: Any) -> bool:
    """Equal as far as the editor can tell (a float's last bits, tuple vs list are equal)."""
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, float(b), rel_tol=1e-12, abs_tol=1e-15)
    if isinstance(b, float) and isinstance(a, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), b, rel_tol=1e-12, abs_tol=1e-15)
    try:
        return _canon(a) == _canon(b)
    except Exception:
        return a == b


def changes(originals: dict, kinds: dict, raws: dict) -> tuple:
    """(changed values, errors) for widget contents `raws` against recorded `originals`.

    `errors` is a list of `FieldError`; a field with an error is never in the changes."""
    changed, errors = {}, []
    for field, raw in raws.items():
        if field in originals and kinds[field] == JSON and raw == widget_initial(JSON, originals[field]):
            continue  # untouched (a recorded NaN stays the recorded value, not an error)
        try:
            value = parse_value(kinds[field], raw, field)
        except FieldError as e:
            errors.append(e)
            continue
        if field not in originals or not same_value(originals[field], value):
            changed[field] = value
    return changed, errors


def render_value_widget(st: Any, label: str, value: Any, key: str, *, kind: Optional[str] = None,
                        name: Optional[str] = None, help: Optional[str] = None) -> tuple:
    """Draw the widget for one value; returns (kind, raw widget content).

    The widget's state is seeded through session state (never a `value=` argument), so it keeps
    what the user typed across reruns and a reset simply deletes the key."""
    kind = kind or kind_of(value)
    name = (name or label).lower()
    if key not in st.session_state:
        st.session_state[key] = widget_initial(kind, value)
    if kind == TEXT:
        text = str(value or "")
        multiline = "\n" in text or len(text) > 80 or name in ("prompt", "system", "instructions")
        if multiline or name not in ("model",) and len(text) > 40:
            height = 120 if len(text) < 400 else 240
            raw = st.text_area(label, key=key, help=help, height=height)
        else:
            raw = st.text_input(label, key=key, help=help)
    elif kind == BOOL:
        raw = st.checkbox(label, key=key, help=help)
    elif kind == INT:
        raw = st.number_input(label, key=key, step=1, help=help)
    elif kind == FLOAT:
        if name == "temperature" and 0.0 <= float(st.session_state[key]) <= 2.0:
            raw = st.number_input(label, key=key, min_value=0.0, max_value=2.0, step=0.1, help=help)
        else:
            raw = st.number_input(label, key=key, step=0.1, format="%.4g", help=help)
    else:
        raw = st.text_area(label + " (JSON)", key=key, help=help or "Edit as JSON; it is validated before anything runs.",
                           height=160)
    return kind, raw
