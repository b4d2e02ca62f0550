"""Type-preserving encoding of stored values (blobs), so a cache hit hands downstream nodes the
same Python types a real execution would.

Burr's serde registry handles what it knows (pydantic models, registered types); datetimes,
sets, tuples and bytes are tagged here. Hashing never uses this encoding: see `hashing`.
"""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

from burr.core import serde as burr_serde

from .errors import UnhashableValue

_TAG = "__rw__"
_MARKERS = (b'"' + _TAG.encode() + b'"', b'"' + burr_serde.KEY.encode() + b'"')


def _default(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return {_TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, datetime.date):
        return {_TAG: "date", "v": value.isoformat()}
    if isinstance(value, (set, frozenset)):
        return {_TAG: "set", "v": list(value)}
    if isinstance(value, (bytes, bytearray)):
        return {_TAG: "bytes", "v": base64.b64encode(bytes(value)).decode("ascii")}
    serialized = burr_serde.serialize(value)
    if serialized is value:
        raise TypeError(f"no encoding for {type(value).__name__}")
    return serialized


def _mark_tuples(value: Any) -> Any:
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {_TAG: "tuple", "v": [_mark_tuples(v) for v in value]}
    if isinstance(value, list):
        return [_mark_tuples(v) for v in value]
    if isinstance(value, dict):
        return {k: _mark_tuples(v) for k, v in value.items()}
    return value


def _needs_tuple_marks(value: Any, depth: int = 0) -> bool:
    if depth > 50:
        return False
    if isinstance(value, tuple):
        return True
    if isinstance(value, list):
        return any(_needs_tuple_marks(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_needs_tuple_marks(v, depth + 1) for v in value.values())
    return False


def encode(value: Any, field: str = "value") -> bytes:
    """Encode one value for storage; `UnhashableValue` naming `field` if it cannot be."""
    try:
        if _needs_tuple_marks(value):
            value = _mark_tuples(value)
        return json.dumps(
            value, default=_default, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode("utf-8")
    except RecursionError:
        raise UnhashableValue(f"`{field}` is nested too deeply to store; flatten it") from None
    except (TypeError, ValueError, UnicodeEncodeError) as e:
        raise UnhashableValue(f"`{field}` cannot be stored: {e}") from None


def _hook(obj: dict) -> Any:
    tag = obj.get(_TAG)
    if tag is None:
        return obj
    v = obj.get("v")
    if tag == "datetime":
        return datetime.datetime.fromisoformat(v)
    if tag == "date":
        return datetime.date.fromisoformat(v)
    if tag == "set":
        return set(v)
    if tag == "bytes":
        return base64.b64decode(v)
    if tag == "tuple":
        return tuple(v)
    return obj


def decode(data: bytes) -> Any:
    if not any(m in data for m in _MARKERS):
        return json.loads(data)  # fast path: plain JSON data, the common case
    value = json.loads(data, object_hook=_hook)
    if _MARKERS[1] in data:
        value = burr_serde.deserialize(value)
    return value
