"""Code fingerprints, and the keys of values made of code: the part of a node's key that says which code (and which constants the code
names) produced its output, so an edit anywhere the node reaches in the user's code is a miss.

Two layers, hashed together:
- the legacy layer, unchanged since caches were first written (tests/test_golden.py): the
  node's source, the module-level constants and closure values it names, the same-module
  helpers and closure functions it calls, followed;
- the reach layer, present only when it is not empty, so a node that reaches nothing more keeps
  its old key: attributes read from other user modules (`prompts.SYSTEM`), helpers in other
  user modules (transitively, cycles cut), the methods and user-code bases of classes (class-
  based actions included) with what they use, bound methods' instances, partials' arguments,
  and the version of every installed package the code uses.

"User code" is anything outside the standard library and installed packages (site-packages,
dist-packages). Rewind's own modules are the framework: never followed and never versioned,
so upgrading Rewind does not invalidate every cache (the golden test guards its hashes).
Nothing process-specific enters a fingerprint: names, source text, canonical values only.

A `.bind()` value or runtime input with no canonical spelling (a function, a client object, a
dataclass of the user's) is keyed here too (`param_hash`): a function by its fingerprint, an
object of user code by its class's code and its attributes. The two recurse into each other
(a global holding an object, an object holding a function), so they share this module; the
walk itself lives below, in `keys.walk`.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from typing import Any, Callable, Optional

from ..errors import UnhashableValue
from .canonical import _ENCODER, _canon, _is_plain, canonical_hash, sha256_hex
from .codeorigin import USER, module_kind, type_name, version_of
from .objectparts import made_of_user_code
from .walk import _MISSING, _Walk, _unit


def _read_binding(where: tuple) -> Any:
    kind = where[0]
    if kind in ("g", "d"):  # a module's globals, a class's members
        return where[1].get(where[2], _MISSING)
    if kind == "c":
        try:
            return where[1].cell_contents
        except ValueError:
            return _MISSING
    if kind == "a":
        return getattr(where[1], where[2], _MISSING)
    return sys.modules.get(where[1], _MISSING)


# Fingerprints being computed on this thread: a function reached again through an object's
# state while its own walk is under way is keyed by name, so the walk ends.
_ACTIVE = threading.local()

# (fn, version) -> (mapping bindings to re-read, other bindings, digest, units), each binding with its object
_FINGERPRINTS: dict = {}


def _fingerprint(fn: Any, version: Optional[str]) -> tuple:
    try:
        memo = _FINGERPRINTS.get((fn, version))
    except TypeError:
        memo = None
    if memo is not None:
        gets, others = memo[0], memo[1]
        for mapping, name, o in gets:  # a module's globals, a class's members: no call each
            if mapping.get(name, _MISSING) is not o:
                break
        else:
            for w, o in others:
                if _read_binding(w) is not o:
                    break
            else:
                return memo
    walk = _Walk(param_hash)
    active = _ACTIVE.__dict__.setdefault("fns", set())
    active.add(id(fn))
    try:
        walk.legacy_visit(fn)
        walk.extend()
    finally:
        active.discard(id(fn))
    doc = {"code": walk.legacy, "version": version}
    if walk.reach:
        doc["deps"] = walk.reach
    digest = canonical_hash(doc)
    units = {u: canonical_hash(s, u) for u, s in sorted(walk.units.items())}
    if version is not None:
        units["version"] = canonical_hash(version)
    # the re-read of every call, split once: bindings read from a mapping, and the rest
    gets = [(w[1], w[2], o) for w, o in walk.bindings if w[0] in ("g", "d")]
    others = [(w, o) for w, o in walk.bindings if w[0] not in ("g", "d")]
    memo = (gets, others, digest, units)
    try:
        _FINGERPRINTS[(fn, version)] = memo
    except TypeError:
        pass
    return memo


def code_fingerprint(fn: Callable, version: Optional[str] = None) -> str:
    """The `code` hash of a node: its source, the constants and closure values it names, the
    helpers it calls (same module: the legacy layer; other user modules: followed), the module
    attributes it reads, its class's methods and bases, installed packages' versions, and
    `version`. Re-read on every call; recomputed only when a binding it read was rebound. A
    mutable global mutated in place keeps its first spelling, so a counter never makes every
    run miss."""
    return _fingerprint(fn, version)[2]


def describe_fingerprint(fn: Callable, version: Optional[str] = None) -> dict:
    """{unit: hash} of everything `code_fingerprint(fn, version)` covers: `mod.func` for code,
    `mod.NAME` for a constant or module attribute, `mod.func.var` for a closure value,
    `mod.Cls.method`, a distribution name (`openai`) for an installed package, `version`."""
    return dict(_fingerprint(fn, version)[3])


def changed_units(before: dict, after: dict) -> list:
    """The units whose hash differs between two `describe_fingerprint` results (added and
    removed ones included), sorted: what a miss reason names."""
    return sorted(u for u in set(before) | set(after) if before.get(u) != after.get(u))


def is_code(value: Any) -> bool:
    return (inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value)
            or inspect.isclass(value) or isinstance(value, functools.partial))


def code_key(value: Any) -> Any:
    """How a function or class given as a param is keyed: by its fingerprint when it is user
    code, by its qualified name and package version otherwise."""
    target = value.func if isinstance(value, functools.partial) else value
    target = getattr(target, "__func__", target)
    module = getattr(target, "__module__", None) or ""
    if id(value) in _ACTIVE.__dict__.get("fns", ()):
        return {"name": _unit(target)}
    if module_kind(module) == USER or isinstance(value, functools.partial) or inspect.ismethod(value):
        return {"fingerprint": code_fingerprint(value)}
    return {"name": _unit(target), "dist": version_of(module)}


def object_key(value: Any) -> Optional[str]:
    """How an object of user code (or Burr's) given as a param is keyed: by its class's code
    and its attributes, walked as a global holding it would be; None for any other object."""
    t = type(value)
    if not (module_kind(t.__module__ or "") == USER or made_of_user_code(t)):
        return None
    return _walked(value, lambda walk: walk.reach_value(value, "param"))


def user_code_key(value: Any) -> Optional[str]:
    """The code of the user's classes inside a value its fields spell (a dataclass, a pydantic
    model, a dict subclass) and what their instances hold besides: None when there are none."""
    return _walked(value, lambda walk: walk.reach_user_objects(value, "param"))


def _walked(value: Any, visit: Any) -> Optional[str]:
    """The digest of what `visit` finds on a fresh walk; None when it finds nothing, or when
    `value` is met again inside its own walk (it is known by its type there)."""
    busy = _ACTIVE.__dict__.setdefault("objects", set())
    if id(value) in busy:
        return None
    busy.add(id(value))
    try:
        walk = _Walk(param_hash)
        visit(walk)
        return canonical_hash(walk.reach) if walk.reach else None
    finally:
        busy.discard(id(value))


# --- params and runtime inputs ---------------------------------------------------------------


def param_hash(value: Any, where: str = "value") -> str:
    """The key of a `.bind()` value or runtime input: `canonical_hash(value)` for every value
    that has one (so those keys never change); otherwise a function by its code fingerprint,
    an object with a `rewind_key` attribute or method by that key, anything else by its type's
    qualified name and, for an installed package's type, that package's version. Raises
    `UnhashableValue` only for what can never be keyed: NaN, infinities, invalid Unicode."""
    try:
        if _is_plain(value):
            data = value
        else:
            data = _canon(value, where, 0, (True, _object_key))
            code = user_code_key(value)
            if code is not None:  # a dataclass (a pydantic model...) of the user's: its class too
                data = {"__value__": data, "__classes__": code}
        return sha256_hex(_ENCODER.encode(data).encode("utf-8"))
    except RecursionError:
        raise UnhashableValue(f"`{where}` is nested too deeply to hash; flatten it") from None
    except UnicodeEncodeError:
        raise UnhashableValue(
            f"`{where}` contains invalid Unicode (a lone surrogate); it cannot be encoded as UTF-8"
        ) from None


def _object_key(value: Any, path: str, depth: int) -> Any:
    how = (True, _object_key)
    has_key = "rewind_key" in (getattr(value, "__dict__", None) or {}) or hasattr(
        type(value), "rewind_key"
    )
    if has_key:
        key = value.rewind_key
        if callable(key):
            key = key()
        return {"__key__": type_name(type(value)),
                "v": _canon(key, f"{path}.rewind_key", depth + 1, how)}
    if is_code(value):
        return {"__code__": code_key(value)}
    walked = object_key(value)
    if walked is not None:  # the user's object: its code and what it holds
        return {"__object__": type_name(type(value)), "v": walked}
    return {"__type__": type_name(type(value)),
            "dist": version_of(type(value).__module__)}
