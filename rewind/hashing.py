"""Canonical JSON and content hashes: the identity of every input, output and blob.

One value has one canonical spelling: sorted keys, no insignificant whitespace, UTF-8, integral
floats written as integers, -0.0 as 0. Values with no deterministic encoding (NaN, Infinity,
objects whose only spelling is a repr with a memory address, lone surrogates) are refused with
the path of the offending field, never hashed as `str(obj)`.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import hashlib
import inspect
import json
import math
import types
import uuid
from typing import Any, Callable, Iterable, Optional

from .errors import UnhashableValue

# Burr's own bookkeeping keys (`__SEQUENCE_ID`, `__PRIOR_STEP`, ...) are never hashed.
BURR_INTERNAL_PREFIX = "__"

_PRIMITIVES = (str, int, bool, type(None))
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def is_internal_key(key: str) -> bool:
    return isinstance(key, str) and key.startswith(BURR_INTERNAL_PREFIX)


def _path(parent: str, key: Any) -> str:
    return f"{parent}.{key}" if parent else str(key)


def to_canonical(value: Any, path: str = "value", depth: int = 0) -> Any:
    """Turn `value` into plain JSON data with one spelling per value, or raise naming `path`."""
    if depth > 500:
        raise UnhashableValue(f"`{path}` is nested more than 500 levels deep; flatten it")
    if isinstance(value, _PRIMITIVES):
        if isinstance(value, str):
            return value
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, enum.Enum):
            return to_canonical(value.value, path, depth + 1)
        return int(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise UnhashableValue(
                f"`{path}` is {value!r}, which has no canonical JSON encoding; use None or a string"
            )
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, enum.Enum):
                k = k.value
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                raise UnhashableValue(
                    f"`{path}` has a key of type {type(k).__name__}; only str/int/float/bool keys hash"
                )
            sk = k if isinstance(k, str) else json.dumps(k)
            if sk in out:
                raise UnhashableValue(f"`{path}` has two keys that both spell {sk!r}")
            out[sk] = to_canonical(v, _path(path, sk), depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [to_canonical(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [to_canonical(v, f"{path}{{}}", depth + 1) for v in value]
        return sorted(items, key=lambda x: _ENCODER.encode(x))
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return {"__timedelta__": value.total_seconds()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise UnhashableValue(f"`{path}` is {value}, which has no canonical encoding")
        return str(value.normalize())
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return to_canonical(value.value, path, depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_canonical(
            {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, path, depth + 1
        )
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):  # pydantic v2
        return to_canonical(model_dump(mode="python"), path, depth + 1)
    if hasattr(value, "_asdict") and callable(value._asdict):  # namedtuple-like
        return to_canonical(dict(value._asdict()), path, depth + 1)
    raise UnhashableValue(
        f"`{path}` is a {type(value).__module__}.{type(value).__qualname__}, which has no "
        "deterministic encoding; store plain data (dict, list, str, numbers), a dataclass or a "
        "pydantic model in state instead"
    )


def _find_bad_unicode(value: Any, path: str) -> Optional[str]:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            bad = _find_bad_unicode(k, _path(path, "<key>")) or _find_bad_unicode(v, _path(path, k))
            if bad:
                return bad
    if isinstance(value, list):
        for i, v in enumerate(value):
            bad = _find_bad_unicode(v, f"{path}[{i}]")
            if bad:
                return bad
    return None


def _is_plain(value: Any, depth: int = 0) -> bool:
    """True when `value` is already canonical JSON data (str keys; str, int, bool, None,
    non-integral finite floats; lists, tuples and dicts of those), so `to_canonical` would
    return an equal value: the common case (hash maps, texts, parsed JSON) skips its walk."""
    t = type(value)
    if t is dict:
        if depth > 100:
            return False
        for k, v in value.items():
            if type(k) is not str:
                return False
            tv = type(v)
            if tv is str or tv is int or tv is bool or v is None:
                continue
            if not _is_plain(v, depth + 1):
                return False
        return True
    if t is list or t is tuple:
        if depth > 100:
            return False
        for v in value:
            tv = type(v)
            if tv is str or tv is int or tv is bool or v is None:
                continue
            if not _is_plain(v, depth + 1):
                return False
        return True
    if t is str or t is int or t is bool or value is None:
        return True
    if t is float:
        return math.isfinite(value) and not value.is_integer()
    return False


def canonical_json(value: Any, path: str = "value") -> bytes:
    """The canonical JSON bytes of `value` (UTF-8)."""
    data = value
    try:
        if not _is_plain(value):
            data = to_canonical(value, path)
        return _ENCODER.encode(data).encode("utf-8")
    except RecursionError:
        raise UnhashableValue(f"`{path}` is nested too deeply to hash; flatten it") from None
    except UnicodeEncodeError:
        bad = _find_bad_unicode(to_canonical(value, path), path) or path
        raise UnhashableValue(
            f"`{bad}` contains invalid Unicode (a lone surrogate); it cannot be encoded as UTF-8"
        ) from None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_hash(value: Any, path: str = "value") -> str:
    """The hex sha256 of the canonical JSON of `value`; `RewindError` if it has no encoding."""
    return sha256_hex(canonical_json(value, path))


def strip_ignored(value: Any, ignore: Iterable[str]) -> Any:
    """Drop ignored keys: a plain name at any depth of nested dicts, a dotted name as a path."""
    names = {n for n in ignore if "." not in n}
    paths = [n.split(".") for n in ignore if "." in n]
    if not names and not paths:
        return value

    def walk(v: Any, trail: tuple) -> Any:
        if isinstance(v, dict):
            out = {}
            for k, item in v.items():
                here = trail + (str(k),)
                if k in names or any(list(here) == p for p in paths):
                    continue
                out[k] = walk(item, here)
            return out
        if isinstance(v, (list, tuple)):
            return [walk(item, trail) for item in v]
        return v

    return walk(value, ())


def field_hashes(values: dict, ignore: Iterable[str] = ()) -> dict:
    """Per-field canonical hashes of a mapping, skipping Burr-internal and ignored fields."""
    ignore = tuple(ignore)
    top_ignored = {n for n in ignore if "." not in n}
    out = {}
    for key, value in values.items():
        if is_internal_key(key) or key in top_ignored:
            continue
        sub_ignore = [n for n in ignore if "." not in n] + [
            n.split(".", 1)[1] for n in ignore if "." in n and n.split(".", 1)[0] == key
        ]
        v = strip_ignored(value, sub_ignore) if (sub_ignore and isinstance(value, (dict, list))) else value
        out[key] = canonical_hash(v, key)
    return out


def canonical_parts(values: dict, path: str = "") -> dict:
    """The canonical JSON bytes of each field of a mapping (Burr-internal keys skipped)."""
    return {
        k: canonical_json(v, _path(path, k))
        for k, v in values.items()
        if not is_internal_key(k)
    }


def join_parts(parts: dict) -> bytes:
    """The canonical JSON of a mapping, assembled from its fields' canonical JSON."""
    body = b",".join(
        _ENCODER.encode(k).encode("utf-8") + b":" + parts[k] for k in sorted(parts)
    )
    return b"{" + body + b"}"


def combine(parts: dict) -> str:
    """Hash a mapping of already-computed hashes and small values."""
    return canonical_hash(parts)


# --- code fingerprints --------------------------------------------------------------------

# A function object's source never changes, so it is read once; the constants, closure values
# and helpers it names can be rebound at any time, so they are looked up on every fingerprint.
_SOURCES: dict = {}


def _constant_value(value: Any) -> Any:
    """The hashable spelling of a module-level constant or closure value, or None to skip it."""
    if isinstance(value, (types.ModuleType, type)):
        return None
    if callable(value):
        return None
    try:
        return to_canonical(value)
    except Exception:
        return None


def _code_text(fn: Callable) -> str:
    try:
        got = _SOURCES.get(fn)
    except TypeError:
        got = None
    if got is not None:
        return got
    try:
        got = inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        if code is None:
            got = repr(getattr(fn, "__qualname__", type(fn).__name__))
        else:
            got = code.co_code.hex() + repr(code.co_consts)
    try:
        _SOURCES[fn] = got
    except TypeError:
        pass
    return got


def _names_used(code: types.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_used(const)
    return names


_MISSING = object()


def _named_values(fn: Callable) -> list:
    """[(function, name, value, where)] for every global and closure value the function and the
    same-module helpers it calls name, helpers followed, in a stable order. `where` says how to
    read the binding again: ("g", globals, name) or ("c", cell); None for a function's own code."""
    seen: set = set()
    out: list = []

    def visit(f: Callable) -> None:
        f = inspect.unwrap(f) if callable(f) else f
        if id(f) in seen:
            return
        seen.add(id(f))
        out.append((f, None, None, None))
        code = getattr(f, "__code__", None)
        if code is None:
            return
        g = getattr(f, "__globals__", {})
        named = [(n, g[n], ("g", g, n)) for n in sorted(_names_used(code)) if n in g]
        for cell_name, cell in zip(code.co_freevars, f.__closure__ or ()):
            try:
                named.append((cell_name, cell.cell_contents, ("c", cell)))
            except ValueError:
                continue
        for name, value, where in named:
            if inspect.isfunction(value) and (
                value.__module__ == getattr(f, "__module__", None) or where[0] == "c"
            ):
                out.append((f, name, value, where))  # a rebound helper changes the plan
                visit(value)
            else:
                out.append((f, name, value, where))

    visit(fn)
    return out


def _read_binding(where: tuple) -> Any:
    if where[0] == "g":
        return where[1].get(where[2], _MISSING)
    try:
        return where[1].cell_contents
    except ValueError:
        return _MISSING


# (fn, version) -> (bindings to re-read, the objects they were bound to, digest)
_FINGERPRINTS: dict = {}


def code_fingerprint(fn: Callable, version: Optional[str] = None) -> str:
    """Hash of a node's source, the module constants and closure values it names, and `version`.

    Functions of the same module that the node calls are followed too, so editing a helper or
    rebinding a prompt constant invalidates the cache instead of serving a stale output. Values
    are spelled again when a name is bound to a new object; a mutable global the node only
    mutates in place (a call log, a counter) keeps its first spelling, so it never makes every
    run miss.
    """
    try:
        memo = _FINGERPRINTS.get((fn, version))
    except TypeError:
        memo = None
    if memo is not None:
        wheres, objects, digest = memo
        if all(_read_binding(w) is o for w, o in zip(wheres, objects)):
            return digest
    named = _named_values(fn)
    parts: list = []
    for f, name, value, _where in named:
        if name is None:
            parts.append(_code_text(f))
            continue
        if inspect.isfunction(value):
            continue  # followed: its code and names are parts of their own
        spelled = _constant_value(value)
        if spelled is not None:
            parts.append([name, spelled])
    digest = canonical_hash({"code": parts, "version": version})
    bound = [(w, v) for _f, name, v, w in named if name is not None]
    try:
        _FINGERPRINTS[(fn, version)] = ([w for w, _ in bound], [v for _, v in bound], digest)
    except TypeError:
        pass
    return digest
