"""The engine: run, fork and resume pipelines through Burr, one keyed step at a time.

    pipeline     Pipeline: a Burr graph checked and keyed once
    keys         the cache key of a visit (input/output/field hashes) and miss reasons
    node         executing one node on its guarded view, as Burr would
    replay       ReplayAction: the wrapper that dry-runs, serves from cache or executes
    context      ExecutionContext: live hashes and the write buffer of one execution
    recorder     Burr's post-run-step hook: steps into rows; rows back into Steps
    stepper      one visit at a time: served ones stepped as Burr would, the rest by Burr
    runner       driving an execution with halts and runtime inputs; starting a first run
    turns        Halts, and the calls (turns) a run was driven with, which a fork replays
    fork         forking at a node visit; the next visit of a stopped run
    resume       continuing a halted, failed or interrupted run in place
    liveness     run ownership and heartbeats
    burr_compat  every use of Burr internals
"""

from .context import CURRENT, ExecutionContext, StepRecord
from .fork import NextVisit, fork_run, next_visit
from .liveness import Heartbeat, owner_fields
from .pipeline import GLOBAL_PIPELINES, Pipeline, load_pipeline_spec, register_pipeline
from .recorder import StepRecorder, step_from_row, steps_from_rows
from .resume import resume_run
from .runner import execute, new_run_id, start_run, summarize_state
from .turns import Halts, Turn

__all__ = [
    "CURRENT", "ExecutionContext", "StepRecord", "NextVisit", "fork_run", "next_visit",
    "Heartbeat", "owner_fields", "GLOBAL_PIPELINES", "Pipeline", "load_pipeline_spec", "register_pipeline", "StepRecorder",
    "step_from_row", "steps_from_rows", "resume_run", "Halts", "Turn", "execute", "new_run_id",
    "start_run", "summarize_state",
]
