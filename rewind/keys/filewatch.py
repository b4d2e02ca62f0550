"""Files a step reads: recorded with their content hash while the step runs, re-checked before a
cache hit is served, so a prompt kept in a file is as much a part of a node's key as a prompt
kept in a constant.

`track_reads(root)` patches `open` (builtins, io, tokenize's for linecache), `io.open_code`
(runpy.run_path), `os.open`,
`pathlib.Path.read_text/read_bytes`, importlib's `FileLoader.get_data` (pkgutil.get_data) and
`os.listdir/scandir` (glob, Path.iterdir) and `os.stat` (`os.path.exists/isfile/isdir/getsize`,
`Path.exists/is_file/is_dir/stat`) once per process; the patches record only on a thread
inside `track_reads`, so other threads pay one thread-local lookup. Recorded: files opened for
reading ("r", "r+", "a+"; not "w", "x" or "a"), directories listed and paths stat'ed, under
`root` (the working directory by default), outside installed packages, as {path relative to
root, "/"-separated: sha256 of the content (of a directory: of its entry names), "" for a
missing file, and for a path only stat'ed what a stat tells (`CHECKED`: a folder, or a file's
size)}. Not followed: threads the step starts itself, `io.FileIO` opened directly, reads made
inside C libraries (a local SQLite database file), and the times, permissions and links a stat
or `os.lstat`/`os.access` report.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import importlib._bootstrap_external
import io
import os
import pathlib
import stat
import sys
import threading
import time
import tokenize
from typing import Any, Iterator, Optional

_LOCAL = threading.local()
_INSTALL_LOCK = threading.Lock()
_INSTALLED = False
_ORIG_OPEN = builtins.open
_ORIG_READ_TEXT = pathlib.Path.read_text
_ORIG_READ_BYTES = pathlib.Path.read_bytes
_ORIG_OS_OPEN, _ORIG_LISTDIR, _ORIG_SCANDIR = os.open, os.listdir, os.scandir
_ORIG_STAT = os.stat
_ORIG_OPEN_CODE = io.open_code
_ORIG_GET_DATA = importlib._bootstrap_external.FileLoader.get_data
_SITE_PARTS = ("site-packages", "dist-packages", "__pycache__")

MISSING = ""  # the hash recorded for a file the step tried to read and did not find
# recorded for a path the step only checked (`os.stat`: exists, isfile, isdir, getsize): its
# type and a file's size, what those tell. Not a folder's names (an artifact written into a
# folder checked by `makedirs(exist_ok=True)` is no change), nor a file's bytes (a large file
# checked for existence is not read).
CHECKED = "stat:"
CHECKED_DIR = CHECKED + "dir"


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

    def note(self, file, checked: bool = False) -> None:
        """Record `file` as read (its content, a folder's names), or as only `checked` (its
        existence, type and size: `os.stat`), by its content hash; a folder only checked, by
        `CHECKED_DIR`."""
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
        if rel is None:
            return
        known = self.files.get(rel)
        if known is not None and (checked or not known.startswith(CHECKED)):
            return  # checked, then read or listed: its bytes or names count from now on
        self.files[rel] = checked_hash(opened) if checked else file_hash(opened)


def _relative(real: str, root: str) -> Optional[str]:
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        return None
    rel = os.path.relpath(real, root)
    parts = rel.split(os.sep)
    if any(p in _SITE_PARTS for p in parts):
        return None
    return "/".join(parts)


def file_hash(path: str) -> str:
    """sha256 of a file's bytes (of a directory: of its sorted entry names, what a listing or a
    glob saw); `MISSING` when it does not exist or cannot be read."""
    try:
        h = hashlib.sha256()
        if _is_dir(path):
            h.update(b"dir\0" + "\0".join(sorted(_ORIG_LISTDIR(path))).encode("utf-8", "surrogateescape"))
            return h.hexdigest()
        with _ORIG_OPEN(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
        return MISSING


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(_ORIG_STAT(path).st_mode)
    except (OSError, ValueError):
        return False


def checked_hash(path: str) -> str:
    """What a step that stat'ed `path` learnt (see `CHECKED`): `MISSING`, `CHECKED_DIR`, or a
    file's size."""
    try:
        st = _ORIG_STAT(path)
    except (OSError, ValueError):
        return MISSING
    return CHECKED_DIR if stat.S_ISDIR(st.st_mode) else f"{CHECKED}file:{st.st_size}"


def _reading(mode) -> bool:
    # "r", "r+" and "a+" read what is there; "w", "w+", "x" and "a" do not
    return isinstance(mode, str) and not any(c in mode for c in "wx") and (
        "r" in mode or "+" in mode)


def _record(file, checked: bool = False) -> None:
    stack = getattr(_LOCAL, "stack", None)
    if stack and not getattr(_LOCAL, "noting", False):
        _LOCAL.noting = True  # noting resolves paths (`realpath` stats): not a read of the step's
        try:
            for reads in stack:
                reads.note(file, checked)
        finally:
            _LOCAL.noting = False


def _open(file, mode="r", *args, **kwargs):
    if getattr(_LOCAL, "stack", None) and _reading(mode) and not isinstance(file, int):
        _record(file)
    return _ORIG_OPEN(file, mode, *args, **kwargs)


def _open_code(path):  # io.open_code: runpy.run_path, a script run by path
    if getattr(_LOCAL, "stack", None):
        _record(path)
    return _ORIG_OPEN_CODE(path)


def _read_text(self, *args, **kwargs):
    if getattr(_LOCAL, "stack", None):
        _record(self)
    return _ORIG_READ_TEXT(self, *args, **kwargs)


def _read_bytes(self, *args, **kwargs):
    if getattr(_LOCAL, "stack", None):
        _record(self)
    return _ORIG_READ_BYTES(self, *args, **kwargs)


def _os_open(path, flags, *args, **kwargs):
    if getattr(_LOCAL, "stack", None) and not flags & (os.O_WRONLY | os.O_TRUNC) and \
            not isinstance(path, int):
        _record(path)
    return _ORIG_OS_OPEN(path, flags, *args, **kwargs)


# Callers whose listings find installed packages, not data: `importlib.metadata` lists every
# `sys.path` entry (the working directory among them) when a package asks its own version at
# import, so a step that happened to import one first would miss whenever a file came or went.
_DISCOVERY = frozenset({"importlib.metadata", "importlib_metadata"})


def _listing(original):
    def listing(path=".", *args, **kwargs):  # os.listdir / os.scandir: the names it saw
        if getattr(_LOCAL, "stack", None) and not isinstance(path, int) and \
                sys._getframe(1).f_globals.get("__name__") not in _DISCOVERY:
            _record(path)
        return original(path, *args, **kwargs)
    return listing


def _discovering(frame, depth: int = 4) -> bool:
    """A stat made for `importlib.metadata` (through os.path or pathlib, a few frames up)."""
    while frame is not None and depth:
        if frame.f_globals.get("__name__") in _DISCOVERY:
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _stat(path, *args, dir_fd=None, **kwargs):  # os.stat: exists, isfile, isdir, getsize, Path's
    if getattr(_LOCAL, "stack", None) and dir_fd is None and not isinstance(path, int) and \
            not _discovering(sys._getframe(1)):
        _record(path, checked=True)
    return _ORIG_STAT(path, *args, dir_fd=dir_fd, **kwargs)


def _get_data(self, path):  # importlib's loaders: pkgutil.get_data, importlib.resources
    if getattr(_LOCAL, "stack", None):
        _record(path)
    return _ORIG_GET_DATA(self, path)


def _install() -> None:
    global _INSTALLED
    with _INSTALL_LOCK:
        if _INSTALLED:
            return
        builtins.open = _open
        io.open = _open
        tokenize._builtin_open = _open  # linecache reads through tokenize.open
        pathlib.Path.read_text = _read_text
        pathlib.Path.read_bytes = _read_bytes
        os.open = _os_open
        os.listdir, os.scandir = _listing(_ORIG_LISTDIR), _listing(_ORIG_SCANDIR)
        os.stat = _stat
        io.open_code = _open_code
        accessor = getattr(pathlib, "_NormalAccessor", None)  # 3.11 binds os's functions there
        if accessor is not None:
            accessor.listdir, accessor.scandir = os.listdir, os.scandir
        importlib._bootstrap_external.FileLoader.get_data = _get_data
        # what os says its functions support goes for the recording ones too: shutil.rmtree
        # asks `os.stat in os.supports_follow_symlinks` (and of scandir, open) to pick its
        # symlink-safe way
        for orig, new in ((_ORIG_STAT, os.stat), (_ORIG_OS_OPEN, os.open),
                          (_ORIG_LISTDIR, os.listdir), (_ORIG_SCANDIR, os.scandir)):
            for supports in (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks,
                             os.supports_effective_ids):
                if orig in supports:
                    supports.add(new)
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
        st = _ORIG_STAT(path)
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
    out = []
    for rel, h in (files or {}).items():
        path = os.path.join(base, *rel.split("/"))
        now = checked_hash(path) if h.startswith(CHECKED) else current_hash(path)
        if now != h:
            out.append(rel)
    return sorted(out)


# Installed when Rewind is imported, not at the first step: a module imported after it that
# takes the functions themselves (`from os import listdir`, `from io import open`) gets the
# recording ones. (One imported before Rewind keeps what it took: not followed.)
_install()
