"""How a fingerprint takes apart a value that has no canonical encoding, so that what the value
holds (a compiled pattern's text, a configured object's attributes, the functions in a dict)
is part of the key and an edit to it is a miss: a container by its items, an object of user
code by its attributes, anything else by what it pickles as. What none of these reach (a lock,
a socket) is known by its type alone. A class member is taken apart into the functions it holds."""

from __future__ import annotations

import collections
import contextvars
import copyreg
import dataclasses
import fractions
import functools
import inspect
import operator
import pathlib
import string
import textwrap
import types
from typing import Any, Callable

from .codeorigin import USER, module_kind

PARTS_DEPTH = 8  # how deep an object is followed into its parts
PARTS_MAX = 10_000  # and how many parts in all, so a huge object graph costs a bounded walk
# standard-library types that are values, taken apart by what they pickle as
_VALUE_TYPES = (string.Template, types.SimpleNamespace, pathlib.PurePath, fractions.Fraction,
                textwrap.TextWrapper, operator.itemgetter, operator.attrgetter,
                operator.methodcaller)
# Burr's graphs, actions, conditions, sub-graphs and states are built of the user's functions
# and values (`GraphBuilder()...build()` at import, `tag.bind(p=...)`): taken apart by their
# attributes like the user's own objects. (Not an Application: it holds a random uid and
# connections.)
_MADE_OF_USER_CODE = ("burr.core.action", "burr.core.graph", "burr.core.parallelism",
                      "burr.core.state")


def made_of_user_code(t: type) -> bool:
    """Is an installed package's type one whose objects hold the user's code (Burr's)?"""
    return (getattr(t, "__module__", None) or "").startswith(_MADE_OF_USER_CODE)


def parts_of(value: Any, spell: Callable[[Any], str]) -> list:
    """[(suffix, part)] of a value to_canonical refused: the items of a container (a dict's
    keys and a set's items named by `spell`, sorted: a repr may hold an address, a set's order
    is this process's), a user object's attributes, else what it pickles as, for user types and
    the standard library's value types only. Any other standard-library object (a thread, the
    environment, an executor) may hold what is this process's own: it is known by its type."""
    if isinstance(value, (dict, types.MappingProxyType)):
        return sorted(((f"[{spell(k)}]", v) for k, v in value.items()), key=lambda kv: kv[0])
    if isinstance(value, (set, frozenset)):
        return sorted(((f"{{{spell(v)}}}", v) for v in value), key=lambda kv: kv[0])
    if isinstance(value, (list, tuple, collections.deque)):
        return [(f"[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, contextvars.ContextVar):  # its default, as a fresh context sees it
        try:
            return [(".name", value.name), (".<default>", contextvars.Context().run(value.get))]
        except LookupError:
            return [(".name", value.name)]
    user = module_kind(type(value).__module__ or "") == USER or made_of_user_code(type(value))
    key = getattr(value, "rewind_key", None) if user else None
    if key is not None:  # the object says what it is (keys.fingerprint.param_hash honours it too)
        return [(".rewind_key", key() if callable(key) else key)]
    if user and isinstance(getattr(value, "__dict__", None), dict):
        return [(f".{n}", v) for n, v in attributes(value) if isinstance(n, str)]
    reducer = copyreg.dispatch_table.get(type(value))
    if not (user or reducer is not None or isinstance(value, _VALUE_TYPES)):
        return []
    try:  # as pickle would: the copyreg table first (re.Pattern is pickled through it)
        reduced = reducer(value) if reducer is not None else value.__reduce_ex__(4)
    except Exception:  # a lock, a socket, a connection: nothing to say but its type
        return []
    if not isinstance(reduced, tuple):
        return []
    return [(f".<reduce {i}>", part) for i, part in enumerate(reduced[1:3]) if part is not None]


def attributes(obj: Any) -> list:
    """[(name, value)] of an instance: its `__dict__` (sorted), then its slots."""
    state = getattr(obj, "__dict__", None)
    out = [(n, state[n]) for n in sorted(state, key=str)] if isinstance(state, dict) else []
    return out + [(n, getattr(obj, n)) for n in slot_names(type(obj)) if hasattr(obj, n)]


def slot_names(cls: type) -> list:
    """The value slots of a class and its bases (not `__dict__` / `__weakref__`)."""
    out = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in [slots] if isinstance(slots, str) else slots:
            if isinstance(name, str) and name not in ("__dict__", "__weakref__") and name not in out:
                out.append(name)
    return out


def functions_of(member: Any) -> list:
    """The functions a class member holds (a method, a static or class method, a property's
    accessors, a partialmethod's or cached_property's function)."""
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    if isinstance(member, functools.cached_property):
        member = member.func
    if isinstance(member, property):
        return [f for f in (member.fget, member.fset, member.fdel) if inspect.isfunction(f)]
    if isinstance(member, functools.partialmethod):
        member = member.func
    return [member] if inspect.isfunction(member) else []


def user_objects(value: Any, limit: int = PARTS_MAX, deep: bool = False) -> list:
    """[(suffix, obj)]: the instances of user classes inside a value that has a canonical
    encoding (a dataclass, a pydantic model, a NamedTuple, a dict, str or enum subclass, at any
    depth of containers). Their spelling says only the fields: not the class's code nor what
    the instance holds besides (another attribute, a private one, an excluded field)."""
    out: list = []
    stack, seen = [("", value)], set()
    while stack and limit > 0:
        suffix, v = stack.pop()
        t = type(v)
        if t in (str, int, float, bool) or v is None or id(v) in seen:
            continue
        seen.add(id(v))
        limit -= 1
        if module_kind(t.__module__ or "") == USER:
            out.append((suffix, v))
            if deep:  # the objects it holds, at any depth (`deep`: no walk of its own follows)
                stack += [(f"{suffix}.{n}", x) for n, x in attributes(v)]
            elif not isinstance(v, (dict, list, tuple, set, frozenset)):
                continue  # its attributes are walked with it
        if isinstance(v, dict):
            stack += [(f"[{i}]", x) for i, kv in enumerate(v.items()) for x in kv]
        elif isinstance(v, (list, tuple, set, frozenset, collections.deque)):
            stack += [(f"[{i}]", x) for i, x in enumerate(v)]
        elif dataclasses.is_dataclass(v) or hasattr(v, "model_dump"):  # an installed package's
            stack += [(f".{n}", x) for n, x in attributes(v)]  # model may hold the user's objects
    return out
