"""Values the user types into flags and files: JSON objects, `name=JSON` pairs, `@file` text.

Everything here refuses bad input with an `InvalidRequest` whose `field` is the flag and whose
message is one line naming it, before any store is opened, so a refusal writes nothing. Python's
own parser fails in several ways on hostile text (a `JSONDecodeError`, a `ValueError` for an
integer over 4300 digits, a `RecursionError` for deep nesting, a `UnicodeDecodeError` for a
binary file); each becomes that one line.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Optional, Sequence

from ..errors import InvalidRequest

# A state or an export document bigger than this is a mistake (a wrong file, /dev/zero), and
# reading it whole would only exhaust memory first.
MAX_FILE_BYTES = 256 * 1024 * 1024


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} does not fit a float")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def load_json(text: str, field: str, hint: str = "") -> Any:
    """Parse JSON typed into `field`; an `InvalidRequest` naming the field otherwise."""
    tail = f"; {hint}" if hint else ""
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise InvalidRequest(f"{field}: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})"
                             f"{tail}", field=field) from None
    except RecursionError:
        raise InvalidRequest(f"{field}: JSON nested too deeply for Python's parser; flatten it",
                             field=field) from None
    except ValueError as e:  # an integer of more than 4300 digits, NaN, 1e999
        reason = str(e).split(";")[0]
        raise InvalidRequest(f"{field}: invalid JSON value ({reason}){tail}", field=field) from None
    return value


def json_object(text: str, field: str, hint: str) -> dict:
    """Parse a JSON object; an `InvalidRequest` naming `field`, the problem and `hint` otherwise."""
    value = load_json(text, field, hint)
    if not isinstance(value, dict):
        raise InvalidRequest(f"{field}: expected a JSON object, got {type(value).__name__}; {hint}",
                             field=field)
    return value


def read_text(path: str, field: str) -> str:
    """The UTF-8 text of a file (`-`: standard input); an `InvalidRequest` naming `field` otherwise."""
    try:
        if path == "-":
            stream = getattr(sys.stdin, "buffer", None)
            data = stream.read(MAX_FILE_BYTES + 1) if stream is not None else \
                sys.stdin.read(MAX_FILE_BYTES + 1).encode("utf-8", "surrogateescape")
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise InvalidRequest(f"{field}: cannot read the file ({e.strerror or e})", field=field) from None
    if len(data) > MAX_FILE_BYTES:
        raise InvalidRequest(f"{field}: the file is over {MAX_FILE_BYTES // 2**20} MB", field=field)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"{field}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                             f"{e.start}); pass a JSON file", field=field) from None


def parse_state(text: Optional[str]) -> Optional[dict]:
    """`--state JSON` or `--state @file.json` as a dict (None when the flag was not given)."""
    if text is None:
        return None
    field = "--state"
    if text.startswith("@"):
        field = f"--state {text}"
        text = read_text(text[1:], field)
    return json_object(text, field, "pass an object like --state '{\"question\": \"...\"}'")


def parse_assignment(flag: str, text: str) -> tuple:
    """`name=JSON` → (name, value); an `InvalidRequest` naming the flag and the problem otherwise."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise InvalidRequest(f"{flag} {text[:80]!r}: expected name=JSON, e.g. {flag} temperature=0.9 "
                             f"or {flag} field='\"some text\"'", field=flag)
    hint = ""
    if raw and raw[:1] not in "\"[{-0123456789" and raw not in ("true", "false", "null"):
        hint = f"a string must be quoted: {flag} {name}='\"{raw[:40]}\"'"
    return name, load_json(raw, f"{flag} {name}", hint)


def parse_assignments(flag: str, items: Optional[Sequence[str]]) -> dict:
    out: dict = {}
    for text in items or []:
        name, value = parse_assignment(flag, text)
        if name in out:
            raise InvalidRequest(f"{flag} {name}: given more than once", field=flag)
        out[name] = value
    return out


def add_change_flags(sp: Any) -> None:
    """`--edit FIELD=JSON` and `--param NAME=JSON`, the one change a fork or a batch makes."""
    sp.add_argument("--edit", action="append", metavar="FIELD=JSON",
                    help="set a state field the node reads (repeatable)")
    sp.add_argument("--param", action="append", metavar="NAME=JSON",
                    help="set one of the node's parameters (repeatable)")


def parse_changes(args: Any) -> tuple:
    """(edit, params) from `add_change_flags`' flags, refused with the flag's name if bad."""
    return parse_assignments("--edit", args.edit), parse_assignments("--param", args.param)

