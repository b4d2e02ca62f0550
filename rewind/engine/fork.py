"""Forking a stored run at a node visit, and finding where a stopped run could go on.

A fork starts from the state Burr's `initialize_from(..., fork_from_sequence_id=...)` would
load (`burr_compat.resumed`, pinned against Burr). This module picks the saved state just before
the visit, carries the lineage's param changes and edits forward, replays the parent's later
calls turn by turn with the runtime inputs recorded for them (`turns`), and checks that the
state is stored and that Burr would resume at the requested node before anything is written;
the stepper then builds a Burr application only if a visit must execute.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import time
import weakref
from typing import Any, Callable, Optional

from ..store import serde
from ..costs import step_cost
from ..errors import ForkError, InvalidRequest, NotFound
from ..keys import canonical_json
from ..models import Run, RunStatus, Step, StepStatus, normalize_overrides
from ..store import PARTITION_KEY, pointer_row
from . import burr_compat
from .context import ExecutionContext
from .liveness import Heartbeat, owner_fields
from .persistence import ThreadRoutedPersister
from .recorder import steps_from_rows
from .runner import base_builder, execute, new_run_id, save_start_state
from .turns import Halts, decode_turns, encode_turns, inputs_by_turn, turn_at
from .stepper import Stepper


_FINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.HALTED)
# store -> {(run id, status, finished_at, step_count): (resolved rows, their Steps)}
_PARENTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PARENTS_MAX = 2_000


def parent_trajectory(store: Any, run_row: dict) -> tuple:
    """(resolved step rows, `Step`s) of the run a fork starts from, for the fork to read (never
    handed out: it copies the steps it inherits). Those of a run that has stopped are
    remembered per store under its id, status, finish time and step count (a resume, which
    changes its rows, changes those too); a row and the content-addressed doc it names
    determine its `Step`."""
    parent_id = run_row["parent_id"]
    if run_row["status"] not in _FINAL:
        rows = store.get_node_rows(run_row["id"], parent_id)
        return rows, steps_from_rows(rows, store, parent_id)
    key = (run_row["id"], run_row["status"], run_row.get("finished_at"), run_row.get("step_count"))
    memo = _PARENTS.get(store)
    if memo is None:
        memo = _PARENTS[store] = {}
    got = memo.get(key)
    if got is None:
        rows = store.get_node_rows(run_row["id"], parent_id)
        got = (rows, steps_from_rows(rows, store, parent_id))
        if len(memo) >= _PARENTS_MAX:
            memo.clear()
        memo[key] = got
    return got


def inherited_step(s: Step, fork_id: str, index: int, reason: str) -> Step:
    """A fork's copy of its parent's step `s`, which it inherits at `index`. A shallow copy
    with the fields that change (what `dataclasses.replace` gives, without its `__init__`), and
    its own containers: the parsed parent step is shared by later forks."""
    step = object.__new__(Step)  # what copy.copy does, without its reduce protocol
    step.__dict__.update(s.__dict__)
    step.__dict__.update(
        status=StepStatus.INHERITED, run_id=fork_id, index=index, tokens=0, prompt_tokens=0,
        completion_tokens=0, tokens_saved=0, latency_ms=0.0, reason=reason, error=None,
        source_run=s.run_id if s.status != StepStatus.INHERITED else s.source_run,
        inherited_cost=step_cost(s), _inputs=None, _outputs=None,
        params=dict(s.params), field_hashes=dict(s.field_hashes), input_refs=dict(s.input_refs),
        output_refs=dict(s.output_refs), runtime_refs=dict(s.runtime_refs),
        units=dict(s.units), files=dict(s.files), calls=list(s.calls), tools=list(s.tools),
    )
    return step


def load_steps(store: Any, row: dict) -> list:
    return steps_from_rows(store.get_node_rows(row["id"], row["parent_id"]), store, row["parent_id"])


def fork_source(store: Any, run_row: dict, steps: list, index: int) -> tuple:
    """(app_id, sequence_id) of the saved state just before step `index` of a run."""
    fork_index = int(run_row.get("fork_index") or 0)
    if index == fork_index:
        start = (run_row["id"], int(run_row["start_seq"] if run_row["start_seq"] is not None else -1))
        if index == 0 or run_row.get("edit_json") or store.has_state(*start):
            return start
        # a fork that saved no start state: it started from the state after step index-1,
        # which its inherited row index-1 points at
    if index < fork_index:
        # An inherited step: the parent's trajectory up to here is this run's, and so is the
        # state before it, including an edit an ancestor made at exactly this node.
        parent = store.get_run_row(run_row["parent_id"]) if run_row["parent_id"] else None
        if parent is not None:
            return fork_source(store, parent, load_steps(store, parent), index)
        if index == 0:
            raise NotFound(f"run {run_row['id']}'s ancestors were purged; fork it at a later node",
                           run_id=run_row["id"])
    prev = steps[index - 1]
    if prev.sequence_id is None or prev.state_app_id is None:
        raise ForkError(f"step {prev.node}#{prev.occurrence} of run {run_row['id']} has no saved state",
                        run_id=run_row["id"], node=prev.node)
    return prev.state_app_id, int(prev.sequence_id)


def lineage_edits(store: Any, run_row: dict, done: set) -> dict:
    """{(node, occurrence): edit} made by a run and its ancestors, nearest first, except at the
    visits in `done` (already part of the state a replay starts from)."""
    edits: dict = {}
    row, seen = run_row, set()
    while row is not None and row["id"] not in seen:
        seen.add(row["id"])
        if row["edit_json"] and row["fork_node"]:
            key = (row["fork_node"], int(row["fork_occurrence"] or 1))
            if key not in done:
                edits.setdefault(key, serde.decode(row["edit_json"].encode("utf-8")))
        row = store.get_run_row(row["parent_id"]) if row["parent_id"] else None
    return edits


def recorded_inputs(steps: list) -> dict:
    """{(node, occurrence): runtime inputs} each step of a trajectory ran with."""
    return {(s.node, s.occurrence): s.runtime_inputs for s in steps if s.runtime_refs}


def replay_turns(ctx: ExecutionContext, parent_row: dict, steps: list, index: int,
                 visit: tuple, inputs: Optional[dict]) -> Halts:
    """Set `ctx` up to replay the parent's calls from the step at `index` on: the turn that step
    is in with its halts, then each later turn with its own; each with the inputs its steps
    were given (`inputs`, the fork's own, for the forked visit only). Returns the
    halts of the first."""
    turns = decode_turns(parent_row.get("turns_json"))
    if turns is None:  # recorded before turns were: inputs by visit, and the parent's length
        ctx.replay_inputs = recorded_inputs(steps)
        if inputs is not None:
            ctx.replay_inputs[visit] = {**ctx.replay_inputs.get(visit, {}), **inputs}
        return Halts(max_steps=len(steps)) if parent_row["status"] == RunStatus.HALTED else Halts()
    ctx.turn_inputs = inputs_by_turn(steps, turns)
    t = turn_at(turns, index)
    if index == len(steps) and parent_row["status"] == RunStatus.HALTED:
        # the visit a halted run never reached: a next call, halting as its last one did
        turns = turns + [turns[t].moved_to(index)]
        ctx.turn_inputs.append({})
        t += 1
    ctx.turns, ctx.later_turns, ctx.turn = turns[:t + 1], turns[t + 1:], t
    if inputs is not None:  # the forked visit's own; the turn's other steps keep theirs
        ctx.replay_inputs[visit] = {**ctx.turn_inputs[t], **inputs}
    return turns[t].halts


def _check_request(pipeline: Any, at: str, edit: dict, params: dict, occurrence: Any) -> None:
    action = pipeline.action(at)
    reads = set(action.reads)
    # a written field's prior value is the node's too (Burr's append/increment build on it,
    # and it is part of the node's key), so Burr's `override_state_values` of it is an input
    not_read = sorted(set(edit) - reads - set(action.writes))
    if not_read:
        raise InvalidRequest(
            f"node {at!r} does not read {', '.join(repr(f) for f in not_read)}; it reads "
            f"{sorted(reads) or 'nothing'} and writes {sorted(action.writes) or 'nothing'}. "
            "Fork at the node that reads the field.",
            node=at, field=not_read[0],
        )
    known_params = pipeline.param_names(at)
    unknown = sorted(set(params) - known_params)
    if unknown:
        raise InvalidRequest(
            f"node {at!r} has no parameter {', '.join(repr(p) for p in unknown)}; its "
            f"parameters are {sorted(known_params) or 'none'}", node=at, field=unknown[0],
        )
    for k, v in edit.items():
        canonical_json(v, f"edit.{k}")
    for k, v in params.items():
        canonical_json(v, f"params.{k}")
        _check_param_type(action, at, k, v)
    if isinstance(occurrence, bool) or not isinstance(occurrence, int) or occurrence < 1:
        raise InvalidRequest(f"occurrence must be a positive integer, not {occurrence!r}",
                             node=at, field="occurrence")


_SIMPLE = {"int": int, "float": float, "str": str, "bool": bool}


def _check_param_type(action: Any, node: str, name: str, value: Any) -> None:
    """A param whose parameter is annotated with a simple type (int, float, str, bool) must be
    a value of it (an int for a float too): refused up front, not a failed run later."""
    fn = getattr(action, "_originating_fn", None) or getattr(action, "fn", None)
    try:
        p = inspect.signature(fn).parameters.get(name) if fn is not None else None
    except (TypeError, ValueError):
        return
    kind = getattr(p, "annotation", None)
    kind = _SIMPLE.get(kind if isinstance(kind, str) else getattr(kind, "__name__", ""))
    if kind is None or value is None:
        return
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise InvalidRequest(f"param {name!r} of node {node!r} takes a {kind.__name__}, not "
                             f"{type(value).__name__} {value!r:.60}", node=node, field=name)


def fork_run(store: Any, heartbeat: Heartbeat, pipeline: Any, parent_row: dict, at: str, *,
             edit: Optional[dict] = None, params: Optional[dict] = None,
             inputs: Optional[dict] = None, allow_side_effects: bool = False,
             occurrence: int = 1, use_cache: bool = True,
             on_step: Optional[Callable] = None, owner: Optional[str] = None,
             resample: Any = (), resample_params: Optional[dict] = None) -> Run:
    """Fork `parent_row`'s run at the `occurrence`-th visit of `at`; bad requests raise
    `RewindError` and write nothing. `resample`: nodes executed afresh from `at` on (a blame
    trial), with `resample_params` set on each of them that takes them."""
    edit, params = dict(edit or {}), dict(params or {})
    run_id = parent_row["id"]
    _check_request(pipeline, at, edit, params, occurrence)
    resample = frozenset(resample or ())
    unknown = sorted(resample - set(pipeline.actions))
    if unknown:
        raise InvalidRequest(f"resample: pipeline {pipeline.name!r} has no node "
                             f"{', '.join(repr(n) for n in unknown)}", node=unknown[0], field="resample")
    parent_rows, steps = parent_trajectory(store, parent_row)
    visits = [i for i, s in enumerate(steps) if s.node == at]
    if len(visits) >= occurrence:
        index = visits[occurrence - 1]
    elif parent_row["status"] in (RunStatus.FAILED, RunStatus.INTERRUPTED, RunStatus.HALTED) \
            and occurrence == len(visits) + 1:
        index = len(steps)  # the next node the run never reached
    else:
        raise NotFound(f"node {at!r} ran {len(visits)} time(s) in run {run_id}; there is no "
                       f"occurrence {occurrence} to fork at", run_id=run_id, node=at)
    source_app, source_seq = fork_source(store, parent_row, steps, index)

    fork_id = new_run_id()
    prior = steps[:index]
    # a fork keeps its ancestors' param changes (each from the visit it was made at) and
    # re-applies their edits at visits still ahead: a no-edit fork of a fork replays it exactly
    overrides = normalize_overrides(json.loads(parent_row["params_json"]) if parent_row["params_json"] else {})
    if params:
        overrides.setdefault(at, []).append([occurrence, dict(params)])
    for node in sorted(resample):  # a wider sampling of every re-sampled node that takes it
        taken = {k: v for k, v in (resample_params or {}).items() if k in pipeline.param_names(node)}
        if taken:
            overrides.setdefault(node, []).append([1, taken])
    done = {(s.node, s.occurrence) for s in prior} | {(at, occurrence)}
    ctx = ExecutionContext(
        store, fork_id, pipeline, use_cache=use_cache,
        dry_run_side_effects=not allow_side_effects, allow_side_effects=allow_side_effects,
        param_overrides=overrides, parent_steps={(s.node, s.occurrence): s for s in steps},
        parent_id=run_id, prior_steps=[], on_step=on_step, owner=owner, resample=resample,
    )
    ctx.replay_edits = lineage_edits(store, parent_row, done)
    halts = replay_turns(ctx, parent_row, steps, index, (at, occurrence), inputs)
    if use_cache:
        ctx.cache_prefetch = store.cache_prefetch(
            [(s.node, ctx.cache_key(s.input_hash)) for s in steps[index:]
             if s.status != StepStatus.FAILED])
    # the state Burr's `initialize_from(persister, resume_at_next_action=True, fork_from_...,
    # override_state_values=edit)` would start the fork's application with
    persister = ThreadRoutedPersister(store)
    started = time.perf_counter()
    loaded = persister.load(PARTITION_KEY, source_app, source_seq)
    if loaded is None:
        raise ForkError(f"the state of run {run_id} before {at!r} ({source_app}@{source_seq}) "
                        "was not found; nothing was written", run_id=run_id, node=at)
    state, start, _ = burr_compat.resumed(loaded, edit or None, pipeline.entrypoint)
    nxt = burr_compat.next_action(pipeline.wrapped_graph(), state, start)
    if nxt is None or nxt.name != at:
        resumes = repr(nxt.name) if nxt else "nothing"
        why = (f"run {run_id} stopped before reaching {at!r}; its next node is {resumes}"
               if index == len(steps) else
               f"with these edits Burr would resume at {resumes}, not {at!r} (a transition "
               "reads an edited field)")
        raise ForkError(f"{why}; nothing was written", run_id=run_id, node=at)
    ctx.loaded(persister.last_loaded_refs)
    if edit:
        ctx.absorb(edit)
    start_state = {k: v for k, v in burr_compat.state_values(state).items() if not k.startswith("__")}

    inherited_rows = []
    reason = f"inherited from run {run_id}"
    for i, (raw, s) in enumerate(zip(parent_rows[:index], prior)):
        inherited_rows.append(pointer_row(raw, fork_id, i))
        ctx.steps.append(inherited_step(s, fork_id, i, reason))
    ctx.occurrences.update(s.node for s in ctx.steps)
    row = {
        "id": fork_id, "pipeline": pipeline.name, "status": str(RunStatus.RUNNING),
        "parent_id": run_id, "fork_node": at, "fork_occurrence": occurrence,
        "graph_id": pipeline.graph_id, "entrypoint": pipeline.entrypoint,
        "created_at": time.time(), "summary": parent_row["summary"],
        # type-preserving (serde), so an ancestor's edit replays with the values it had
        "edit_json": serde.encode(edit, "edit").decode("utf-8") if edit else None,
        "params_json": json.dumps(overrides, sort_keys=True, default=repr) if overrides else None,
        "allow_side_effects": int(bool(allow_side_effects)), "use_cache": int(bool(use_cache)),
        "start_seq": source_seq, "fork_index": index, "owner": owner, **owner_fields(),
    }
    # The fork's rows are written with its first commit: before the first step that executes,
    # or at the end when every step is served from the cache.
    ctx.pending_run = row
    ctx.run_row = dict(row)
    ctx.pending_rows.extend(inherited_rows)
    before = prior[-1] if prior else None
    if edit or before is None or (before.state_app_id, before.sequence_id) != (source_app, source_seq):
        # The state the fork starts from, saved under its own id. Not needed (so not stored)
        # when it is unedited and is the state its inherited last step points at.
        save_start_state(ctx, fork_id, source_seq, at, start_state)
    if ctx.turns is not None:
        row["turns_json"] = encode_turns(ctx.turns)
    def build(state: Any, start: str) -> Any:  # the first visit that must execute
        app = base_builder(ctx, fork_id).with_state(state).with_entrypoint(start).build()
        burr_compat.set_sequence_id(app, burr_compat.state_values(state)[burr_compat.SEQUENCE_ID])
        return app

    stepper = Stepper(ctx, state=state, start=start, build=build, persister=persister)
    store.end_snapshot()  # what the fork read, it read as of one moment; its steps read afresh
    return execute(ctx, stepper, heartbeat, started, halts)


@dataclasses.dataclass
class NextVisit:
    """The visit a stopped run never reached, and the state Burr saved before it."""

    node: str
    occurrence: int
    state: dict

    # the mapping spelling callers of the first API used (nxt["node"], nxt.get("state"))
    def __getitem__(self, key: str):
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def next_visit(store: Any, pipeline: Any, row: dict) -> Optional[NextVisit]:
    """For a run that stopped early, the visit it could be forked or resumed at; else None."""
    if row["status"] not in (RunStatus.INTERRUPTED, RunStatus.HALTED):
        return None  # a failed run is forked at its failed step, which it has
    steps = [s for s in load_steps(store, row) if s.status != StepStatus.FAILED]
    loaded = store.persister().load(PARTITION_KEY, *fork_source(store, row, steps, len(steps)))
    if loaded is None:
        return None
    state = loaded["state"]
    if loaded["status"] == "completed":
        nxt = pipeline.graph.get_next_node(loaded["position"], state, pipeline.entrypoint)
        name = nxt.name if nxt is not None else None
    else:  # a start state: Burr resumes at its position
        name = loaded["position"]
    if name is None:
        return None
    return NextVisit(node=name, occurrence=sum(1 for s in steps if s.node == name) + 1,
                     state={k: v for k, v in state.get_all().items() if not k.startswith("__")})
