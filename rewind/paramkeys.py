"""How a value given to a node with `.bind()` (or as a runtime input) is keyed when it has no
canonical encoding (`hashing.param_hash` asks here): a function or class by its code
fingerprint, an object of the user's code (or Burr's) by its class's code and its attributes,
as a global holding it would be."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Optional

from . import hashing
from .codeorigin import USER, module_kind, version_of
from .fingerprint import _ACTIVE, _Walk, _unit, code_fingerprint
from .objectparts import made_of_user_code


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
        walk = _Walk()
        visit(walk)
        return hashing.canonical_hash(walk.reach) if walk.reach else None
    finally:
        busy.discard(id(value))
