"""Stepping a run one visit at a time: a visit served from the cache (or dry-run) is stepped
here, without a Burr application; a visit that must execute is stepped by Burr.

Every visit is decided first (`ReplayAction.decide`: keyed, then served or not). A served visit
gets exactly what `Application.step` would do with it: the state handed to the action has its
sequence id advanced, the state after it is Burr's `_state_update` of what the wrapper returns
plus the prior step (`burr_compat.numbered` / `after_served`, pinned by tests against Burr), and
the same lifecycle hooks are called with the same arguments: the step recorder, the persister
hook that writes Burr's row (so Burr's own fork and resume work from any step), and Burr's own
tracer-context hook (`burr_compat.hook_set`). A
visit that must execute is handed to Burr with its decision made (`ctx.decided`), so it is
keyed once. The Burr application is built the first time a visit must execute: a fork served
entirely from the cache never builds one.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from burr.lifecycle.base import ExecuteMethod

from ..store import PARTITION_KEY
from . import burr_compat
from .context import ExecutionContext
from .recorder import StepRecorder

logger = logging.getLogger("rewind")


def burr_hooks(ctx: ExecutionContext) -> list:
    """The lifecycle hooks every application of an execution is built with (Burr adds its
    persister's after them)."""
    return [StepRecorder(ctx)]


def burr_inputs(action: Any, inputs: dict) -> Optional[dict]:
    """The inputs Burr's `_process_inputs` hands `action` (less the `__context`/`__tracer` it
    injects, which keys never include), or None where Burr must see them: a reserved `__` name
    or a missing required input, which Burr refuses with its own error."""
    if any(k.startswith("__") for k in inputs):
        return None
    given = burr_compat.declared_inputs(action, inputs)
    required, _ = action.optional_and_required_inputs
    if any(k not in given and not k.startswith("__") for k in required):
        return None
    return given


class Stepper:
    """Steps one execution: served visits here, the others through a Burr application that
    is given (a first run, a resume) or built by `build(state, start)` when first needed."""

    def __init__(self, ctx: ExecutionContext, *, app: Any = None, state: Any = None,
                 start: Optional[str] = None, build: Optional[Callable[[Any, str], Any]] = None,
                 persister: Any = None):
        self.ctx = ctx
        self.app = app
        self._graph = ctx.pipeline.wrapped_graph()
        self._state, self._start, self._build = state, start, build
        self._persister = persister
        self._hooks: Any = None
        self._table: tuple = ()  # the hooks() set's adapters by hook, in `_fire`'s order
        self._own: Optional[tuple] = None  # (recorder, persister hook) of a set of only ours

    @property
    def state(self) -> Any:
        return self.app.state if self.app is not None else self._state

    def next_action(self) -> Any:
        if self.app is not None:
            return self.app.get_next_action()
        return burr_compat.next_action(self._graph, self._state, self._start)

    def action_to_run(self, chosen: Any) -> Any:
        """The action Burr's `step` runs after `chosen` was picked for the halt checks: it
        advances the sequence id, then picks again (`_increment_sequence_id`, then `_step`'s
        `get_next_action`), so a transition on `__SEQUENCE_ID` may pick another (or none)."""
        if not burr_compat.reads_sequence_id(self._graph):
            return chosen
        if self.app is not None:
            return self.app.graph.get_next_node(
                self.app.state.get(burr_compat.PRIOR_STEP), burr_compat.numbered(self.app.state),
                self.app.entrypoint)
        return burr_compat.next_action(self._graph, burr_compat.numbered(self._state), self._start)

    def burr_app(self) -> Any:
        if self.app is None:
            self.app = self._build(self._state, self._start)
            self._hooks = None
        return self.app

    def step(self, action: Any, inputs: dict) -> None:
        """One visit of `action` (the next action) with the runtime inputs Burr would be given."""
        ctx = self.ctx
        ctx.decided = None
        given = burr_inputs(action, inputs) if hasattr(action, "decide") else None
        if given is not None:
            current = self._state if self.app is None else self.app.state
            state = burr_compat.numbered(current)
            try:
                visit = action.decide(ctx, state, given)
            except Exception as e:  # as in Burr's step: the hooks hear of it, then it raises
                self._put(state)
                self._fire(action, current, state, given, state, None, e)
                raise
            if visit.outputs is not None:
                after = burr_compat.after_served(visit.state, visit.outputs,
                                                 visit.record.writes(action),
                                                 visit.record.deleted, action)
                if after is not None:
                    self._put(after)
                    self._fire(action, current, state, given, after, dict(visit.outputs), None)
                    return
            ctx.decided = visit  # Burr's step runs it (or raises as Burr does)
        if given is None or visit.outputs is None:  # a node is about to run
            ctx.settle_before_running()
        self.burr_app().step(inputs=inputs)

    # --- a step taken here --------------------------------------------------------------------
    def _put(self, state: Any) -> None:
        if self.app is not None:
            burr_compat.set_state(self.app, state)
        else:
            self._state = state

    def hooks(self) -> Any:
        """The lifecycle hooks Burr's application calls, in its order: the ones the builder is
        given (`runner.burr_hooks`), then the persister's."""
        if self._hooks is None:
            if self.app is not None:
                self._hooks = burr_compat.adapter_set(self.app)
            else:
                # Burr's persister hook over this thread's persister, which the routed one
                # the application is built with hands every save to (steps run on this thread)
                here = self.ctx.store.persister() if self._persister is not None else None
                self._hooks = burr_compat.hook_set(burr_hooks(self.ctx), here)
            table = burr_compat.sync_hooks(self._hooks)  # {hook name: adapters}, as Burr calls them
            self._table = tuple(table.get(name, ()) for name in (
                "pre_run_execute_call", "pre_run_step", "post_run_step", "post_run_execute_call"))
            self._own = burr_compat.own_hooks(self._hooks, StepRecorder)
        return self._hooks

    def _fire(self, action: Any, current: Any, before: Any, inputs: dict, after: Any,
              result: Optional[dict], exception: Optional[Exception]) -> None:
        """The hooks of one step, as `Application.step` calls them: `current` is the state
        before the step, `before` the one the action is handed (its sequence id advanced)."""
        adapters = self.hooks()
        app_id, step = self.ctx.run_id, ExecuteMethod.step
        sequence_id = burr_compat.state_values(before)[burr_compat.SEQUENCE_ID]
        if self._own is not None:  # only Rewind's own hooks: the two that record the step
            for hook in self._own:
                hook.post_run_step(action=action, state=after, result=result,
                                   sequence_id=sequence_id, exception=exception, app_id=app_id,
                                   partition_key=PARTITION_KEY)
            return
        pre_call, pre_step, post_step, post_call = self._table
        inputs = burr_compat.injected_inputs(self.app, action, inputs, sequence_id, app_id,
                                             PARTITION_KEY, self._persister, adapters)
        for hook in pre_call:
            hook.pre_run_execute_call(state=current, method=step, app_id=app_id,
                                      partition_key=PARTITION_KEY)
        for hook in pre_step:
            hook.pre_run_step(action=action, state=before, inputs=inputs, sequence_id=sequence_id,
                              app_id=app_id, partition_key=PARTITION_KEY)
        try:
            for hook in post_step:
                hook.post_run_step(action=action, state=after, result=result,
                                   sequence_id=sequence_id, exception=exception, app_id=app_id,
                                   partition_key=PARTITION_KEY)
        finally:  # Burr passes no exception to this one (its wrapper never sets it)
            for hook in post_call:
                hook.post_run_execute_call(state=after, method=step, exception=None,
                                           app_id=app_id, partition_key=PARTITION_KEY)
