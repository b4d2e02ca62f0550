"""Rewind runs written in Burr's tracker layout, so Burr's own UI shows them with their lineage.

The layout is `burr.tracking.client.LocalTrackingClient`'s, as `burr.tracking.server.backend.
LocalBackend` (the class Burr's UI serves from) reads it:

    <dir>/<project>/<run id>/graph.json       entrypoint, actions (name, reads, writes, code), transitions
    <dir>/<project>/<run id>/metadata.json    partition key; a fork's `parent_pointer`
    <dir>/<project>/<run id>/log.jsonl        per step: begin_entry, attribute lines, end_entry
    <dir>/<project>/<parent>/children.jsonl   one `fork` line per fork of that run
    <dir>/<project>/<run id>/rewind.json      Rewind's mark: {"format": "rewind-burr-app", "run_id"}

One Burr app per Rewind run. As with Burr's own forks, a fork's log holds only the steps it ran
(not those it inherited); sequence ids are trajectory positions, so the parent pointer's
sequence id is the parent's last step the fork shares. Rewind's facts (status, cache hit, input
and output hashes, re-run reason, tokens) are `rewind.*` attributes of each step.

    export_burr(rw, run_id, "~/.burr", project="rewind")      # a stored run and its ancestors
    tracking = BurrTracking("~/.burr", "rewind")               # live: per step, then per run
    tracking.on_step(rw, step); tracking.on_run_finished(rw, run)

A run id becomes a folder name only through `app_path` (`rewind.paths.child_path`: a plain
name, and the folder stays inside `<dir>/<project>`, symlinks followed); `export_burr` checks
every folder it will write, and each parent it will list a fork under, before writing any.
An app folder is Rewind's when it holds `rewind.json` naming its run: that one is rewritten
freely. One that holds graph.json, metadata.json or log.jsonl without that mark (Burr's own app,
someone's files) is overwritten only with `force=True` (`export-burr --force`). A folder holding
only children.jsonl (a fork listed there) or nothing is free to use.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import stat
import threading
from typing import Any, Iterable, Optional

from ..errors import InvalidRequest
from ..models import Run, Step, StepStatus
from ..paths import child_path, parse_json, read_bytes

DEFAULT_PROJECT = "rewind"
GRAPH, METADATA, LOG, CHILDREN = "graph.json", "metadata.json", "log.jsonl", "children.jsonl"
MARK, MARK_FORMAT = "rewind.json", "rewind-burr-app"
_LOCK = threading.Lock()  # children.jsonl is shared by the forks of a run (Burr also flocks)


def _models():
    from burr.tracking.common import models  # needs Burr's tracking extra (pydantic)

    return models


def check_project(project: str) -> str:
    from burr import system
    from burr.tracking.client import _allowed_project_name

    if not project or not _allowed_project_name(project, on_windows=system.IS_WINDOWS):
        raise InvalidRequest(
            f"Burr project name {project!r} is not allowed: Burr's tracker takes letters, digits, "
            "'_', '-' and ':' only; pick another --project", field="project")
    return project


def app_path(directory: str, project: str, run_id: str) -> str:
    """The app folder of a run: refused (InvalidRequest naming the id) unless the id is a plain
    name and the folder stays inside `<directory>/<project>`."""
    return child_path(os.path.join(os.path.expanduser(str(directory)), project), run_id)


def _is_ours(path: str, run_id: str) -> bool:
    """Does the app folder carry Rewind's mark for this run?"""
    try:
        mark = parse_json(read_bytes(os.path.join(path, MARK), MARK, limit=1 << 16), MARK)
    except InvalidRequest:
        return False
    return isinstance(mark, dict) and mark.get("format") == MARK_FORMAT and mark.get("run_id") == run_id


def check_app_folder(path: str, run_id: str, force: bool = False) -> None:
    """Refuse to write run `run_id`'s app at `path` over files Rewind did not write there
    (unless `force`), or where a file stands instead of a folder."""
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise InvalidRequest(f"Burr app folder {path} of run {run_id} exists and is not a "
                             "directory; remove it or pick another --dir", run_id=run_id)
    if force or _is_ours(path, run_id):
        return
    theirs = [n for n in (LOG, GRAPH, METADATA) if os.path.lexists(os.path.join(path, n))]
    if theirs:
        raise InvalidRequest(
            f"Burr app folder {path} holds {', '.join(theirs)} that Rewind did not write (no "
            f"{MARK} naming run {run_id}); exporting would overwrite it: pass --force "
            "(force=True) to replace it, or pick another --dir or --project", run_id=run_id)


def _when(ts: Optional[float]) -> datetime.datetime:
    # Burr's tracker writes naive local times (datetime.now()); so do we
    return datetime.datetime.fromtimestamp(float(ts if ts is not None else 0.0))


# --- the three documents ---------------------------------------------------------------------
def graph_model(rw: Any, run: Run):
    """Burr's ApplicationModel of the graph the run used: the registered pipeline's actions (with
    their code) when it is the same graph, else the stored node and edge names."""
    m = _models()
    pipeline = rw.pipelines().get(run.pipeline)
    if pipeline is not None and (run.graph_id is None or pipeline.graph_id == run.graph_id):
        return m.ApplicationModel(
            entrypoint=run.entrypoint or pipeline.entrypoint,
            actions=[m.ActionModel.from_action(a) for a in pipeline.graph.actions],
            transitions=[m.TransitionModel.from_transition(t) for t in pipeline.graph.transitions],
        )
    nodes, edges = rw.graph(run)
    missing = f"# source not available: pipeline {run.pipeline!r} is not registered here"
    names = list(dict.fromkeys(list(nodes) + [e[0] for e in edges] + [e[1] for e in edges]))
    return m.ApplicationModel(
        entrypoint=run.entrypoint or (names[0] if names else ""),
        actions=[m.ActionModel(name=n, reads=[], writes=[], code=missing) for n in names],
        transitions=[m.TransitionModel(from_=s, to=d, condition=c or "default") for s, d, c in edges],
    )


def parent_sequence(row: dict) -> Optional[int]:
    """The sequence id (trajectory position) of the parent's last step a fork shares."""
    index = int(row.get("fork_index") or 0)
    return index - 1 if index > 0 else None


def metadata_model(row: dict):
    m = _models()
    pointer = None
    if row.get("parent_id"):
        pointer = m.PointerModel(app_id=row["parent_id"], sequence_id=parent_sequence(row),
                                 partition_key=None)
    return m.ApplicationMetadataModel(partition_key=None, parent_pointer=pointer)


def step_attributes(run_row: dict, step: Step) -> dict:
    """Rewind's facts about a step, as Burr attributes (what Burr's UI lists under a step)."""
    attrs = {
        "rewind.run_id": run_row["id"],
        "rewind.status": str(step.status),
        "rewind.cache_hit": step.status == StepStatus.CACHED,
        "rewind.occurrence": int(step.occurrence),
        "rewind.input_hash": step.input_hash,
        "rewind.output_hash": step.output_hash,
        "rewind.reason": step.reason or "",
        "rewind.tokens": int(step.tokens),
        "rewind.prompt_tokens": int(step.prompt_tokens),
        "rewind.completion_tokens": int(step.completion_tokens),
        "rewind.tokens_saved": int(step.tokens_saved),
        "rewind.latency_ms": round(float(step.latency_ms or 0.0), 3),
        # sorted: a live step and the same step read back from the store spell them alike
        "rewind.params": dict(sorted((step.params or {}).items())),
        "rewind.field_hashes": dict(sorted((step.field_hashes or {}).items())),
    }
    if step.source_run:
        attrs["rewind.source_run"] = step.source_run
    if step.error:
        attrs["rewind.error"] = step.error
    if step.calls:
        attrs["rewind.model_calls"] = len(step.calls)
    if run_row.get("parent_id") and step.index == int(run_row.get("fork_index") or 0):
        attrs["rewind.fork"] = {
            "parent": run_row["parent_id"], "node": run_row.get("fork_node"),
            "occurrence": run_row.get("fork_occurrence"),
            "edit": json.loads(run_row["edit_json"]) if run_row.get("edit_json") else {},
            "params": json.loads(run_row["params_json"]) if run_row.get("params_json") else {},
        }
    return attrs


def step_lines(rw: Any, run_row: dict, step: Step) -> list:
    """The log.jsonl lines of one step: begin_entry, its attributes, end_entry."""
    from burr.core import State, serde

    m = _models()
    seq = int(step.index)
    start = _when(step.started_at if step.started_at is not None else run_row.get("created_at"))
    end = start + datetime.timedelta(milliseconds=float(step.latency_ms or 0.0))
    lines = [m.BeginEntryModel(start_time=start, action=step.node,
                               inputs=serde.serialize(dict(step.runtime_inputs)), sequence_id=seq)]
    for key, value in step_attributes(run_row, step).items():
        lines.append(m.AttributeModel(key=key, action_sequence_id=seq, span_id=None,
                                      value=serde.serialize(value), tags={}, time_logged=end))
    failed = step.status == StepStatus.FAILED
    state = rw.state_at(step) if not failed else None
    lines.append(m.EndEntryModel(
        end_time=end, action=step.node, sequence_id=seq,
        result=None if failed else serde.serialize(dict(step.outputs)),
        exception=step.error if failed else None,
        state=State(state).serialize() if state else {},
    ))
    return lines


# --- writing ---------------------------------------------------------------------------------
def _write_atomic(path: str, text: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        raise InvalidRequest(f"{path} is a directory; remove it to write the Burr app there")
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # left by a crash; unlink removes a planted link, not its target
    # O_EXCL|O_NOFOLLOW: never write through a symlink or FIFO planted at the temporary name
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
        os.replace(tmp, path)  # Burr's UI polls these files: never let it read half of one
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _append(path: str, text: str) -> None:
    """Append to a regular file (created if missing), never through a symlink, FIFO or device."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
                     | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as e:
        raise InvalidRequest(f"cannot append to {path} ({e.strerror or e}); it must be a "
                             "regular file") from None
    with os.fdopen(fd, "a", encoding="utf-8", errors="replace") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidRequest(f"{path} is not a regular file; remove it to write the Burr app")
        f.write(text)


def _dump(models: Iterable[Any]) -> str:
    return "".join(model.model_dump_json() + "\n" for model in models)


def _link_child(directory: str, project: str, row: dict) -> None:
    """List a fork under its parent (children.jsonl), once, as Burr's client does."""
    m = _models()
    parent_dir = app_path(directory, project, row["parent_id"])
    os.makedirs(parent_dir, exist_ok=True)
    path = os.path.join(parent_dir, CHILDREN)
    with _LOCK:
        if os.path.lexists(path):
            data = read_bytes(path, path).decode("utf-8", errors="replace")
            for line in data.splitlines():
                try:
                    if json.loads(line)["child"]["app_id"] == row["id"]:
                        return
                except (ValueError, KeyError, TypeError, RecursionError):
                    continue
        child = m.ChildApplicationModel(
            child=m.PointerModel(app_id=row["id"], sequence_id=None, partition_key=None),
            event_time=_when(row.get("created_at")), event_type="fork",
            sequence_id=parent_sequence(row))
        _append(path, child.model_dump_json() + "\n")


def _start_app(rw: Any, run: Run, row: dict, directory: str, project: str,
               force: bool = False) -> str:
    path = _checked(run.id, row, directory, project, force)
    os.makedirs(path, exist_ok=True)
    _write_atomic(os.path.join(path, MARK), json.dumps({"format": MARK_FORMAT, "run_id": run.id}))
    _write_atomic(os.path.join(path, GRAPH), graph_model(rw, run).model_dump_json())
    _write_atomic(os.path.join(path, METADATA), metadata_model(row).model_dump_json())
    if row.get("parent_id"):
        _link_child(directory, project, row)
    return path


def _checked(run_id: str, row: dict, directory: str, project: str, force: bool) -> str:
    """The run's app folder, once it and its parent's (where the fork is listed) are safe."""
    path = app_path(directory, project, run_id)
    if row.get("parent_id"):
        app_path(directory, project, row["parent_id"])
    check_app_folder(path, run_id, force)
    return path


def _own_steps(run: Run, row: dict) -> list:
    start = int(row.get("fork_index") or 0) if row.get("parent_id") else 0
    return [s for s in run.steps if s.index >= start and s.status != StepStatus.INHERITED]


def write_app(rw: Any, run_id: str, directory: str, project: str = DEFAULT_PROJECT,
              force: bool = False) -> str:
    """Write (or rewrite, whole) the Burr app of one stored run; returns its directory."""
    check_project(project)
    run = rw.get_run(run_id)
    row = rw.store.get_run_row(run.id)
    path = _start_app(rw, run, row, directory, project, force)
    lines = [line for s in _own_steps(run, row) for line in step_lines(rw, row, s)]
    _write_atomic(os.path.join(path, LOG), _dump(lines))
    return path


def export_burr(rw: Any, run_id: str, directory: str, project: str = DEFAULT_PROJECT,
                lineage: bool = True, force: bool = False) -> list:
    """Write a stored run in Burr's tracker layout under `directory/project`, with its ancestors
    (oldest first) unless `lineage=False`, so the fork's parent pointer leads somewhere. Returns
    the app directories written. Every folder is checked before any is written (see the
    module's docstring); `force` overwrites app folders Rewind did not write."""
    check_project(project)
    ids = [run_id]
    if lineage:
        ids = [a["id"] for a in rw.lineage(run_id)["ancestors"] if not a["missing"]] + [run_id]
    for rid in ids:
        _checked(rid, rw.store.get_run_row(rid) or {}, directory, project, force)
    return [write_app(rw, rid, directory, project, force) for rid in ids]


class BurrTracking:
    """Writes runs into Burr's layout while they record: `on_step` appends each committed step
    to its run's log (creating the app on its first step); `on_run_finished` rewrites the app
    from the store, whole, so what Burr's UI shows ends exactly as `export_burr` would write it."""

    def __init__(self, directory: str, project: str = DEFAULT_PROJECT):
        self.directory = os.path.expanduser(str(directory))
        self.project = check_project(project or DEFAULT_PROJECT)
        self._started: set = set()

    def on_step(self, rw: Any, step: Step) -> None:
        row = rw.store.get_run_row(step.run_id) if step.run_id else None
        if row is None or step.status == StepStatus.INHERITED:
            return
        path = app_path(self.directory, self.project, row["id"])
        if row["id"] not in self._started:
            _start_app(rw, Run.from_row(row), row, self.directory, self.project)
            self._started.add(row["id"])
        _append(os.path.join(path, LOG), _dump(step_lines(rw, row, step)))

    def on_run_finished(self, rw: Any, run: Run) -> None:
        write_app(rw, run.id, self.directory, self.project)
        self._started.discard(run.id)
