"""Type-preserving encoding of stored values (blobs): what a node wrote comes back with the same
type and value, so a cache hit, a fork or a new process hands downstream nodes exactly what a
real execution would, and a value's recomputed hash matches the one recorded for it.

Plain JSON data (dicts with str keys, lists, str, int, float, bool, None) is stored as JSON.
Everything else is a tagged object `{"__rw__": tag, ...}`: Decimal, datetime/date/time,
timedelta, bytes, set, frozenset, tuple, namedtuple, Counter, OrderedDict, defaultdict, deque,
complex, Fraction, range, UUID, Enum, Path, dataclasses, pydantic
models, numpy arrays (dtype and shape) and scalars, pandas DataFrames and Series, dicts with
keys JSON cannot spell. Users' own types: `register_type(cls, encode, decode)`; types
registered with Burr's serde (`burr.core.serde.serialize.register` plus a
`deserializer.register` for its key) are honoured too. Hashing never uses this encoding: see
`rewind.keys.canonical` (a registered type hashes as what its encoder returns).

Decoding imports the module a dataclass, Enum or model class was defined in, as Burr's own
pydantic serde does: the database is trusted like the code.
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
import io
import json
import math
import pathlib
import sys
import uuid
from typing import Any, Callable, Optional

from burr.core import serde as burr_serde

from ..keys import canonical
from ..errors import InvalidRequest, UnhashableValue
from .classrefs import UndecodableValue, class_ref, resolve as _resolve  # noqa: F401  (UndecodableValue: re-exported)

_TAG = "__rw__"
_RESERVED = (_TAG, burr_serde.KEY)
_MARKERS = (b'"' + _TAG.encode() + b'"', b'"' + burr_serde.KEY.encode() + b'"')




# --- users' types ---------------------------------------------------------------------------

_USER_TYPES: dict = {}     # class -> (name, encode)
_USER_DECODERS: dict = {}  # name -> decode


def register_type(cls: type, encode: Callable[[Any], Any], decode: Callable[[Any], Any],
                  name: Optional[str] = None) -> None:
    """Store and hash instances of `cls` (and its subclasses) through `encode(obj) -> data`
    and `decode(data) -> obj`. `data` is anything Rewind stores (plain JSON data, or any type
    listed in this module); it is also what the value hashes as. `name` (default
    `module.qualname`) is written with each value: keep it stable, or old values no longer
    decode. Register before the first run that writes or reads such a value."""
    if not isinstance(cls, type):
        raise InvalidRequest(f"register_type needs a class, not {type(cls).__name__}")
    if not callable(encode) or not callable(decode):
        raise InvalidRequest(f"register_type({cls.__qualname__}): encode and decode must be callables")
    name = name or f"{cls.__module__}.{cls.__qualname__}"
    _USER_TYPES[cls] = (name, encode)
    _USER_DECODERS[name] = decode
    canonical._REGISTERED[cls] = encode


def _user_type(t: type) -> Optional[tuple]:
    for base in t.__mro__:
        got = _USER_TYPES.get(base)
        if got is not None:
            return got
    return None


_DICTS = {collections.Counter: "counter", collections.OrderedDict: "odict",
          collections.defaultdict: "defaultdict"}


def _factory_ref(factory: Any, path: str) -> str:
    """A defaultdict's default_factory by name: a type or a module-level function."""
    qualname = getattr(factory, "__qualname__", "")
    if not getattr(factory, "__module__", None) or not qualname or "<" in qualname:
        raise UnhashableValue(
            f"`{path}` is a defaultdict whose default_factory ({factory!r}) has no importable "
            "name; use a type (list, int) or a function defined at module level")
    return class_ref(factory, path)


# --- encoding -------------------------------------------------------------------------------


def _plain(value: Any, depth: int = 0) -> bool:
    """Is `value` JSON data that decodes back to itself (exact types, no reserved keys)?"""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return True
    if t is float:
        return math.isfinite(value)
    if depth > 100:
        return False
    if t is list:
        return all(_plain(v, depth + 1) for v in value)
    if t is dict:
        return all(type(k) is str and k not in _RESERVED and _plain(v, depth + 1)
                   for k, v in value.items())
    return False


def _enc(value: Any, path: str, depth: int) -> Any:
    if depth > 500:
        raise UnhashableValue(f"`{path}` is nested more than 500 levels deep; flatten it")
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float:
        if not math.isfinite(value):
            raise UnhashableValue(f"`{path}` is {value!r}, which Rewind cannot store; use None")
        return value
    if _USER_TYPES:
        user = _user_type(t)
        if user is not None:
            return {_TAG: "user", "type": user[0], "v": _enc(user[1](value), path, depth + 1)}
    if t is dict:
        if all(type(k) is str and k not in _RESERVED for k in value):
            return {k: _enc(v, f"{path}.{k}", depth + 1) for k, v in value.items()}
        return {_TAG: "dict", "v": [
            [_enc(k, f"{path}<key>", depth + 1), _enc(v, f"{path}.{k}", depth + 1)]
            for k, v in value.items()
        ]}
    if t in _DICTS:  # collections' dicts: their pairs in order, a defaultdict's factory
        out = {_TAG: _DICTS[t], "v": [[_enc(k, f"{path}<key>", depth + 1), _enc(v, f"{path}.{k}", depth + 1)]
                                      for k, v in value.items()]}
        if t is collections.defaultdict and value.default_factory is not None:
            out["factory"] = _factory_ref(value.default_factory, path)
        return out
    if t is list:
        return [_enc(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if t is collections.deque:
        out = {_TAG: "deque", "v": [_enc(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]}
        if value.maxlen is not None:
            out["maxlen"] = value.maxlen
        return out
    if t is complex:
        if not (math.isfinite(value.real) and math.isfinite(value.imag)):
            raise UnhashableValue(f"`{path}` is {value!r}, which Rewind cannot store; use None")
        return {_TAG: "complex", "v": [value.real, value.imag]}
    if t is fractions.Fraction:
        return {_TAG: "fraction", "v": [value.numerator, value.denominator]}
    if t is range:
        return {_TAG: "range", "v": [value.start, value.stop, value.step]}
    if t is tuple:
        return {_TAG: "tuple", "v": [_enc(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]}
    if isinstance(value, enum.Enum):
        return {_TAG: "enum", "cls": class_ref(t, path), "v": value.name}
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, (np.ndarray, np.generic)):
        return _enc_numpy(np, value, path, depth)
    if t in (set, frozenset):
        items = [_enc(v, f"{path}{{}}", depth + 1) for v in value]
        items.sort(key=lambda x: json.dumps(x, sort_keys=True, ensure_ascii=False))
        return {_TAG: t.__name__, "v": items}
    if t is datetime.datetime:
        out = {_TAG: "datetime", "v": value.isoformat()}
        _add_zone(out, value)
        return out
    if t is datetime.date:
        return {_TAG: "date", "v": value.isoformat()}
    if t is datetime.time:
        out = {_TAG: "time", "v": value.isoformat()}
        _add_zone(out, value)
        return out
    if t is datetime.timedelta:
        return {_TAG: "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    if t is decimal.Decimal:
        return {_TAG: "decimal", "v": str(value)}
    if t is bytes or t is bytearray or t is memoryview:
        tag = "bytearray" if t is bytearray else "bytes"
        return {_TAG: tag, "v": base64.b64encode(bytes(value)).decode("ascii")}
    if t is uuid.UUID:
        return {_TAG: "uuid", "v": str(value)}
    if isinstance(value, pathlib.PurePath):
        return {_TAG: "path", "cls": class_ref(t, path), "v": str(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {_TAG: "namedtuple", "cls": class_ref(t, path),
                "v": [_enc(v, f"{path}.{f}", depth + 1) for f, v in zip(value._fields, value)]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {_TAG: "dataclass", "cls": class_ref(t, path), "v": {
            f.name: _enc(getattr(value, f.name), f"{path}.{f.name}", depth + 1)
            for f in dataclasses.fields(value)
        }}
    if hasattr(t, "model_fields") and hasattr(value, "model_fields_set") and not isinstance(value, type):
        return _enc_pydantic(value, path, depth)
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(value, (pd.DataFrame, pd.Series)):
        return _enc_pandas(pd, value, path, depth)
    burr = canonical._burr_serialized(value)
    if burr is not None:
        return {_TAG: "burr", "v": _enc(burr, path, depth + 1)}
    raise UnhashableValue(
        f"`{path}` is a {t.__module__}.{t.__qualname__}, which Rewind cannot store with its type; "
        "store plain data, a dataclass or a pydantic model, or give the type an encoding with "
        "`rewind.register_type(cls, encode, decode)`"
    )


def _add_zone(out: dict, value: Any) -> None:
    key = getattr(value.tzinfo, "key", None)  # a zoneinfo zone: its name, not just an offset
    if isinstance(key, str):
        out["tz"] = key
    if value.fold:
        out["fold"] = 1


def _enc_numpy(np: Any, value: Any, path: str, depth: int) -> dict:
    descr = np.lib.format.dtype_to_descr(value.dtype)
    if isinstance(value, np.generic):
        return {_TAG: "npscalar", "dtype": _enc(descr, path, depth + 1),
                "v": base64.b64encode(value.tobytes()).decode("ascii")}
    if type(value) is not np.ndarray:
        raise UnhashableValue(f"`{path}` is a {type(value).__qualname__}; store a plain numpy array")
    out = {_TAG: "ndarray", "dtype": _enc(descr, path, depth + 1), "shape": list(value.shape)}
    if value.dtype.hasobject:
        out["items"] = [_enc(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value.ravel().tolist())]
    else:
        out["v"] = base64.b64encode(np.ascontiguousarray(value).tobytes()).decode("ascii")
    return out


def _enc_pydantic(value: Any, path: str, depth: int) -> dict:
    fields = {name: getattr(value, name) for name in type(value).model_fields}
    out = {_TAG: "pydantic", "cls": class_ref(type(value), path),
           "v": _enc(fields, path, depth + 1),
           "set": sorted(value.model_fields_set)}
    extra = getattr(value, "__pydantic_extra__", None)
    if extra:
        out["extra"] = _enc(dict(extra), path, depth + 1)
    return out


def _enc_pandas(pd: Any, value: Any, path: str, depth: int) -> dict:
    """Parquet (exact dtypes, index and names) where pyarrow can write the frame; otherwise
    columns with their dtype names."""
    is_series = isinstance(value, pd.Series)
    frame = value.to_frame(name="__series__") if is_series else value
    out: dict = {_TAG: "series" if is_series else "dataframe"}
    if is_series:
        out["name"] = _enc(value.name, path, depth + 1)
    try:
        buf = io.BytesIO()
        frame.to_parquet(buf)
        out["parquet"] = base64.b64encode(buf.getvalue()).decode("ascii")
        return out
    except Exception:
        pass
    out["columns"] = _enc(list(frame.columns), path, depth + 1)
    out["index"] = _enc(frame.index.tolist(), path, depth + 1)
    out["dtypes"] = [str(frame[c].dtype) for c in frame.columns]
    out["data"] = [_enc(frame.iloc[:, i].tolist(), f"{path}.{c}", depth + 1)
                   for i, c in enumerate(frame.columns)]
    return out


def encode(value: Any, field: str = "value") -> bytes:
    """Encode one value for storage; `UnhashableValue` naming `field` if it cannot be."""
    try:
        data = value if _plain(value) else _enc(value, field, 0)
        return json.dumps(data, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode("utf-8")
    except RecursionError:
        raise UnhashableValue(f"`{field}` is nested too deeply to store; flatten it") from None
    except UnicodeEncodeError:
        raise UnhashableValue(
            f"`{field}` contains invalid Unicode (a lone surrogate); it cannot be stored"
        ) from None
    except (TypeError, ValueError) as e:
        raise UnhashableValue(f"`{field}` cannot be stored: {e}", field=field) from None


def blob_ref(data: bytes) -> str:
    """The address to store `encode`'s bytes under: their own sha256. Values that share a
    canonical hash (a tuple and a list, a date and its ISO string, 1 and 1.0) encode apart, so
    keyed by this they never share a stored copy; for canonical JSON bytes (most plain data)
    it equals the value's canonical hash."""
    return hashlib.sha256(data).hexdigest()


# --- decoding -------------------------------------------------------------------------------


def _zone(obj: dict, value: Any) -> Any:
    key = obj.get("tz")
    if key:
        import zoneinfo

        value = value.replace(tzinfo=zoneinfo.ZoneInfo(key))
    if obj.get("fold"):
        value = value.replace(fold=1)
    return value


def _dec_numpy(obj: dict, scalar: bool) -> Any:
    import numpy as np

    descr = obj["dtype"]
    if isinstance(descr, list):
        descr = [tuple(d) if isinstance(d, list) else d for d in descr]
    dtype = np.lib.format.descr_to_dtype(descr)
    if scalar:
        return np.frombuffer(base64.b64decode(obj["v"]), dtype=dtype)[0]
    shape = tuple(obj["shape"])
    if "items" in obj:
        arr = np.empty(len(obj["items"]), dtype=object)
        arr[:] = obj["items"]
        return arr.reshape(shape)
    return np.frombuffer(base64.b64decode(obj["v"]), dtype=dtype).reshape(shape).copy()


def _dec_pandas(obj: dict) -> Any:
    import pandas as pd

    if "parquet" in obj:
        frame = pd.read_parquet(io.BytesIO(base64.b64decode(obj["parquet"])))
    else:
        frame = pd.DataFrame(
            {i: pd.Series(col, dtype=dt) for i, (col, dt) in enumerate(zip(obj["data"], obj["dtypes"]))}
        )
        frame.columns = obj["columns"]
        frame.index = obj["index"]
    if obj[_TAG] == "series":
        series = frame["__series__"] if "parquet" in obj else frame.iloc[:, 0]
        series.name = obj.get("name")
        return series
    return frame


def _dec_pydantic(obj: dict) -> Any:
    cls = _resolve(obj["cls"])
    values = dict(obj["v"])
    if obj.get("extra"):
        values.update(obj["extra"])
    return cls.model_construct(_fields_set=set(obj.get("set") or values), **values)


def _dec_dataclass(obj: dict) -> Any:
    cls = _resolve(obj["cls"])
    inst = cls.__new__(cls)
    for name, value in obj["v"].items():
        object.__setattr__(inst, name, value)  # frozen ones too; __post_init__ already ran
    return inst


def _dec_user(obj: dict) -> Any:
    decoder = _USER_DECODERS.get(obj["type"])
    if decoder is None:
        raise UndecodableValue(
            f"a stored value is a `{obj['type']}`, registered with rewind.register_type in the "
            "process that wrote it but not in this one: register it before reading the run"
        )
    return decoder(obj["v"])


_DECODERS: dict = {
    "datetime": lambda o: _zone(o, datetime.datetime.fromisoformat(o["v"])),
    "date": lambda o: datetime.date.fromisoformat(o["v"]),
    "time": lambda o: _zone(o, datetime.time.fromisoformat(o["v"])),
    "timedelta": lambda o: datetime.timedelta(days=o["v"][0], seconds=o["v"][1], microseconds=o["v"][2]),
    "decimal": lambda o: decimal.Decimal(o["v"]),
    "set": lambda o: set(o["v"]),
    "frozenset": lambda o: frozenset(o["v"]),
    "tuple": lambda o: tuple(o["v"]),
    "bytes": lambda o: base64.b64decode(o["v"]),
    "bytearray": lambda o: bytearray(base64.b64decode(o["v"])),
    "uuid": lambda o: uuid.UUID(o["v"]),
    "dict": lambda o: {k: v for k, v in o["v"]},
    "enum": lambda o: _resolve(o["cls"])[o["v"]],
    "path": lambda o: _resolve(o["cls"])(o["v"]),
    "namedtuple": lambda o: _resolve(o["cls"])(*o["v"]),
    "dataclass": _dec_dataclass,
    "pydantic": _dec_pydantic,
    "ndarray": lambda o: _dec_numpy(o, scalar=False),
    "npscalar": lambda o: _dec_numpy(o, scalar=True),
    "dataframe": _dec_pandas,
    "series": _dec_pandas,
    "user": _dec_user,
    "counter": lambda o: collections.Counter(dict(o["v"])),
    "odict": lambda o: collections.OrderedDict(o["v"]),
    "defaultdict": lambda o: collections.defaultdict(
        _resolve(o["factory"]) if "factory" in o else None, o["v"]),
    "deque": lambda o: collections.deque(o["v"], o.get("maxlen")),
    "complex": lambda o: complex(*o["v"]),
    "fraction": lambda o: fractions.Fraction(*o["v"]),
    "range": lambda o: range(*o["v"]),
    "burr": lambda o: burr_serde.deserialize(o["v"]),
}


def _hook(obj: dict) -> Any:
    tag = obj.get(_TAG)
    if tag is None:
        if burr_serde.KEY in obj:  # written by Burr's serde (older Rewind stored pydantic so)
            return burr_serde.deserialize(obj)
        return obj
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise UndecodableValue(f"a stored value has the tag {tag!r}, which this Rewind does not know")
    return decoder(obj)


def decode(data: bytes) -> Any:
    if not any(m in data for m in _MARKERS):
        return json.loads(data)  # fast path: plain JSON data, the common case
    return json.loads(data, object_hook=_hook)
