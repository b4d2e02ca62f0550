"""Driving an execution step by step (Burr or the stepper), and starting a first run.

`drive` steps the execution as Burr's own `iterate` would (halt_before / halt_after, with
`@tag:` names, and at least one step before any halt), handing each step its runtime inputs;
the `Stepper` serves cached visits itself and has Burr step the rest.
`execute` wraps it: the context is current while Burr runs, and whatever happens the run row
ends in a final status (completed, halted, failed, or interrupted on KeyboardInterrupt/exit).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable, Optional

from burr.core import ApplicationBuilder, State

from ..errors import CommitError, InvalidRequest, RewindError, StoreError
from ..models import Run, RunStatus, StepStatus
from ..redaction import redact
from .. import store as _store
from ..store import PARTITION_KEY, RUN_COLUMNS
from .context import CURRENT, ExecutionContext
from ..keys import param_hash
from .liveness import Heartbeat, owner_fields
from .persistence import ThreadRoutedPersister
from .stepper import Stepper, burr_hooks
from .turns import Halts, Turn, encode_turns

MAX_STEPS = 10_000


def drive(ctx: ExecutionContext, stepper: Stepper, halts: Halts) -> RunStatus:
    """Step the execution until it ends or halts; the status it stopped with. A fork replaying
    a multi-turn run goes on, each time a turn halts, with the next turn it recorded."""
    while True:
        status = drive_turn(ctx, stepper, halts)
        if status != RunStatus.HALTED or not ctx.later_turns:
            return status
        halts = ctx.next_turn()


def drive_turn(ctx: ExecutionContext, stepper: Stepper, halts: Halts) -> RunStatus:
    """Step one call (`run(inputs=, halt_after=)` in Burr) until it ends or halts."""
    taken = 0
    while True:
        nxt = stepper.next_action()
        if nxt is None:
            return RunStatus.COMPLETED
        if halts.max_steps is not None and len(ctx.steps) >= halts.max_steps:
            return RunStatus.HALTED
        if taken and nxt.name in halts.before:
            return RunStatus.HALTED
        if taken >= MAX_STEPS:
            raise RewindError(f"run exceeded {MAX_STEPS} steps; is there a loop with no exit, "
                              "or a chat loop that needs halt_after=[...]?", run_id=ctx.run_id)
        nxt = stepper.action_to_run(nxt)
        if nxt is None:  # Burr's step finds no action once the sequence id has advanced
            return RunStatus.COMPLETED
        stepper.step(nxt, ctx.inputs_for(nxt.name, ctx.occurrences[nxt.name] + 1))
        taken += 1
        if nxt.name in halts.after:
            return RunStatus.HALTED


def execute(ctx: ExecutionContext, app: Any, heartbeat: Heartbeat, started: float,
            halts: Optional[Halts] = None) -> Run:
    """Drive an execution (a `Stepper`, or a Burr application or its builder) until it stops;
    finalize the run row."""
    store = ctx.store
    if isinstance(app, ApplicationBuilder):
        app = app.build()
    stepper = app if isinstance(app, Stepper) else Stepper(ctx, app=app)
    store.attach_context(ctx.run_id, ctx)
    heartbeat.add(ctx.run_id)
    status, error = RunStatus.COMPLETED, None
    token = CURRENT.set(ctx)
    try:
        status = drive(ctx, stepper, halts or Halts())
    except Exception as e:
        if store_failed(store, e):  # the database, not the node: resumable as it stands
            # (a fork not written yet is written with this row, or finalize says it was not)
            status, error = RunStatus.INTERRUPTED, failure_message(ctx, e, written=True)
        else:
            status = RunStatus.FAILED
            error = ctx.last_error or redact(f"{type(e).__name__}: {e}")
    except BaseException:
        status = RunStatus.INTERRUPTED
        error = "interrupted (KeyboardInterrupt or exit)"
        raise
    finally:
        CURRENT.reset(token)
        heartbeat.remove(ctx.run_id)
        store.detach_context(ctx.run_id)
        fields = finish_fields(ctx, status, error, started)
        finalize(ctx, fields)
    if ctx.run_row is not None:
        row = {c: None for c in RUN_COLUMNS}
        row.update(ctx.run_row)
        row.update(fields)
    else:
        row = store.get_run_row(ctx.run_id)
    return Run.from_row(row, steps=list(ctx.steps))


def finalize(ctx: ExecutionContext, fields: dict) -> None:
    """Commit the run's last steps and its final row. If that fails, a fork not yet written
    leaves nothing; a written run is marked `interrupted` (resumable) if the database lets us,
    else this process treats it as interrupted until it can mark it (`note_unfinished`)."""
    if ctx.pending_run is not None:  # a fork not yet written: its row, final at once
        ctx.pending_run.update(fields)
        try:
            ctx.commit()
        except CommitError as e:
            raise CommitError(failure_message(ctx, e, written=False)) from e
        return
    try:
        ctx.commit(lambda s: s.update_run(ctx.run_id, **fields))
    except CommitError as e:
        message = failure_message(ctx, e, written=True)
        error = fields.get("error") or message
        try:
            with ctx.store.transaction():
                ctx.store.mark_interrupted(ctx.run_id, error, fields["finished_at"])
        except Exception:  # this process marks it when the database is back
            ctx.store.reset_connection()
            ctx.store.note_unfinished(ctx.run_id, error, fields["finished_at"])
        raise CommitError(message, run_id=ctx.run_id) from e


def store_failed(store: Any, error: Optional[BaseException]) -> bool:
    """Did a write to Rewind's database fail (a commit, a node's tool-cache write), rather
    than a node's own code? A driver error counts only when Rewind's store raised it: a node
    may use sqlite3 or psycopg2 itself, and its failures are the node's."""
    for _ in range(16):
        if error is None:
            return False
        if isinstance(error, CommitError):
            return True
        if isinstance(error, tuple(store.backend_errors)) and _raised_in_store(error):
            return True
        error = error.__cause__ or error.__context__
    return False


_STORE_DIR = os.path.dirname(os.path.abspath(_store.__file__)) + os.sep


def _raised_in_store(error: BaseException) -> bool:
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(_STORE_DIR):
            return True
        tb = tb.tb_next
    return False


def failure_message(ctx: Any, error: BaseException, written: bool) -> str:
    """One line for a write that failed: its cause in words (a full disk, a lock, a lost
    connection) and advice that matches what was stored: a run that was written is
    interrupted and resumes; one that was not does not exist, so it is started again."""
    store = ctx.store
    cause, remedy = store.describe_failure(error)
    if not written:
        what = (f"the fork of run {ctx.parent_id}" if ctx.parent_id
                else f"a run of pipeline {ctx.pipeline.name!r}")
        return (f"could not start {what} in {store.url}: {cause}; nothing was written (the run "
                f"does not exist): {remedy}, then start it again")
    # a value the object store could not take: the database is not the one to name
    where = "" if cause.startswith("object store ") else f" to {store.url}"
    return (f"could not write run {ctx.run_id}{where}: {cause}. It is interrupted with "
            f"the steps committed before; {remedy}, then `rewind resume {ctx.run_id}`")


class _StoreFailures(logging.Filter):
    """Burr logs a banner and a traceback for an exception raised inside a step; one the
    database raised (a node's tool-cache write on a full disk) is Rewind's to report, once."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None:
            return True
        module = type(error).__module__ or ""
        driver = module.startswith(("sqlite3", "psycopg2")) and _raised_in_store(error)
        return not (isinstance(error, StoreError) or driver)


logging.getLogger("burr.core.application").addFilter(_StoreFailures())


def finish_fields(ctx: ExecutionContext, status: str, error: Optional[str], started: float) -> dict:
    own = [s for s in ctx.steps if s.status != StepStatus.INHERITED]
    return dict(
        status=str(status), error=error, finished_at=time.time(),
        total_tokens=sum(s.tokens for s in own), tokens_saved=sum(s.tokens_saved for s in own),
        latency_ms=(time.perf_counter() - started) * 1000, step_count=len(ctx.steps),
        **({"turns_json": encode_turns(ctx.turns)} if ctx.turns_moved else {}),
    )


def base_builder(ctx: ExecutionContext, run_id: str) -> ApplicationBuilder:
    return (
        ApplicationBuilder()
        .with_graph(ctx.pipeline.wrapped_graph())
        .with_hooks(*burr_hooks(ctx))
        .with_identifiers(app_id=run_id, partition_key=PARTITION_KEY)
        .with_state_persister(ThreadRoutedPersister(ctx.store))
    )


def new_run_id() -> str:
    return os.urandom(8).hex()  # 16 hex digits, as uuid4().hex[:16] gave


def summarize_state(state: dict) -> str:
    for v in state.values():
        if isinstance(v, str) and v.strip():
            return v.strip()[:200].replace("\x00", "\ufffd")
    try:
        return json.dumps(state, default=str)[:200]
    except Exception:
        return ""


def save_start_state(ctx: ExecutionContext, app_id: str, sequence_id: int, next_node: str,
                     state: dict) -> None:
    """Queue the state before `next_node` ran, as Burr's "failed" status, so that Burr's fork
    resumes *at* that node (a completed row resumes at the node after it)."""
    store = ctx.store
    store.attach_context(app_id, ctx)
    try:
        store.persister().save(PARTITION_KEY, app_id, sequence_id, next_node, State(state), "failed")
    finally:
        store.detach_context(app_id)


def check_state(state: dict) -> None:
    bad = [k for k in state if not isinstance(k, str)]
    if bad:
        raise InvalidRequest(f"state keys must be strings; got {bad[:3]!r}")
    for k in state:
        if "\x00" in k or any(0xD800 <= ord(c) <= 0xDFFF for c in k):
            raise InvalidRequest(
                f"state key {k!r} contains a NUL or a lone surrogate; keys must be valid "
                "Unicode text", field=k,
            )


def start_run(store: Any, heartbeat: Heartbeat, pipeline: Any, state: dict, *,
              inputs: Optional[dict] = None, halt_before: Optional[list] = None,
              halt_after: Optional[list] = None, use_cache: bool = True,
              on_step: Optional[Callable] = None, owner: Optional[str] = None) -> Run:
    """Record a first run of `pipeline` from its entrypoint on `state`."""
    check_state(state)
    if inputs is not None and not isinstance(inputs, dict):
        raise InvalidRequest(f"inputs must be a dict of runtime inputs, not {type(inputs).__name__}",
                             field="inputs")
    halts = Halts.of(pipeline.graph, halt_before, halt_after)
    run_id = new_run_id()
    ctx = ExecutionContext(store, run_id, pipeline, use_cache=use_cache, on_step=on_step,
                           inputs=inputs, owner=owner)
    ctx.absorb(state)  # raises UnhashableValue naming the field, before anything is written
    for k, v in (inputs or {}).items():
        param_hash(v, f"inputs.{k}")  # an input that can never be keyed is refused now
    started = time.perf_counter()
    builder = base_builder(ctx, run_id).with_state(**state).with_entrypoint(pipeline.entrypoint)
    row = {
        "id": run_id, "pipeline": pipeline.name, "status": str(RunStatus.RUNNING),
        "graph_id": pipeline.graph_id, "entrypoint": pipeline.entrypoint,
        "created_at": time.time(), "summary": summarize_state(state),
        "use_cache": int(bool(use_cache)), "start_seq": -1, "fork_index": 0, "owner": owner,
        "turns_json": encode_turns([Turn(0, halts)]), **owner_fields(),
    }
    save_start_state(ctx, run_id, -1, pipeline.entrypoint, state)
    try:
        ctx.commit(lambda s: s.insert_run(row))
    except CommitError as e:  # its first commit: nothing of the run exists
        raise CommitError(failure_message(ctx, e, written=False)) from e
    ctx.run_row = row
    return execute(ctx, builder, heartbeat, started, halts)
