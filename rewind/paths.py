"""Where Rewind reads a user's file and where it writes one, checked before any work, so a bad
path is one clear refusal rather than an error after the work, a hang or a half-written file.

Reading (the one reader of every file a user hands in: `rewind import`, `import-burr`'s
graph.json / metadata.json / log.jsonl, snapshot files, `--state @file`): `open_regular` and
`read_bytes` take a regular file only, never a FIFO (opening one would wait for a writer
forever), a device (`/dev/zero` never ends) or a directory, and at most `MAX_READ_BYTES`;
`parse_json` then refuses what Python's parser or Rewind's code downstream could not take
(invalid JSON, NaN and Infinity, nesting deeper than `MAX_JSON_DEPTH`).

Writing: `nearest_existing`, `unwritable_reason`; `child_path` joins an id onto a folder only
when the id is a plain name (`SAFE_ID`) and the result stays inside the folder, symlinks
followed, so an id from an imported document is never a path.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import tempfile
from typing import Any, Iterator

from .errors import InvalidRequest

# A state, an export or a tracker log bigger than this is a mistake (a wrong file), and reading
# it whole would only exhaust memory first.
MAX_READ_BYTES = 256 * 1024 * 1024
# Deeper JSON is refused: Python's parser gives up near 1000 levels, and Rewind's and Burr's
# encoders (one Python frame or more per level) well before that once a run is under way.
MAX_JSON_DEPTH = 200
# What a run id is when Rewind made it (16 hex digits) or may take from elsewhere: a plain
# name, never "." or "..", no separator, nothing a file system reads specially.
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SAFE_ID_RULE = "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128"


# --- reading -----------------------------------------------------------------------------------
def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


def _mb(n: int) -> str:
    return f"{n // 2**20} MB" if n >= 2**20 else f"{n} bytes"


@contextlib.contextmanager
def open_regular(path: Any, what: str, limit: int = 0, error: type = InvalidRequest,
                 field: Any = None) -> Iterator[Any]:
    """A binary file object of the regular file at `path` (symlinks followed), or `error`
    ("{what}: ...", one line) for a FIFO, device, directory, a file over `limit` bytes
    (default MAX_READ_BYTES) or one that cannot be opened."""
    limit = limit or MAX_READ_BYTES
    # O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(os.fspath(path), flags)
    except OSError as e:
        raise error(f"{what}: cannot read the file ({e.strerror or e})", field=field) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what}: {os.fspath(path)} is {_kind(st.st_mode)}, not a regular file; "
                        "give a file", field=field)
        if st.st_size > limit:
            raise error(f"{what}: the file is over {_mb(limit)} ({st.st_size} bytes); is it the "
                        "right file?", field=field)
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def read_bytes(path: Any, what: str, limit: int = 0, error: type = InvalidRequest,
               field: Any = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (see `open_regular`)."""
    limit = limit or MAX_READ_BYTES
    with open_regular(path, what, limit, error, field) as f:
        try:
            data = f.read(limit + 1)  # a file that grew since fstat stops here
        except OSError as e:
            raise error(f"{what}: cannot read the file ({e.strerror or e})", field=field) from None
    if len(data) > limit:
        raise error(f"{what}: the file is over {_mb(limit)}; is it the right file?", field=field)
    return data


def decode_text(data: bytes, what: str, error: type = InvalidRequest, field: Any = None) -> str:
    """UTF-8 text (a byte-order mark dropped), or `error` naming the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{what}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                    "pass a JSON file", field=field) from None


def read_text(path: Any, what: str, limit: int = 0, error: type = InvalidRequest,
              field: Any = None) -> str:
    return decode_text(read_bytes(path, what, limit, error, field), what, error, field)


# --- JSON ----------------------------------------------------------------------------------------
class JSONRefused(InvalidRequest):
    """JSON `parse_json` would not take; `problem` is the message without its subject, `kind`
    one of "syntax", "value", "depth", `detail` the parser's own words for a syntax error (a
    caller that words its own message uses them)."""

    def __init__(self, message: str, problem: str = "", kind: str = "", detail: str = "",
                 **context: Any):
        super().__init__(message, **context)
        self.problem, self.kind, self.detail = problem, kind, detail or problem


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} does not fit a float")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _refuse(error: type, what: str, problem: str, kind: str, field: Any,
            detail: str = "") -> None:
    if issubclass(JSONRefused, error):
        raise JSONRefused(f"{what}: {problem}", problem, kind, detail, field=field)
    raise error(f"{what}: {problem}", field=field)


def parse_json(text: Any, what: str, hint: str = "", error: type = InvalidRequest,
               field: Any = None, max_depth: int = 0) -> Any:
    """Parse JSON text, refusing (one line, `error`) invalid JSON, NaN / Infinity / a number
    no float holds, an integer of over 4300 digits, and nesting deeper than `max_depth`."""
    tail = f"; {hint}" if hint else ""
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        detail = f"{e.msg} at line {e.lineno} column {e.colno}"
        _refuse(error, what, f"invalid JSON ({detail}){tail}", "syntax", field, detail)
    except RecursionError:
        _refuse(error, what, f"JSON nested too deeply (more than {max_depth or MAX_JSON_DEPTH} "
                "levels); flatten it", "depth", field)
    except ValueError as e:  # an integer of more than 4300 digits, NaN, 1e999
        _refuse(error, what, f"invalid JSON value ({str(e).split(';')[0]}){tail}", "value", field)
    problem = json_problem(value, max_depth)
    if problem:
        _refuse(error, what, problem, "depth" if "nested" in problem else "value", field)
    return value


def json_problem(value: Any, max_depth: int = 0, finite: bool = True) -> str:
    """Why `value` (parsed JSON, or a dict given through the API) is not JSON Rewind takes:
    nested deeper than `max_depth` (default MAX_JSON_DEPTH), or (`finite`) a NaN / infinite
    number; "" when it is fine. Iterative: a value too deep for recursion is measured all the same."""
    max_depth = max_depth or MAX_JSON_DEPTH
    stack: list = [(value, 0, "")]
    while stack:
        v, depth, where = stack.pop()
        if finite and isinstance(v, float) and not math.isfinite(v):
            return f"holds {v} at {where or 'the top'}, which JSON does not allow"
        if isinstance(v, (dict, list, tuple)):
            if depth >= max_depth:
                shown = ".".join(where.split(".")[:3]) or "the top"
                return (f"JSON nested too deeply (more than {max_depth} levels, under {shown}); "
                        "flatten it")
            items = v.items() if isinstance(v, dict) else enumerate(v)
            stack.extend((x, depth + 1, f"{where}.{k}" if where else str(k)) for k, x in items)
    return ""


# --- writing -------------------------------------------------------------------------------------
def nearest_existing(path: str) -> str:
    """`path` made absolute, or its nearest ancestor that exists: what decides whether the
    path can be written (that ancestor must be a directory, unless it is the path itself)."""
    here = os.path.abspath(path)
    while not os.path.lexists(here) and here != os.path.dirname(here):
        here = os.path.dirname(here)
    return here


def unwritable_reason(path: str) -> str:
    """Why this process cannot create `path` (or write into it, a directory), "" if it can:
    the nearest folder that exists must let it add entries (a read-only folder or a read-only
    file system does not)."""
    here = nearest_existing(path)
    folder = here if os.path.isdir(here) else os.path.dirname(here)
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    try:  # root passes every access check, yet /proc or /sys take no new entry: try one
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".rewind-probe-")
    except OSError as e:
        return f"{folder} takes no new file ({e.strerror or e})"
    os.close(fd)
    os.unlink(probe)
    return ""


def is_safe_id(value: Any) -> bool:
    return isinstance(value, str) and SAFE_ID.fullmatch(value) is not None


def child_path(folder: str, name: Any, what: str = "run id") -> str:
    """`folder/name`, after checking that `name` is a plain name (`SAFE_ID`) and that the path,
    symlinks followed, stays inside `folder`; `InvalidRequest` naming the name otherwise."""
    if not is_safe_id(name):
        raise InvalidRequest(f"{what} {name!r} cannot name a folder: a {what} is "
                             f"{SAFE_ID_RULE} characters", field=what)
    path = os.path.join(folder, name)
    root = os.path.realpath(folder)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise InvalidRequest(f"{what} {name!r}: {path} leads outside {folder} (a symlink); "
                             "remove it or pick another folder", field=what)
    return path
