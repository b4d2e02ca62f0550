"""The snapshot file: one recorded run as canonical, reviewable JSON, and reading it back.

Owns the layout (`FORMAT`, `VERSION`), `dumps` (sorted keys, two-space indent, UTF-8, one
trailing newline: the same run always gives the same bytes, so a re-recorded snapshot diffs
in git only where behaviour changed), `load`/`write`, and the value encoding. Values (state,
outputs, runtime inputs, tool results) are kept in Rewind's type-preserving serde spelling,
parsed: plain JSON data reads as itself, and only tuples, datetimes, dataclasses and the like
carry a `{"__rw__": ...}` tag, so a replayed node gets the same Python types it ran on.

Layout (every key sorted on disk):

    format, version
    pipeline   {name, spec ("pkg.mod:attr" to import it), entrypoint, nodes, edges}
    run        {id, status}                the run it was taken from
    audit      {repeats}                   how many times each step was re-sampled
    initial_state
    steps      [ {node, occurrence, status, determinism, input_hash, output_hash, fields,
                  units, params, overrides, runtime_inputs, edit, outputs, deleted,
                  calls: [{api, model, messages, params, response_text, prompt_tokens,
                           completion_tokens}],
                  tools: [{tool, args_hash, result}],
                  audit: {stable, samples, distinct, unstable_fields, baseline: [outputs]}} ]

Nothing that changes from one recording to the next without a change of behaviour is written
(latencies, timestamps, store paths).

Rewind's own files: a file whose JSON is an object with `"format": "rewind-snapshot"` is a
snapshot Rewind wrote, and writing a snapshot over it needs nothing more (re-recording does
it); so may an empty file (nothing to lose). Over any other existing file, `write` refuses
unless `force=True` (`rewind snapshot --force`). Reading goes through `rewind.paths` (a
regular file only, at most `MAX_READ_BYTES`; no NaN, nothing nested deeper than
`MAX_JSON_DEPTH`), so a FIFO never blocks pytest's collection.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from ..store import serde
from ..errors import InvalidRequest
from ..paths import (
    JSONRefused, json_problem, nearest_existing, open_regular, parse_json, read_bytes,
    unwritable_reason,
)

FORMAT = "rewind-snapshot"
VERSION = 1
MARKER = f'"{FORMAT}"'


class SnapshotError(InvalidRequest):
    """A snapshot file that cannot be read, or names a pipeline or node this code lacks."""


def encode_value(value: Any, where: str) -> Any:
    """A value in its serde spelling, as JSON data (raises UnhashableValue naming `where`)."""
    return json.loads(serde.encode(value, where))


def decode_value(data: Any) -> Any:
    return serde.decode(json.dumps(data, ensure_ascii=False, allow_nan=False).encode("utf-8"))


def encode_values(values: dict, where: str) -> dict:
    return {k: encode_value(v, f"{where}.{k}") for k, v in values.items()}


def decode_values(data: dict) -> dict:
    return {k: decode_value(v) for k, v in (data or {}).items()}


def dumps(doc: dict) -> str:
    """The canonical text of a snapshot."""
    return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def destination(path: Any, what: str = "path", force: bool = False) -> Path:
    """The file a snapshot at `path` is written to: a symlink is followed to its target, and a
    target that exists but is not a regular file (a directory, FIFO, device) is refused, as is
    a parent that is not a directory, and (unless `force`) an existing file that is neither a
    snapshot nor empty. Cheap, so callers check before the audit's work."""
    if not os.fspath(path).strip():
        raise InvalidRequest(f"{what} is empty; give the path of a snapshot file (e.g. "
                             "tests/rewind/NAME.json)", field=what)
    target = Path(os.path.realpath(os.fspath(path)))
    try:
        st = os.lstat(target)
    except (FileNotFoundError, NotADirectoryError):  # NotADirectory: the parent check names it
        st = None
    except OSError as e:
        raise InvalidRequest(f"{what} {os.fspath(path)}: cannot use it ({e.strerror or e})",
                             field=what) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise InvalidRequest(f"{what} {os.fspath(path)} is {kind}; give the path of a snapshot "
                             "file (e.g. tests/rewind/NAME.json)", field=what)
    if Path(os.fspath(path)).suffix != ".json":  # is_snapshot_file: what pytest collects
        raise InvalidRequest(f"{what} {os.fspath(path)} does not end in .json, so pytest would "
                             "never collect it as a test; name it NAME.json", field=what)
    parent = nearest_existing(str(target.parent))
    if not os.path.isdir(parent):
        raise InvalidRequest(f"{what} {os.fspath(path)} cannot be created: {parent} is not a "
                             "directory", field=what)
    why = unwritable_reason(str(target.parent))
    if why:  # the snapshot is written beside its target: its folder must take a new file
        raise InvalidRequest(f"{what} {os.fspath(path)} cannot be written: {why}", field=what)
    if st is not None and st.st_size and not force and not _ours(target):
        raise InvalidRequest(f"{what} {os.fspath(path)} exists and is not a Rewind snapshot (no "
                             f"\"format\": \"{FORMAT}\"); writing would overwrite it: pass --force "
                             "(force=True) to replace it, or pick another path", field=what)
    return target


def _ours(target: Path) -> bool:
    """Is the file at `target` a snapshot Rewind wrote (its JSON says so)?"""
    try:
        doc = parse_json(read_bytes(target, str(target)).decode("utf-8", errors="replace"),
                         str(target))
    except InvalidRequest:  # unreadable, not JSON, too big: not a snapshot of ours
        return False
    return isinstance(doc, dict) and doc.get("format") == FORMAT


def write(doc: dict, path: Any, force: bool = False) -> Path:
    """Write atomically (a crash never leaves half a snapshot); returns the path. A symlink at
    `path` is followed; a directory, FIFO or device there is refused, and so is a file that is
    not a snapshot unless `force` (`destination`)."""
    target = destination(path, force=force)
    text = dumps(doc).encode("utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    fd = _create(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        destination(target, force=force)  # os.replace would put a file over what appeared since
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(path)


def _create(tmp: Path) -> int:
    # O_EXCL|O_NOFOLLOW: a symlink or FIFO planted at the temporary name is never written through
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.open(tmp, flags, 0o666)
    except FileExistsError:
        if os.path.isdir(tmp) and not os.path.islink(tmp):
            raise InvalidRequest(f"{tmp} is a directory; remove it to write the snapshot",
                                 field="path") from None
        os.unlink(tmp)  # left by a crashed write (unlink removes a link, not its target)
        return os.open(tmp, flags, 0o666)


def is_snapshot_file(path: Any) -> bool:
    """Cheap test used at collection: a .json file that says it is a Rewind snapshot."""
    path = Path(path)
    if path.suffix != ".json":
        return False
    try:  # a FIFO, device or directory named *.json is no snapshot, and is never opened
        with open_regular(path, str(path)) as f:
            return MARKER in f.read(1 << 16).decode("utf-8", errors="replace")
    except (OSError, InvalidRequest):
        return False


def load(path: Any) -> dict:
    """Read and check a snapshot; `SnapshotError` names the file and what is wrong."""
    path = Path(path)
    what = f"snapshot {path}"
    data = read_bytes(path, what, error=SnapshotError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SnapshotError(f"{what} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                            f"{e.start})") from None
    try:
        doc = parse_json(text, what)
    except JSONRefused as e:  # worded as before for a syntax error: "... is not valid JSON"
        raise SnapshotError(f"{what} is not valid JSON: {e.detail}" if e.kind == "syntax"
                            else str(e)) from None
    return check(doc, str(path))


def check(doc: Any, where: str) -> dict:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SnapshotError(f"{where} is not a Rewind snapshot (no \"format\": \"{FORMAT}\")")
    if doc.get("version") != VERSION:
        raise SnapshotError(f"{where} is snapshot version {doc.get('version')!r}; this Rewind "
                            f"reads version {VERSION}: re-record it with `rewind snapshot`")
    pipeline = doc.get("pipeline")
    if not isinstance(pipeline, dict) or not pipeline.get("spec"):
        raise SnapshotError(f"{where}: \"pipeline\" must name the pipeline to import as "
                            "{\"spec\": \"package.module:attribute\"}")
    if not isinstance(pipeline["spec"], str):
        raise SnapshotError(f"{where}: \"pipeline\".\"spec\" must be a string like "
                            f"\"package.module:attribute\", not {pipeline['spec']!r:.60}")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) and s.get("node") for s in steps):
        raise SnapshotError(f"{where}: \"steps\" must be a list of steps, each with a \"node\"")
    for i, step in enumerate(steps):
        _check_step(step, f"{where}: step {i + 1} ({step['node']!r})")
    if not isinstance(doc.get("initial_state", {}), dict):
        raise SnapshotError(f"{where}: \"initial_state\" must be an object")
    problem = json_problem(doc)  # a dict handed to replay() is not parsed by load()
    if problem:
        raise SnapshotError(f"{where}: {problem}")
    return doc


# a step's keys and the JSON type each must have (absent is fine: the replay has defaults)
_STEP_TYPES = {
    "node": (str, "a string"), "status": (str, "a string"), "determinism": (str, "a string"),
    "input_hash": (str, "a string"), "output_hash": (str, "a string"),
    "fields": (dict, "an object"), "units": (dict, "an object"), "params": (dict, "an object"),
    "overrides": (dict, "an object"), "runtime_inputs": (dict, "an object"),
    "edit": (dict, "an object"), "outputs": (dict, "an object"), "audit": (dict, "an object"),
    "deleted": (list, "a list"), "calls": (list, "a list"), "tools": (list, "a list"),
}


def _check_step(step: dict, where: str) -> None:
    for key, (kind, spelled) in _STEP_TYPES.items():
        value = step.get(key)
        if value is not None and not isinstance(value, kind):
            raise SnapshotError(f"{where}: \"{key}\" must be {spelled}, not {value!r:.60}")
    occurrence = step.get("occurrence")
    if occurrence is not None and (type(occurrence) is not int or occurrence < 1):
        raise SnapshotError(f"{where}: \"occurrence\" must be a whole number from 1, not "
                            f"{occurrence!r:.60}")
