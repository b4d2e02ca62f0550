"""Environment variables a step's own code reads: recorded by name while the step runs, re-checked
before a cache hit is served, as `filewatch` does for files, so a node that reads
`os.environ["GREETING"]` runs again once the variable changed.

`track_env()` patches `os.environ`'s class once per process; the patch records only on a thread
inside `track_env`, and only reads made by user code (the first caller outside the standard
library): the reads of installed packages and of Rewind itself (an SDK picking up its API key,
the model settings) are not part of a node's output, and a rotated key must not empty the cache.
Recorded: {name: sha256 of the value, "" when unset}; never the value itself.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Optional

from .codeorigin import STDLIB, USER, module_kind
from .filewatch import on_thread_stack
from .canonical import sha256_hex

_LOCAL = threading.local()
_INSTALL_LOCK = threading.Lock()
_INSTALLED = False
UNSET = ""  # what is recorded for a variable that was not set


def value_hash(value: Optional[str]) -> str:
    return UNSET if value is None else sha256_hex(value.encode("utf-8", "surrogateescape"))


def _caller_is_user() -> bool:
    frame = sys._getframe(2)  # noqa: SLF001 - past the patched method and this function
    while frame is not None:
        kind = module_kind(frame.f_globals.get("__name__") or "")
        if kind != STDLIB:  # os.getenv, Mapping.get and `in` pass through the standard library
            return kind == USER
        frame = frame.f_back
    return False


_ENVIRONB = getattr(os, "environb", None)  # the same variables as bytes (POSIX)


def _install() -> None:
    global _INSTALLED
    with _INSTALL_LOCK:
        if _INSTALLED:
            return
        environ_type = type(os.environ)
        original = environ_type.__getitem__

        def __getitem__(self, key):
            stack = getattr(_LOCAL, "stack", None)
            if not stack or not (self is os.environ or self is _ENVIRONB) \
                    or not isinstance(key, (str, bytes)):
                return original(self, key)
            try:
                value = original(self, key)
            except KeyError:
                value = None
            if _caller_is_user():  # os.environb's bytes: recorded as os.environ's text
                name = key if isinstance(key, str) else os.fsdecode(key)
                seen = value_hash(value if self is os.environ else os.environ.get(name))
                for reads in stack:
                    reads.setdefault(name, seen)
            if value is None:
                raise KeyError(key) from None
            return value

        environ_type.__getitem__ = __getitem__
        _INSTALLED = True


def track_env() -> contextlib.AbstractContextManager:
    """Record the environment variables this thread's user code reads while the block runs:
    `with track_env() as env: ...; env` is {name: value_hash}."""
    _install()
    return on_thread_stack(_LOCAL, {})


def changed(recorded: Optional[dict]) -> list:
    """The recorded variables whose value is not what was recorded (set, unset or changed),
    sorted: empty when a hit may be served."""
    return sorted(k for k, h in (recorded or {}).items() if value_hash(os.environ.get(k)) != h)
