"""How a fingerprint takes apart a value that has no canonical encoding, so that what the value
holds (a compiled pattern's text, a configured object's attributes, the functions in a dict)
is part of the key and an edit to it is a miss: a container by its items, an object of user
code by its attributes, anything else by what it pickles as. What none of these reach (a lock,
a socket) is known by its type alone."""

from __future__ import annotations

import copyreg
from typing import Any

from .codeorigin import USER, module_kind

PARTS_DEPTH = 8  # how deep an object is followed into its parts
PARTS_MAX = 10_000  # and how many parts in all, so a huge object graph costs a bounded walk


def parts_of(value: Any) -> list:
    """[(suffix, part)] of a value to_canonical refused: the items of a dict, list or tuple
    (holding functions or objects), an object's attributes, else its `__reduce_ex__` state."""
    if isinstance(value, dict):
        return sorted(((f"[{k!r}]", v) for k, v in value.items()), key=lambda kv: kv[0])
    if isinstance(value, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(value)]
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and module_kind(type(value).__module__ or "") == USER:
        slots = [n for k in type(value).__mro__ for n in _slot_names(k)
                 if n not in ("__dict__", "__weakref__")]
        parts = [(f".{n}", state[n]) for n in sorted(state, key=str) if isinstance(n, str)]
        return parts + [(f".{n}", getattr(value, n)) for n in sorted(set(slots)) if hasattr(value, n)]
    try:  # as pickle would: the copyreg table first (re.Pattern is pickled through it)
        reducer = copyreg.dispatch_table.get(type(value))
        reduced = reducer(value) if reducer is not None else value.__reduce_ex__(4)
    except Exception:  # a lock, a socket, a connection: nothing to say but its type
        return []
    if not isinstance(reduced, tuple):
        return []
    return [(f".<reduce {i}>", part) for i, part in enumerate(reduced[1:3]) if part is not None]


def _slot_names(klass: type) -> list:
    slots = klass.__dict__.get("__slots__", ())
    return [slots] if isinstance(slots, str) else [n for n in slots if isinstance(n, str)]
