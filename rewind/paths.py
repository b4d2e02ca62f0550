"""Where a file or a directory is to be written: checked before any work, so a bad path is a
clear refusal rather than an error after the work (or a half-written file)."""

from __future__ import annotations

import os


def nearest_existing(path: str) -> str:
    """`path` made absolute, or its nearest ancestor that exists: what decides whether the
    path can be written (that ancestor must be a directory, unless it is the path itself)."""
    here = os.path.abspath(path)
    while not os.path.lexists(here) and here != os.path.dirname(here):
        here = os.path.dirname(here)
    return here
