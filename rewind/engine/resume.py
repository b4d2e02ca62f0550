"""Resuming a stored run in place: the next chat turn of a halted run, the failed step of a
failed run re-executed, or an interrupted run continued.

The run goes on under its own id from the last state Burr saved for a step that succeeded;
Burr numbers the next step after every state saved for the run (a failed attempt's included),
so no saved state is ever written twice.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Optional

from ..errors import CommitError, InvalidRequest, NotFound
from ..models import Run, RunStatus, StepStatus
from ..store import PARTITION_KEY
from . import burr_compat
from .context import ExecutionContext
from .fork import fork_source, lineage_edits, load_steps, recorded_inputs
from .liveness import Heartbeat, owner_fields
from .runner import base_builder, execute
from .turns import Halts, Turn, decode_turns, encode_turns

RESUMABLE = (RunStatus.HALTED, RunStatus.FAILED, RunStatus.INTERRUPTED)


def resume_run(store: Any, heartbeat: Heartbeat, pipeline: Any, row: dict, *,
               inputs: Optional[dict] = None, halt_before: Optional[list] = None,
               halt_after: Optional[list] = None,
               on_step: Optional[Callable] = None) -> Run:
    run_id = row["id"]
    if row["status"] not in RESUMABLE:
        raise InvalidRequest(f"run {run_id} is {row['status']}; only halted, failed or "
                             "interrupted runs resume", run_id=run_id)
    if inputs is not None and not isinstance(inputs, dict):
        raise InvalidRequest(f"inputs must be a dict of runtime inputs, not {type(inputs).__name__}",
                             run_id=run_id, field="inputs")
    halts = Halts.of(pipeline.graph, halt_before, halt_after)
    steps = load_steps(store, row)
    keep = [s for s in steps if s.status != StepStatus.FAILED]  # a failed step is retried
    parent_steps = {}
    if row["parent_id"]:
        prow = store.get_run_row(row["parent_id"])
        if prow is not None:
            parent_steps = {(s.node, s.occurrence): s for s in load_steps(store, prow)}
    ctx = ExecutionContext(
        store, run_id, pipeline, use_cache=bool(row["use_cache"]),
        dry_run_side_effects=bool(row["parent_id"]) and not row["allow_side_effects"],
        allow_side_effects=bool(row["allow_side_effects"]),
        param_overrides=json.loads(row["params_json"]) if row["params_json"] else {},
        parent_steps=parent_steps, parent_id=row["parent_id"], prior_steps=keep,
        on_step=on_step, inputs=inputs, owner=row.get("owner"),
    )
    if inputs is None and row["status"] != RunStatus.HALTED:
        # no new inputs: a retried step runs with the inputs it was first given (a halted
        # run's next turn without inputs gets none, as Burr's next `run()` call would)
        last = recorded_inputs(steps)
        ctx.inputs = dict(next(iter(reversed(list(last.values()))), {})) if last else {}
    turns = decode_turns(row.get("turns_json"))
    if turns is not None:
        ctx.turns = [t for t in turns if t.start < len(keep)] + [Turn(len(keep), halts)]
    done = {(s.node, s.occurrence) for s in keep}
    if row["fork_node"]:
        done.add((row["fork_node"], int(row["fork_occurrence"] or 1)))
    ctx.replay_edits = lineage_edits(store, row, done)
    source_app, source_seq = fork_source(store, row, keep, len(keep))
    persister = store.persister()
    saved = persister.load(PARTITION_KEY, source_app, source_seq)
    if saved is None:
        raise NotFound(f"run {run_id} has no saved state to resume from", run_id=run_id)
    ctx.loaded(dict(getattr(persister, "last_loaded_refs", {}) or {}))
    builder = base_builder(ctx, run_id).with_state(saved["state"])
    if saved["status"] == "completed":
        builder = builder.with_state(**{burr_compat.PRIOR_STEP: saved["position"]})
        builder = builder.with_entrypoint(pipeline.entrypoint)
    else:
        builder = builder.with_entrypoint(saved["position"])
    app = builder.build()
    # after every state saved for the run: a failed attempt's, or one whose step row a failed
    # commit never wrote, keep their numbers
    used = [int(saved["sequence_id"]), store.max_sequence_id(run_id) or -1]
    burr_compat.set_sequence_id(app, max(used))

    # a run of this process whose failed commit left it `running` in the database (its mark
    # failed too): this process knows it is interrupted, and claims it from `running`
    kept = store.forget_unfinished(run_id)
    statuses = [str(x) for x in RESUMABLE] + ([str(RunStatus.RUNNING)] if kept else [])

    def reopen(s: Any) -> None:
        # the lease: of two concurrent resumes exactly one moves the run to `running`
        turn = {"turns_json": encode_turns(ctx.turns)} if ctx.turns is not None else {}
        if not s.claim_run(run_id, statuses, status=str(RunStatus.RUNNING),
                           error=None, finished_at=None, **turn, **owner_fields()):
            raise InvalidRequest(f"run {run_id} is already being resumed or was resumed by "
                                 "another process; refresh and look at it again", run_id=run_id)
        s.delete_failed_steps(run_id)

    try:
        ctx.commit(reopen)
    except BaseException as e:
        if kept:  # still interrupted, as far as this process knows
            store.note_unfinished(run_id, *kept)
        if isinstance(e, CommitError):
            cause, remedy = store.describe_failure(e)
            raise CommitError(f"could not resume run {run_id} in {store.url}: {cause}; nothing "
                              f"changed (it is still {row['status']}): {remedy}, then resume it "
                              "again", run_id=run_id) from e
        raise
    return execute(ctx, app, heartbeat, time.perf_counter(), halts)
