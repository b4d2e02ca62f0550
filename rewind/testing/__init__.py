"""`rewind.testing`: recorded runs as offline regression tests.

    from rewind.testing import snapshot, replay
    snapshot(rw, run.id, "tests/rewind/research.json")      # or `rewind snapshot RUN --to ...`
    replay("tests/rewind/research.json").check()             # what the pytest plugin runs

Modules: `format` (the file: canonical JSON, values, reading it back), `capture` (taking a
snapshot of a stored run, with its determinism audit), `cassette` (serving recorded model and
tool calls, record modes), `replay` (the replay against today's code), `report` (the failure
text), `plugin` (pytest: snapshot files as tests, `--rewind-record`, the `rewind_replay`
fixture; registered through the `pytest11` entry point `rewind`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from .capture import DEFAULT_REPEATS, snapshot_run
from .cassette import ALL, NEW, NONE, RECORD_MODES, MissingCall
from .format import FORMAT, VERSION, SnapshotError, dumps, load, write
from .replay import NodeReport, ReplayResult, replay, write_rerecorded

__all__ = [
    "snapshot", "snapshot_run", "replay", "ReplayResult", "NodeReport", "SnapshotError",
    "MissingCall", "RECORD_MODES", "NONE", "NEW", "ALL", "FORMAT", "VERSION", "load", "write",
    "dumps", "write_rerecorded", "DEFAULT_REPEATS",
]


def snapshot(rw: Any, run_id: str, path: Any, *, repeats: int = DEFAULT_REPEATS,
             pipeline_spec: Optional[str] = None, on_progress: Any = None,
             force: bool = False) -> Path:
    """Write the snapshot of run `run_id` (completed or halted) to `path`; returns the path.
    `repeats` samples of each step make its determinism audit (0: no audit); `pipeline_spec`
    ("package.module:attribute") is found by itself when the pipeline is a module attribute.
    An existing file at `path` that is not a snapshot (nor empty) is refused unless `force`."""
    from .format import destination

    destination(path, force=force)  # before the audit's work, not after it
    doc = snapshot_run(rw, run_id, repeats=repeats, pipeline_spec=pipeline_spec,
                       on_progress=on_progress)
    return write(doc, path, force=force)
