"""How a stored value names its class, and how a reader finds the class again.

A class is named `module:qualname`, found again by importing the module (as Burr's own pydantic
serde does: the database is trusted like the code). A class the import cannot reach (defined
inside a function, in `__main__`) is found in this process by the name it was stored under.

A class made at run time under another class's name (instructor wraps the user's pydantic
model in a subclass that copies its `__module__`, `__name__` and `__qualname__`) would come
back, by its name, as that other class: such a class is stored as its name and the references
of its bases, and a reader makes it again from them (in the process that wrote it, the very
class object). One whose body adds anything of its own (fields, methods) cannot be made again
from its bases, and is refused naming the field and the class.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any, Union

from ..errors import StoreError, UnhashableValue

Ref = Union[str, dict]

_CLASSES: dict = {}   # "module:qualname" -> class, for classes import cannot reach
_MADE: dict = {}      # a dynamic class's reference (canonical JSON) -> class
_MISSING = object()
# what every class body has, so none of it is "a body of its own"
_STANDARD = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
                       "__annotations__", "__orig_bases__", "__parameters__", "__firstlineno__",
                       "__static_attributes__", "__abstractmethods__", "_abc_impl",
                       "__class_vars__", "__private_attributes__", "__signature__",
                       "__slots__", "model_config", "model_fields", "model_computed_fields"})


class UndecodableValue(StoreError):
    """A stored value names a type this process cannot load (a class that is not importable,
    a registered type not registered here). The bytes are intact: this is not corruption."""


def _by_name(ref: str) -> Any:
    """The object `module:qualname` names in a module already loaded (nothing is imported)."""
    module, _, qualname = ref.partition(":")
    obj: Any = sys.modules.get(module, _MISSING)
    for part in qualname.split("."):
        if obj is _MISSING:
            break
        obj = getattr(obj, part, _MISSING)
    return obj


def _own_body(cls: type) -> list:
    """What `cls`'s body defines beyond what its bases give it (pydantic: its own fields)."""
    fields = getattr(cls, "model_fields", None)
    if isinstance(fields, dict):
        inherited = set()
        for base in cls.__bases__:
            inherited |= set(getattr(base, "model_fields", None) or ())
        return sorted(set(fields) - inherited)
    return sorted(k for k in vars(cls) if k not in _STANDARD and not k.startswith("__pydantic"))


def class_ref(cls: type, path: str = "value") -> Ref:
    """The name a value of class `cls` at `path` is stored with."""
    ref = f"{cls.__module__}:{cls.__qualname__}"
    found = _by_name(ref)
    if found is cls or (found is _MISSING and _CLASSES.setdefault(ref, cls) is cls):
        return ref
    # another class goes by this name: `cls` was made at run time under it
    own = _own_body(cls)
    if own:
        raise UnhashableValue(
            f"`{path}` is a {ref.replace(':', '.')} made at run time (a subclass of "
            f"{', '.join(b.__qualname__ for b in cls.__bases__)} under the same name) whose body "
            f"adds {', '.join(own[:5])}; Rewind cannot store it with its exact class: store the "
            "base class's value, or define the class at module level")
    made = {"name": ref, "bases": [class_ref(b, path) for b in cls.__bases__]}
    _MADE.setdefault(json.dumps(made, sort_keys=True), cls)
    return made


def resolve(ref: Ref) -> type:
    """The class a stored value names."""
    if isinstance(ref, dict):
        return _make(ref)
    got = _CLASSES.get(ref)
    if got is not None:
        return got
    module, _, qualname = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception as e:
        raise UndecodableValue(
            f"a stored value is a {module}.{qualname}, which this process cannot import ({e}); "
            "define the class at module level of an importable module (or register_type it) "
            "and import it before reading the run"
        ) from None
    _CLASSES[ref] = obj
    return obj


def _make(ref: dict) -> type:
    """A class made at run time, made again from its bases (once per process and reference)."""
    key = json.dumps(ref, sort_keys=True)
    got = _MADE.get(key)
    if got is not None:
        return got
    bases = tuple(resolve(b) for b in ref.get("bases") or ())
    module, _, qualname = str(ref.get("name", "")).partition(":")
    if not bases or not qualname:
        raise UndecodableValue(f"a stored value names a class made at run time with no bases: {ref}")
    try:
        cls = type(bases[0])(qualname.rpartition(".")[2], bases,
                             {"__module__": module, "__qualname__": qualname})
    except Exception as e:
        raise UndecodableValue(
            f"a stored value is a {module}.{qualname} made at run time from "
            f"{', '.join(b.__qualname__ for b in bases)}, which cannot be made again here ({e})"
        ) from None
    return _MADE.setdefault(key, cls)
