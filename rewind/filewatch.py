"""Files a step reads: recorded with their content hash while the step runs, re-checked before a
cache hit is served, so a prompt kept in a file is as much a part of a node's key as a prompt
kept in a constant.

`track_reads(root)` patches `open` (builtins and io) and `pathlib.Path.read_text/read_bytes`
once per process; the patches record only on a thread inside `track_reads`, so other threads
pay one thread-local lookup. Recorded: files opened for reading (no "w", "a", "x" or "+")
under `root` (the working directory by default), outside installed packages, as
{path relative to root, "/"-separated: sha256 of the content, "" for a missing file}. Threads
the step starts itself are not followed.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import io
import os
import pathlib
import threading
import time
from typing import Any, Iterator, Optional

_LOCAL = threading.local()
_INSTALL_LOCK = threading.Lock()
_INSTALLED = False
_ORIG_OPEN = builtins.open
_ORIG_READ_TEXT = pathlib.Path.read_text
_ORIG_READ_BYTES = pathlib.Path.read_bytes
_SITE_PARTS = ("site-packages", "dist-packages", "__pycache__")

MISSING = ""  # the hash recorded for a file the step tried to read and did not find


class Reads:
    """What one `track_reads` block saw: `files` maps relative paths to content hashes."""

    def __init__(self, root: str) -> None:
        self._root = root
        self._real: Optional[str] = None
        self.files: dict = {}

    @property
    def root(self) -> str:
        # resolved when a file is first noted: most steps open none, and resolving walks
        # every component of the path
        if self._real is None:
            self._real = os.path.realpath(self._root)
        return self._real

    def note(self, file) -> None:
        try:
            path = os.fspath(file)
        except TypeError:
            return  # a file descriptor: no name to re-check
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        # by the name it was opened by: a symlink re-pointed later must be a change, so
        # it is re-checked by that name, not by the target it had
        opened = os.path.abspath(path)
        rel = _relative(opened, os.path.abspath(self._root))
        if rel is None:
            rel = _relative(os.path.realpath(opened), self.root)
        if rel is None or rel in self.files:
            return
        self.files[rel] = file_hash(opened)


def _relative(real: str, root: str) -> Optional[str]:
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        return None
    rel = os.path.relpath(real, root)
    parts = rel.split(os.sep)
    if any(p in _SITE_PARTS for p in parts):
        return None
    return "/".join(parts)


def file_hash(path: str) -> str:
    """sha256 of a file's bytes; `MISSING` when it does not exist or is not a readable file."""
    try:
        h = hashlib.sha256()
        with _ORIG_OPEN(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
        return MISSING


def _reading(mode) -> bool:
    return isinstance(mode, str) and not any(c in mode for c in "wax+")


def _record(file) -> None:
    stack = getattr(_LOCAL, "stack", None)
    if stack:
        for reads in stack:
            reads.note(file)


def _open(file, mode="r", *args, **kwargs):
    if getattr(_LOCAL, "stack", None) and _reading(mode) and not isinstance(file, int):
        _record(file)
    return _ORIG_OPEN(file, mode, *args, **kwargs)


def _read_text(self, *args, **kwargs):
    if getattr(_LOCAL, "stack", None):
        _record(self)
    return _ORIG_READ_TEXT(self, *args, **kwargs)


def _read_bytes(self, *args, **kwargs):
    if getattr(_LOCAL, "stack", None):
        _record(self)
    return _ORIG_READ_BYTES(self, *args, **kwargs)


def _install() -> None:
    global _INSTALLED
    with _INSTALL_LOCK:
        if _INSTALLED:
            return
        builtins.open = _open
        io.open = _open
        pathlib.Path.read_text = _read_text
        pathlib.Path.read_bytes = _read_bytes
        _INSTALLED = True


@contextlib.contextmanager
def on_thread_stack(local: threading.local, recorder: Any) -> Iterator[Any]:
    """`recorder` on this thread's stack of `local` while the block runs (the patched reads
    record into every recorder there: nested steps each see their own reads)."""
    stack = getattr(local, "stack", None)
    if stack is None:
        stack = local.stack = []
    stack.append(recorder)
    try:
        yield recorder
    finally:
        stack.remove(recorder)


def track_reads(root: Optional[str] = None) -> contextlib.AbstractContextManager:
    """Record the files this thread opens for reading under `root` (default: the working
    directory) while the block runs: `with track_reads() as reads: ...; reads.files`."""
    _install()
    return on_thread_stack(_LOCAL, Reads(root or os.getcwd()))


# (absolute path) -> (mtime_ns, size, inode, hash): a hit re-checks its files without reading
# them again unless they were touched; a file modified in the last 2 s is always re-read, as
# a same-size edit within the filesystem's timestamp granularity would look untouched.
_STAT_CACHE: dict = {}


def current_hash(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        _STAT_CACHE.pop(path, None)
        return MISSING
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    got = _STAT_CACHE.get(path)
    if got is not None and got[0] == key and time.time_ns() - st.st_mtime_ns > 2_000_000_000:
        return got[1]
    h = file_hash(path)
    _STAT_CACHE[path] = (key, h)
    return h


def changed(files: dict, root: Optional[str] = None) -> list:
    """The recorded files (from `Reads.files`) whose content is no longer what was recorded,
    a deleted or newly created file included, sorted: empty when a hit may be served."""
    base = os.path.realpath(root or os.getcwd())
    return sorted(
        rel for rel, h in (files or {}).items()
        if current_hash(os.path.join(base, *rel.split("/"))) != h
    )
