"""Runs recorded by plain Burr's tracker (`with_tracker("local", project=...)`) turned into Rewind
runs whose steps can be forked and replayed with the pipeline registered.

Burr's `LocalTrackingClient` keeps, per step, a begin line (action, runtime inputs, start time)
and an end line (the result, the exception, the whole state after the step, end time). That is
enough to key every step exactly as the engine does (the pipeline's node specs compute the
hashes), store its outputs and the state after it, and put executed outputs in the cache, so a
no-edit fork of an imported run calls no node and reproduces every hash.

What the tracker does not keep is reported, never invented (`ImportReport.not_kept`): the state
before the first step (taken as the state after it without the fields it wrote, unless you pass
`initial_state`), token usage (unless the app logged it as attributes), the params a node ran
with (the pipeline's own are assumed), and exact types (Burr writes what its serde cannot encode
as `str(value)`). A node whose recorded source differs from the pipeline's gets no cache entry:
a fork executes it.

The tracker's files are read by `rewind.paths` (regular files only, at most `MAX_READ_BYTES`
each: a `log.jsonl` linked to `/dev/zero` or a FIFO is refused in one line, never read), and
every line parsed by `paths.parse_json` (nesting deeper than `MAX_JSON_DEPTH` refused).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from typing import Any, Optional

from ..errors import CommitError, InvalidRequest, NotFound, RewindError
from ..keys import is_internal_key, sha256_hex
from ..models import RunStatus, StepStatus
from ..paths import MAX_READ_BYTES, JSONRefused, open_regular, parse_json, read_bytes
from ..store import PARTITION_KEY

TOKEN_KEYS = (("prompt_tokens", "completion_tokens"),
              ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
              ("input_tokens", "output_tokens"))


@dataclasses.dataclass
class ImportReport:
    """What an import made: {Burr app id: Rewind run id}, and what the tracker had not kept.
    `project`: the project folder used when the folder given was Burr's storage folder with
    one project in it (None when the folder was a project or an app)."""

    runs: dict = dataclasses.field(default_factory=dict)
    not_kept: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)
    project: Optional[str] = None

    @property
    def run_ids(self) -> list:
        return list(self.runs.values())

    def __str__(self) -> str:
        lines = [f"imported {len(self.runs)} Burr app(s)"]
        lines += [f"  {app} -> run {rid}" for app, rid in self.runs.items()]
        lines += [f"  skipped: {s}" for s in self.skipped]
        lines += [f"  not kept by Burr's tracker: {n}" for n in self.not_kept]
        return "\n".join(lines)


@dataclasses.dataclass
class _BurrStep:
    seq: int
    action: str
    start: float
    end: Optional[float] = None
    inputs: dict = dataclasses.field(default_factory=dict)
    result: Optional[dict] = None
    exception: Optional[str] = None
    state: Optional[dict] = None
    attributes: dict = dataclasses.field(default_factory=dict)


def _ts(text: Any) -> float:
    when = datetime.datetime.fromisoformat(str(text))
    return when.timestamp()  # naive: local time, as Burr's tracker wrote it


def read_app(path: str) -> tuple:
    """(graph dict, metadata dict, [_BurrStep] in sequence order) of one tracked Burr app."""
    from burr.core import serde

    log_path = os.path.join(path, "log.jsonl")
    if not os.path.lexists(log_path):
        raise NotFound(f"{path} holds no log.jsonl: not an app directory of Burr's tracker")
    graph, meta = {}, {}
    for name, into in (("graph.json", graph), ("metadata.json", meta)):
        p = os.path.join(path, name)
        if os.path.lexists(p):
            doc = _json(read_bytes(p, p).decode("utf-8", errors="replace"), p,
                        "is not JSON ({}); is the file complete?")
            if not isinstance(doc, dict):
                raise InvalidRequest(f"{p} holds {type(doc).__name__}, not the JSON object Burr's "
                                     "tracker writes")
            into.update(doc)
    steps: dict = {}
    with open_regular(log_path, log_path) as f:
        read = 0
        for n, raw in enumerate(f, 1):
            read += len(raw)
            if read > MAX_READ_BYTES:  # it grew since it was opened
                raise InvalidRequest(f"{log_path}: the file is over {MAX_READ_BYTES // 2**20} MB")
            line = _json(raw.decode("utf-8", errors="replace"), f"{log_path} line {n}",
                         "is not JSON; is the file complete?")
            try:
                _read_line(line, steps, serde)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                what = f"has no {e}" if isinstance(e, KeyError) else f"is not what Burr's tracker writes ({e})"
                raise InvalidRequest(f"{log_path} line {n} {what}") from None
    return graph, meta, [steps[k] for k in sorted(steps)]


def _json(text: str, what: str, not_json: str) -> Any:
    """Parsed JSON of a tracker file or line; `not_json` (with {} for the parser's message)
    words invalid JSON, and what is too deep or not finite is refused as `parse_json` words it
    (Burr's and Rewind's decoders would otherwise recurse out of the stack)."""
    try:
        return parse_json(text, what)
    except JSONRefused as e:
        if e.kind != "syntax":
            raise
        raise InvalidRequest(f"{what} {not_json.format(e.detail)}") from None


def _read_line(line: Any, steps: dict, serde: Any) -> None:
    """One tracker log line into `steps`; KeyError / TypeError / ValueError where it is not
    Burr's layout (read_app names the line)."""
    if not isinstance(line, dict):
        raise TypeError(f"a JSON {type(line).__name__}, not an object")
    kind = line.get("type")
    if kind == "begin_entry":
        inputs = line.get("inputs") or {}
        if not isinstance(inputs, dict):
            raise TypeError(f"inputs is a {type(inputs).__name__}, not an object")
        steps[line["sequence_id"]] = _BurrStep(
            seq=int(line["sequence_id"]), action=str(line["action"]), start=_ts(line["start_time"]),
            inputs=serde.deserialize(inputs))
    elif kind == "end_entry" and line["sequence_id"] in steps:
        state, result = line.get("state") or {}, line.get("result")
        if not isinstance(state, dict):
            raise TypeError(f"state is a {type(state).__name__}, not an object")
        if result is not None and not isinstance(result, dict):
            raise TypeError(f"result is a {type(result).__name__}, not an object")
        s = steps[line["sequence_id"]]
        s.end, s.exception = _ts(line["end_time"]), line.get("exception")
        s.result, s.state = result, state
    elif kind == "attribute" and line.get("action_sequence_id") in steps:
        steps[line["action_sequence_id"]].attributes[line["key"]] = line.get("value")


def _entries(folder: str, strict: bool = False) -> list:
    """The names in `folder` that are not hidden, sorted. A folder that cannot be listed: an
    InvalidRequest naming it when `strict` (the folder asked for), else none (one under it)."""
    try:
        names = os.listdir(folder)
    except OSError as e:
        if strict:
            raise InvalidRequest(f"{folder} cannot be read ({e.strerror or e})") from None
        return []
    return sorted(n for n in names if not n.startswith("."))


def _apps_in(folder: str, strict: bool = False) -> list:
    """The app folders (`<app_id>/log.jsonl`) right under `folder`, sorted."""
    return [os.path.join(folder, n) for n in _entries(folder, strict)
            if os.path.exists(os.path.join(folder, n, "log.jsonl"))]


def _app_dirs(directory: str, project: Optional[str]) -> tuple:
    """([app folder], the project used when `directory` is Burr's storage folder itself (e.g.
    ~/.burr) with exactly one project in it, else None)."""
    root = os.path.expanduser(str(directory))
    if project:
        root = os.path.join(root, project)
    if os.path.exists(os.path.join(root, "log.jsonl")):
        return [root], None
    if not os.path.isdir(root):
        raise NotFound(f"no Burr tracking directory at {root}; pass ~/.burr/<project> or an app "
                       "directory (one holding log.jsonl)")
    dirs = _apps_in(root, strict=True)
    if dirs:
        return dirs, None
    # Burr's tracker keeps <storage>/<project>/<app_id>/: this may be the storage folder itself
    projects = {}
    for name in _entries(root):
        apps = _apps_in(os.path.join(root, name))
        if apps:
            projects[name] = apps
    if len(projects) == 1:
        (name, apps), = projects.items()
        return apps, name
    if projects:
        names = list(projects)
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        raise InvalidRequest(f"{root} holds {len(names)} Burr projects: {shown}; pass one of them "
                             f"(--project P, or {os.path.join(root, 'P')} as the folder)",
                             field="project")
    raise NotFound(f"{root} holds no Burr app (no <app_id>/log.jsonl under it, nor under a "
                   "project folder in it)")


def _tokens(attributes: dict) -> Optional[tuple]:
    for p_key, c_key in TOKEN_KEYS:
        if p_key in attributes or c_key in attributes:
            try:
                return int(attributes.get(p_key) or 0), int(attributes.get(c_key) or 0)
            except (TypeError, ValueError):
                return None
    return None


def _user(values: dict) -> dict:
    return {k: v for k, v in values.items() if not is_internal_key(k)}


def import_burr(rw: Any, directory: str, pipeline: Any, project: Optional[str] = None,
                initial_state: Optional[dict] = None) -> ImportReport:
    """Import every app under `directory` (a `~/.burr/<project>` folder, `~/.burr` with
    `project=`, `~/.burr` itself when it holds one project, or one app's folder) as a Rewind
    run of `pipeline` (a `Pipeline` or a registered name). `initial_state` is the state the
    app(s) started from, which Burr's tracker does not keep. An app already imported is
    skipped."""
    pipeline = rw.pipeline(pipeline)
    report = ImportReport()
    dirs, report.project = _app_dirs(directory, project)
    if initial_state is not None and sum(not _is_task(d) for d in dirs) > 1:
        # one initial state for apps that started from different ones would be recorded as
        # the first node's writes wherever it contradicts Burr's log: refused, not guessed
        raise InvalidRequest(
            f"{directory} holds {len(dirs)} Burr apps; an initial state belongs to one app: "
            "import one app's folder at a time with it (DIR/APP_ID), or the folder without it",
            field="initial_state")
    for path in dirs:
        app_id = os.path.basename(os.path.normpath(path))
        run_id = sha256_hex(f"burr:{os.path.realpath(path)}".encode("utf-8"))[:16]
        if _already_imported(rw, run_id, app_id, report):
            continue
        try:
            _import_app(rw, pipeline, path, app_id, run_id, initial_state, report)
        except CommitError:
            if not _already_imported(rw, run_id, app_id, report, meanwhile=True):
                raise
    return report


def _is_task(path: str) -> bool:
    """Whether an app folder is a MapStates / MapActions task Burr ran inside another app's step
    (its metadata names a spawning parent): skipped by the import, not an app of its own."""
    try:
        meta = json.loads(read_bytes(os.path.join(path, "metadata.json"), "metadata.json", 1 << 20))
    except Exception:  # noqa: BLE001 - unreadable: the import itself says why, app by app
        return False
    return isinstance(meta, dict) and bool(meta.get("spawning_parent_pointer"))


def _already_imported(rw: Any, run_id: str, app_id: str, report: ImportReport,
                      meanwhile: bool = False) -> bool:
    """Is the app's run here, whole? An import a crash cut short (its run `interrupted`, with
    part of Burr's steps) is removed to be imported again, unless someone forked it since.
    `meanwhile`: another process imported it while this one tried (it lost the insert)."""
    store = rw.store
    row = store.get_run_row(run_id)
    if row is not None and row["status"] == "interrupted" and not meanwhile \
            and not store.children(run_id):
        with store.transaction():
            store.delete_runs([run_id])
            store.delete_states_of_apps([run_id])
        report.not_kept.append(f"{app_id}: an earlier import of it was cut short; imported again")
        return False
    if row is None:
        return False
    how = "imported meanwhile by another process" if meanwhile else "already imported"
    report.skipped.append(f"{app_id}: {how} as run {run_id}")
    report.runs[app_id] = run_id
    return True


def _check_graph(pipeline: Any, app_id: str, graph: dict, steps: list, report: ImportReport) -> set:
    """Nodes whose recorded code differs from the pipeline's (no cache entries for them)."""
    unknown = sorted({s.action for s in steps} - set(pipeline.actions))
    if unknown:
        raise InvalidRequest(
            f"Burr app {app_id} ran action(s) {unknown} that pipeline {pipeline.name!r} does not "
            f"have (its nodes: {', '.join(pipeline.actions)}); pass the pipeline the app was built "
            "from", node=unknown[0])
    changed = set()
    for a in graph.get("actions") or []:
        inner = pipeline.actions.get(a.get("name"))
        if inner is None or not a.get("code"):
            continue
        try:
            same = inner.get_source().strip() == str(a["code"]).strip()
        except Exception:
            same = False
        if not same:
            changed.add(a["name"])
    if changed:
        report.not_kept.append(
            f"{app_id}: the code of {', '.join(sorted(changed))} differs from the source Burr "
            "recorded; their outputs are not cached, so a fork executes them")
    return changed


def _start_state(pipeline: Any, app_id: str, first: Any, initial_state: Optional[dict],
                 report: ImportReport) -> tuple:
    """(state before the first step, or None when it cannot be known, and why)."""
    from burr.core import State

    if initial_state is not None:
        return dict(initial_state)
    after = _user(State.deserialize(first.state or {}).get_all())
    action = pipeline.actions[first.action]
    written = [w for w in action.writes if w in after]
    rereads = sorted(set(written) & set(action.reads))
    if rereads:
        report.not_kept.append(
            f"{app_id}: the state before its first step; {first.action} reads and rewrites "
            f"{', '.join(rereads)}, whose starting value is lost, so {first.action} is not keyed "
            "and cannot be forked at; pass initial_state= (--initial-state) to import it")
        return None
    if written:
        report.not_kept.append(
            f"{app_id}: the state before its first step; taken as the state after "
            f"{first.action} without {', '.join(written)} (pass initial_state= if the app "
            "started with values for them)")
    return {k: v for k, v in after.items() if k not in written}


def _import_app(rw: Any, pipeline: Any, path: str, app_id: str, run_id: str,
                initial_state: Optional[dict], report: ImportReport) -> None:
    from burr.core import State, serde

    from ..engine import ExecutionContext, owner_fields, summarize_state
    from ..engine.recorder import record_step
    from ..engine.replay import ReplayAction
    from ..engine.runner import save_start_state
    from ..engine.context import StepRecord

    graph, meta, steps = read_app(path)
    if not steps:
        report.skipped.append(f"{app_id}: its log holds no step")
        return
    spawned = meta.get("spawning_parent_pointer")
    if spawned:  # a MapStates / MapActions task: its parent's step ran it, and holds its output
        report.skipped.append(
            f"{app_id}: a sub-application Burr ran inside app {spawned.get('app_id')}'s step "
            f"{spawned.get('sequence_id')}; that step is imported with its result")
        return
    if meta.get("parent_pointer"):
        pp = meta["parent_pointer"]
        report.not_kept.append(
            f"{app_id}: Burr forked it from app {pp.get('app_id')} at sequence "
            f"{pp.get('sequence_id')}; it is imported as a run of its own")
    code_changed = _check_graph(pipeline, app_id, graph, steps, report)
    store = rw.store
    ctx = ExecutionContext(store, run_id, pipeline, use_cache=True)
    first = steps[0]
    before = _start_state(pipeline, app_id, first, initial_state, report)
    keyed_start = before is not None
    if before is None:  # what is known of it: the fields the first step did not touch
        after0 = _user(State.deserialize(first.state or {}).get_all())
        action0 = pipeline.actions[first.action]
        before = {k: v for k, v in after0.items() if k not in action0.writes}
    ctx.absorb(before)
    row = {
        "id": run_id, "pipeline": pipeline.name, "status": str(RunStatus.RUNNING),
        "graph_id": pipeline.graph_id, "entrypoint": pipeline.entrypoint,
        "created_at": first.start, "summary": summarize_state(before), "use_cache": 1,
        "start_seq": first.seq - 1, "fork_index": 0, **owner_fields(),
    }
    ctx.pending_run = row
    ctx.run_row = dict(row)
    store.live_contexts[run_id] = ctx
    no_tokens, status, error = False, RunStatus.COMPLETED, None
    try:
        if keyed_start:
            save_start_state(ctx, run_id, first.seq - 1, first.action, before)
            store.live_contexts[run_id] = ctx  # save_start_state took it out again
        state = dict(before)
        for s in steps:
            if s.end is None:  # the process died mid-step: Burr wrote no end line
                status, error = RunStatus.INTERRUPTED, f"Burr app {app_id} stopped during {s.action}"
                break
            inner = pipeline.actions[s.action]
            occurrence = ctx.occurrences[s.action] + 1
            ctx.occurrences[s.action] = occurrence
            spec = ctx.spec(s.action, inner, occurrence)
            runtime = {k: v for k, v in s.inputs.items() if not k.startswith("__")}
            readable = spec.readable(state)
            record = StepRecord(node=s.action, occurrence=occurrence, started_at=s.start,
                                params_doc=spec.params_doc, params_json=spec.params_json,
                                units=spec.units, inputs=ctx.refs_of(readable),
                                runtime=ctx.blob_refs(runtime, f"{s.action}.inputs"))
            keyed = keyed_start or s is not first
            if keyed:
                try:
                    record.field_hashes = spec.field_hashes(readable, None, runtime,
                                                            refs=record.inputs)
                    record.input_hash = spec.input_hash(record.field_hashes)
                except RewindError as e:
                    keyed = False
                    report.not_kept.append(f"{app_id}: {s.action} (sequence {s.seq}) cannot be "
                                           f"keyed: {e}")
            record.latency_ms = max((s.end - s.start) * 1000.0, 0.0)
            record.reason = f"imported from Burr app {app_id} (sequence {s.seq})"
            used = _tokens(s.attributes)
            if used is None:
                no_tokens = True
            else:
                record.prompt_tokens, record.completion_tokens = used
            after = _user(State.deserialize(s.state or {}).get_all())
            if s.exception:
                record.fail(s.exception.strip().splitlines()[-1][:2000])
                status, error = RunStatus.FAILED, f"{s.action}: {record.error}"
                after = state
            else:
                record.status = StepStatus.EXECUTED
                record.side_effect = spec.policy.determinism == "side-effect"
                if spec.writes:
                    outputs = {w: after[w] for w in spec.writes if w in after}
                else:  # Burr's Result: what it returned is what it produced
                    outputs = _user(serde.deserialize(s.result or {}))
                # what Burr's log says the step did to the whole state: fields set outside its
                # declared writes (kept by Burr, served again by a hit) and fields removed
                stray = {k: v for k, v in after.items()
                         if k not in spec.writes and (k not in state or state[k] != v)}
                record.extra = sorted(stray)
                outputs.update(stray)
                deleted = [k for k in state if k not in after and not k.startswith("__")]
                ReplayAction._finish_outputs(ctx, spec, record, outputs, deleted)  # noqa: SLF001
                if spec.policy.cacheable and keyed and s.action not in code_changed:
                    entry = store.cache_get(s.action, record.input_hash)
                    ReplayAction._cache_entry(ctx, spec, record, entry, False)  # noqa: SLF001
                    record.cache_row["cached_at"] = s.end  # a time-bound value's age is Burr's
            ctx.current = None
            record_step(ctx, record, s.seq, run_id)
            store.persister().save(
                PARTITION_KEY, run_id, s.seq, s.action,
                State({**after, "__PRIOR_STEP": s.action, "__SEQUENCE_ID": s.seq}),
                "failed" if s.exception else "completed")
            state = after
            if s.exception:
                break
        if status == RunStatus.COMPLETED:
            nxt = pipeline.graph.get_next_node(steps[-1].action, State(state), pipeline.entrypoint)
            if nxt is not None:
                status = RunStatus.HALTED  # Burr stopped at a halt; `rewind resume` goes on
        own = ctx.steps
        last = next((s for s in reversed(steps) if s.end is not None), first)
        fields = dict(
            status=str(status), error=error, finished_at=last.end or last.start,
            total_tokens=sum(x.tokens for x in own), tokens_saved=0,
            latency_ms=max(((last.end or last.start) - first.start) * 1000.0, 0.0),
            step_count=len(own), owner_host=None, owner_pid=None, owner_started=None,
        )
        ctx.pending_run.update(fields) if ctx.pending_run is not None else None
        ctx.commit(None if ctx.pending_run is not None else
                   (lambda st: st.update_run(run_id, **fields)))
    finally:
        store.live_contexts.pop(run_id, None)
    if no_tokens:
        report.not_kept.append(f"{app_id}: token usage (no prompt_tokens/completion_tokens or "
                               "gen_ai.usage.* attributes were logged); its steps count 0 tokens")
    report.not_kept.append(f"{app_id}: the params each node ran with; the pipeline's are assumed")
    report.runs[app_id] = run_id
