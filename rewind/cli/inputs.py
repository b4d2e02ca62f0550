"""Values the user types into flags and files: JSON objects, `name=JSON` pairs, `@file` text.

Everything here refuses bad input with an `InvalidRequest` whose `field` is the flag and whose
message is one line naming it, before any store is opened, so a refusal writes nothing. Python's
own parser fails in several ways on hostile text (a `JSONDecodeError`, a `ValueError` for an
integer over 4300 digits, a `RecursionError` for deep nesting, a `UnicodeDecodeError` for a
binary file); each becomes that one line. Files are read by `rewind.paths` (the one reader of
user files: a regular file only, at most `MAX_READ_BYTES`), JSON parsed by `paths.parse_json`.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

from ..errors import InvalidRequest
from ..paths import MAX_READ_BYTES, decode_text, parse_json, read_bytes

# kept for callers of the old name: the limit is rewind.paths' (the one reader of user files)
MAX_FILE_BYTES = MAX_READ_BYTES


def load_json(text: str, field: str, hint: str = "") -> Any:
    """Parse JSON typed into `field`; an `InvalidRequest` naming the field otherwise."""
    return parse_json(text, field, hint, field=field)


def json_object(text: str, field: str, hint: str) -> dict:
    """Parse a JSON object; an `InvalidRequest` naming `field`, the problem and `hint` otherwise."""
    value = load_json(text, field, hint)
    if not isinstance(value, dict):
        raise InvalidRequest(f"{field}: expected a JSON object, got {type(value).__name__}; {hint}",
                             field=field)
    return value


def read_text(path: str, field: str) -> str:
    """The UTF-8 text of a file (`-`: standard input); an `InvalidRequest` naming `field` otherwise.
    A FIFO, device or directory named as the file, or a file over the limit, is refused by
    `rewind.paths.read_bytes` (standard input, which may well be a pipe, is read to the limit)."""
    if path != "-":
        return decode_text(read_bytes(path, field, field=field), field, field=field)
    try:
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read(MAX_READ_BYTES + 1) if stream is not None else \
            sys.stdin.read(MAX_READ_BYTES + 1).encode("utf-8", "surrogateescape")
    except OSError as e:
        raise InvalidRequest(f"{field}: cannot read the file ({e.strerror or e})", field=field) from None
    if len(data) > MAX_READ_BYTES:
        raise InvalidRequest(f"{field}: the file is over {MAX_READ_BYTES // 2**20} MB", field=field)
    return decode_text(data, field, field=field)


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

