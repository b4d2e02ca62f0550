"""Canonical JSON and content hashes: the identity of every input, output and blob.

One value has one canonical spelling: sorted keys, no insignificant whitespace, UTF-8, integral
floats written as integers, -0.0 as 0. Values with no deterministic encoding (NaN, Infinity,
objects whose only spelling is a repr with a memory address, lone surrogates) are refused with
the path of the offending field, never hashed as `str(obj)`.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import datetime
import decimal
import enum
import fractions
import hashlib
import json
import math
import pathlib
import sys
import uuid
from typing import Any, Callable, Iterable, Optional

from ..errors import UnhashableValue

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
    return _canon(value, path, depth, _EXTENDED)


# How far `_canon` goes: the legacy set (what hashed before numpy, paths, registered types and
# non-scalar dict keys got encodings; code fingerprints spell constants with it so their hashes
# stay put) or everything, and what to do with an object that has no encoding (raise, or key it).
_LEGACY = (False, None)
_EXTENDED = (True, None)


def _canon(value: Any, path: str, depth: int, how: tuple) -> Any:
    if depth > 500:  # (a value that holds itself ends here too: its path repeats)
        shown = path if len(path) <= 120 else f"{path[:60]}…{path[-40:]}"
        raise UnhashableValue(f"`{shown}` is nested more than 500 levels deep (a value that "
                              "holds itself?); flatten it", field=path.split(".")[0])
    if isinstance(value, _PRIMITIVES):
        if isinstance(value, str):
            return value
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, enum.Enum):
            return _canon(value.value, path, depth + 1, how)
        return int(value)
    extended = how[0]
    if extended and _REGISTERED:
        hook = _registered_encoder(type(value))
        if hook is not None:
            return _canon(hook(value), path, depth + 1, how)
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
                if extended:
                    return _canon_items(value, path, depth, how)
                raise UnhashableValue(
                    f"`{path}` has a key of type {type(k).__name__}; only str/int/float/bool keys hash"
                )
            sk = k if isinstance(k, str) else json.dumps(k)
            if sk in out:
                raise UnhashableValue(f"`{path}` has two keys that both spell {sk!r}")
            out[sk] = _canon(v, _path(path, sk), depth + 1, how)
        return out
    if isinstance(value, (list, tuple, collections.deque)):
        return [_canon(v, f"{path}[{i}]", depth + 1, how) for i, v in enumerate(value)]
    if isinstance(value, complex):
        if not (math.isfinite(value.real) and math.isfinite(value.imag)):
            raise UnhashableValue(f"`{path}` is {value!r}, which has no canonical JSON encoding; "
                                  "use None or a string")
        return {"__complex__": [_canon(value.real, path, depth + 1, how),
                                _canon(value.imag, path, depth + 1, how)]}
    if isinstance(value, fractions.Fraction):
        return {"__fraction__": [value.numerator, value.denominator]}
    if isinstance(value, range):
        return {"__range__": [value.start, value.stop, value.step]}
    if isinstance(value, (set, frozenset)):
        items = [_canon(v, f"{path}{{}}", depth + 1, how) for v in value]
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
        return _canon(value.value, path, depth + 1, how)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _canon(
            {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, path, depth + 1, how
        )
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):  # pydantic v2
        return _canon(model_dump(mode="python"), path, depth + 1, how)
    if hasattr(value, "_asdict") and callable(value._asdict) and not isinstance(value, type):
        return _canon(dict(value._asdict()), path, depth + 1, how)
    if extended:
        got = _canon_extended(value, path, depth, how)
        if got is not _MISSING:
            return got
        if how[1] is not None:
            return how[1](value, path, depth)
    raise UnhashableValue(
        f"`{path}` is a {type(value).__module__}.{type(value).__qualname__}, which has no "
        "deterministic encoding; store plain data (dict, list, str, numbers), a dataclass or a "
        "pydantic model in state instead, or give the type an encoding with "
        "`rewind.register_type(cls, encode, decode)`"
    )


_MISSING = object()


def _canon_items(value: dict, path: str, depth: int, how: tuple) -> dict:
    """A dict with keys JSON cannot spell (tuples, dates, numpy ints): its items, sorted."""
    items = [
        [_canon(k, f"{path}<key>", depth + 1, how), _canon(v, _path(path, repr(k)), depth + 1, how)]
        for k, v in value.items()
    ]
    items.sort(key=lambda kv: _ENCODER.encode(kv[0]))
    for a, b in zip(items, items[1:]):
        if _ENCODER.encode(a[0]) == _ENCODER.encode(b[0]):
            raise UnhashableValue(f"`{path}` has two keys that both spell {a[0]!r}")
    return {"__items__": items}


def _canon_extended(value: Any, path: str, depth: int, how: tuple) -> Any:
    """Encodings added after the legacy set: numpy, pandas, paths, types registered with Burr's
    serde. `_MISSING` when none applies."""
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(value, np.ndarray):
            return {"__ndarray__": _ndarray_canon(np, value, path, depth, how)}
        if isinstance(value, np.generic):
            return _canon(value.item(), path, depth + 1, how)
    pd = sys.modules.get("pandas")
    if pd is not None:
        if isinstance(value, pd.DataFrame):
            return {"__dataframe__": {
                "columns": _canon(list(value.columns), f"{path}.columns", depth + 1, how),
                "index": _pandas_column(np, value.index, f"{path}.index", depth, how),
                "data": [
                    _pandas_column(np, value.iloc[:, i], f"{path}.{c}", depth, how)
                    for i, c in enumerate(value.columns)
                ],
            }}
        if isinstance(value, pd.Series):
            return {"__series__": {
                "name": _canon(value.name, f"{path}.name", depth + 1, how),
                "index": _pandas_column(np, value.index, f"{path}.index", depth, how),
                "data": _pandas_column(np, value, path, depth, how),
            }}
    if isinstance(value, pathlib.PurePath):
        return {"__path__": str(value)}
    burr = _burr_serialized(value)
    if burr is not None:
        return _canon(burr, path, depth + 1, how)
    return _MISSING


def _ndarray_canon(np: Any, a: Any, path: str, depth: int, how: tuple) -> dict:
    descr = np.lib.format.dtype_to_descr(a.dtype)
    out = {"dtype": _canon(descr, path, depth + 1, how), "shape": list(a.shape)}
    if a.dtype.hasobject:
        out["items"] = _canon(a.tolist(), path, depth + 1, how)
    else:
        out["data"] = base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")
    return out


def _pandas_column(np: Any, col: Any, path: str, depth: int, how: tuple) -> dict:
    """One column (or index) of a frame: its dtype and values; missing values spell as None."""
    dtype = str(col.dtype)
    arr = getattr(col, "values", col)
    if np is not None and isinstance(arr, np.ndarray) and not arr.dtype.hasobject:
        return {"dtype": dtype, "data": _ndarray_canon(np, arr, path, depth, how)}
    import pandas as pd

    items = [None if _is_na(pd, v) else v for v in col.tolist()]
    return {"dtype": dtype, "items": _canon(items, path, depth + 1, how)}


def _is_na(pd: Any, v: Any) -> bool:
    if isinstance(v, (list, tuple, dict, set, frozenset)):
        return False
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _burr_serialized(value: Any) -> Optional[dict]:
    """What a serializer registered with Burr's serde (`burr.core.serde.serialize.register`)
    makes of `value`, when one is registered for its type and makes a tagged dict."""
    from burr.core import serde as burr_serde

    fn = burr_serde.serialize.dispatch(type(value))
    if fn is burr_serde.serialize.dispatch(object):
        return None
    try:
        got = fn(value)
    except Exception:
        return None
    return got if isinstance(got, dict) and burr_serde.KEY in got else None


# Users' own encoders, by type (filled by `rewind.store.serde.register_type`): hashing spells a
# registered value as whatever its encoder returns.
_REGISTERED: dict = {}


def _registered_encoder(t: type) -> Optional[Callable]:
    for base in t.__mro__:
        got = _REGISTERED.get(base)
        if got is not None:
            return got
    return None


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
    except ValueError as e:  # Python refuses to spell integers of more than 4,300 digits
        if "integer string conversion" not in str(e):
            raise
        raise UnhashableValue(
            f"`{path}` holds an integer of more than 4,300 digits, which has no JSON spelling "
            "here; store it as a string", field=path) from None


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
