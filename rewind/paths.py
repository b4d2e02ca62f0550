"""Where a file or a directory is to be written: checked before any work, so a bad path is a
clear refusal rather than an error after the work (or a half-written file)."""

from __future__ import annotations

import os
import tempfile


def nearest_existing(path: str) -> str:
    """`path` made absolute, or its nearest ancestor that exists: what decides whether the
    path can be written (that ancestor must be a directory, unless it is the path itself)."""
    here = os.path.abspath(path)
    while not os.path.lexists(here) and here != os.path.dirname(here):
        here = os.path.dirname(here)
    return here


def unwritable_reason(path: str) -> str:
    """Why this process cannot create `path` (or write into it, a directory), "" if it can:
    the nearest folder that exists must let it add entries (a read-only folder or a read-only
    file system does not)."""
    here = nearest_existing(path)
    folder = here if os.path.isdir(here) else os.path.dirname(here)
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    try:  # root passes every access check, yet /proc or /sys take no new entry: try one
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".rewind-probe-")
    except OSError as e:
        return f"{folder} takes no new file ({e.strerror or e})"
    os.close(fd)
    os.unlink(probe)
    return ""
