"""Executing one node, exactly as Burr would, on a guarded view of the state.

Shared by the replay wrapper, the audit and the noise band: nothing else calls a node.

The node sees its declared reads and the prior values of its declared writes, by value (an
in-place change to a read must not leak into the state, since a cache hit could not replay
it). Reading any other key is an `UndeclaredRead` naming the node and the key; `"k" in state`
on such a key is False. Function actions get the view through `run_and_update`, class-based
actions through `run` then `update` (Burr hands `update` the whole state; here it gets the
same view, so the key covers everything the update can depend on). Coroutines (async actions)
run to completion on a private event loop; streaming actions are consumed to their final state.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import inspect
import queue
import threading
from typing import Any, Optional

from burr.core import State

from ..errors import RewindError, UndeclaredRead
from ..keys import canonical_json, is_internal_key
from ..model.metering import StepMeter, metering
from . import burr_compat

_IMMUTABLE = (str, int, float, bool, bytes, type(None))


class ReadGuard(State):
    """The part of the state a node may read; any other key is an `UndeclaredRead`. States
    derived from it are guards too, and carry what Burr's own update would do with the whole
    state: whether the node kept only some fields (`wipe(keep=)`, `subset`: Burr then deletes
    every other field there is) and which fields outside the view it deleted by name."""

    def __init__(self, values: dict, node: str, readable: Any, typing_system: Any = None,
                 keep: Optional[frozenset] = None, gone: frozenset = frozenset()):
        super().__init__(values, typing_system=typing_system) if typing_system is not None \
            else super().__init__(values)
        self._rw_node = node
        self._rw_readable = readable if isinstance(readable, frozenset) else frozenset(readable)
        self._rw_keep = keep  # the names every wipe(keep=) / subset so far kept, None if none
        self._rw_gone = gone

    @property
    def _rw_kept(self) -> bool:
        return self._rw_keep is not None

    def _derived(self, state: State, keep: Any = None, gone: Any = ()) -> "ReadGuard":
        if keep is not None:
            keep = frozenset(keep) if self._rw_keep is None else self._rw_keep & frozenset(keep)
        return ReadGuard(state.get_all(), self._rw_node, self._rw_readable,
                         getattr(state, "typing_system", None),
                         self._rw_keep if keep is None else keep,
                         self._rw_gone.union(gone) if gone else self._rw_gone)

    def apply_operation(self, operation: Any) -> "ReadGuard":
        return self._derived(super().apply_operation(operation))

    def wipe(self, delete: Optional[list] = None, keep: Optional[list] = None) -> "ReadGuard":
        outside = [k for k in delete or () if k not in self._state]
        return self._derived(super().wipe(delete=delete, keep=keep), keep, outside)

    def merge(self, other: State) -> "ReadGuard":
        return self._derived(super().merge(other))

    def subset(self, *keys: str, ignore_missing: bool = True) -> "ReadGuard":
        return self._derived(super().subset(*keys, ignore_missing=ignore_missing), keys)

    def kept_outside(self) -> list:
        """The names outside the view whose fields Burr keeps after the node's `wipe(keep=)` /
        `subset` (where the whole state has them): named in every one of them, and not
        deleted by name since. A hit on another state keeps the same names."""
        return sorted(k for k in self._rw_keep or () if k not in self._state
                      and k not in self._rw_gone and not is_internal_key(k))

    def __getitem__(self, key: str) -> Any:
        if key not in self._state and key not in self._rw_readable and is_internal_key(key):
            # Burr's own bookkeeping (`__SEQUENCE_ID`, `__PRIOR_STEP`): part of the key only
            # when declared, as Mapping.get would otherwise hand the node a silent None
            raise UndeclaredRead(
                f"node {self._rw_node!r} read Burr's internal state key {key!r} without "
                f"declaring it; add {key!r} to its reads (the node is then keyed on it)",
                node=self._rw_node, field=key,
            )
        if key not in self._state and key not in self._rw_readable:
            raise UndeclaredRead(
                f"node {self._rw_node!r} read state key {key!r} that it does not declare in "
                f"reads={sorted(self._rw_readable)}; add {key!r} to its reads",
                node=self._rw_node, field=key,
            )
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        return key in self._state


def guarded_view(node: str, readable: dict, reads: list, writes: list, state: Any = None) -> ReadGuard:
    """A private copy of `readable` that only lets the node read what it may."""
    typing_system = getattr(state, "typing_system", None) if state is not None else None
    return ReadGuard(copy.deepcopy(readable), node, list(reads) + list(writes), typing_system)


@dataclasses.dataclass
class NodeResult:
    """What one execution of a node produced."""

    result: dict                # what Burr sees as the action's result
    outputs: dict               # the written fields (a Result node: the fields it returns)
    deleted: list               # fields the node removed from the state
    meter: StepMeter
    # the fields it kept when it wiped with `keep=` (Burr then deletes every other field of the
    # whole state, whatever it holds: a cache hit must do the same), else None
    kept: Optional[list] = None
    # fields it set without declaring them: Burr keeps them in the state, and so does a hit
    extra: list = dataclasses.field(default_factory=list)
    # names outside the view it deleted by name (`wipe(delete=)`), present in the state or
    # not: a hit on a state that has one deletes it, as Burr's `_state_update` would
    gone: list = dataclasses.field(default_factory=list)


# One event loop per thread for async nodes, kept open: a client a node is bound to (Burr's
# chatbot examples bind one AsyncOpenAI to every node) keeps its connections on the loop it first
# ran on, so a fresh loop per node (`asyncio.run`) failed the second node with "Event loop is
# closed". Plain Burr's `arun` runs every node on the caller's one loop, too.
_LOOPS = threading.local()
_HELPER: dict = {}  # depth -> the queue of the thread that runs coroutines for a caller whose
# own loop is running
_HELPER_LOCK = threading.Lock()


def _thread_loop() -> asyncio.AbstractEventLoop:
    loop = getattr(_LOOPS, "loop", None)
    if loop is None or loop.is_closed():
        loop = _LOOPS.loop = asyncio.new_event_loop()
    return loop


def _run_coroutine(coro: Any) -> Any:
    """Run an async action's coroutine to completion from synchronous code, on this thread's
    loop (the node's context variables, its meter among them, come along)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _thread_loop().run_until_complete(coro)
    # a loop is running in this thread (a notebook, or a node of a helper's): a helper thread
    # of our own runs it, in the caller's context, on its one loop; one helper per depth of
    # nesting, so a helper never waits for itself
    job = {"coro": coro, "context": contextvars.copy_context(), "done": threading.Event()}
    depth = getattr(_LOOPS, "depth", 0)
    with _HELPER_LOCK:
        helper = _HELPER.get(depth)
        if helper is None:
            helper = _HELPER[depth] = queue.SimpleQueue()
            threading.Thread(target=_serve_coroutines, args=(helper, depth + 1), daemon=True,
                             name=f"rewind-async-nodes-{depth}").start()
    helper.put(job)
    job["done"].wait()
    if "error" in job:
        raise job["error"]
    return job["value"]


def _serve_coroutines(jobs: "queue.SimpleQueue", depth: int) -> None:
    _LOOPS.depth = depth
    while True:
        job = jobs.get()
        try:
            job["value"] = job["context"].run(_thread_loop().run_until_complete, job["coro"])
        except BaseException as e:  # re-raised in the caller's thread
            job["error"] = e
        finally:
            job["done"].set()


def _settle(value: Any) -> Any:
    return _run_coroutine(value) if inspect.isawaitable(value) else value


def call_action(runner: Any, view: State, run_kwargs: dict, state: Any = None) -> tuple:
    """(result, new_state) of running `runner` on `view` with Burr's runtime inputs. A class
    action's `update` may not add a field it does not declare (Burr's `_run_reducer` refuses
    it, with its own message); one already in the state (`state`, the whole of it) it may set."""
    if getattr(runner, "single_step", False):
        out = _settle(runner.run_and_update(view, **run_kwargs))
        return burr_compat.adjust_single_step_output(out, runner)
    kwargs = burr_compat.remap_dunder_inputs(runner, run_kwargs)
    result = _settle(runner.run(view, **kwargs))
    burr_compat.validate_result(result, runner)
    new_state = _settle(runner.update(result, view))
    if isinstance(new_state, State):
        extra = set(new_state.keys()) - set(view.keys()) - set(runner.writes)
        if state is not None:
            extra = {k for k in extra if k not in state}
        if extra:
            raise ValueError(f"Action {runner.name} attempted to write to keys {extra} "
                             f"that it did not declare. It declared: ({runner.writes})!")
    return result, new_state


def execute_node(node: str, runner: Any, readable: dict, reads: list, writes: list,
                 run_kwargs: Optional[dict] = None, state: Any = None,
                 tool_store: Any = None, meter: Optional[StepMeter] = None) -> NodeResult:
    """Run the node once on a guarded copy of `readable`; exceptions propagate (the meter,
    passed in by the caller, keeps the tokens a failed attempt spent). What it returns is read
    as Burr's `_state_update` reads it against the whole state: a field it removed is deleted,
    a field it set is kept, declared or not."""
    view = guarded_view(node, readable, reads, writes, state)
    meter = meter if meter is not None else StepMeter(node=node, tool_store=tool_store)
    with metering(meter):
        result, new_state = call_action(runner, view, burr_compat.metered_context(dict(run_kwargs or {})),
                                        state)
    if not isinstance(new_state, State):
        raise RewindError(
            f"node {node!r} returned {type(new_state).__name__} as its state; return a burr "
            "State (state.update(...)) or (result, state)", node=node,
        )
    values = new_state.get_all()
    outputs = {w: values[w] for w in writes if w in values}
    if not writes and isinstance(result, dict):
        # a node that writes nothing (Burr's Result): what it returns is what it produced
        outputs = {k: v for k, v in result.items() if not is_internal_key(k)}
    # set without being declared: a field not in the view, or a read whose value was replaced
    # or changed in place (the view holds copies: Burr's state shares the node's objects, so
    # Burr keeps such a change)
    extra = [k for k, v in values.items() if k not in writes and not is_internal_key(k)
             and (k not in readable or _replaced(v, readable[k]))]
    for k in extra:
        outputs[k] = values[k]
    kept = None
    # a state that is not the view's (a new State) is all Burr keeps, as with wipe(keep=)
    if (getattr(new_state, "_rw_kept", False) or not isinstance(new_state, ReadGuard)) \
            and state is not None:
        kept = sorted({k for k in values if not is_internal_key(k)}.union(
            new_state.kept_outside() if isinstance(new_state, ReadGuard) else ()))
        keep = set(kept)
        deleted = sorted(k for k in state.keys() if k not in keep and not is_internal_key(k))
    else:
        deleted = [k for k in readable if k not in values and not is_internal_key(k)]
        gone = sorted(k for k in getattr(new_state, "_rw_gone", ())
                      if k not in values and not is_internal_key(k))
        if gone and state is not None:
            deleted += [k for k in gone if k in state and k not in deleted]
    return NodeResult(result=result if isinstance(result, dict) else dict(outputs),
                      outputs=outputs, deleted=deleted, meter=meter, kept=kept, extra=extra,
                      gone=gone if kept is None else [])


def _replaced(value: Any, before: Any) -> bool:
    """Does a read field hold another value than before the node ran (`value` may be the
    view's copy of `before`)? Told by equality, else by canonical JSON; a value with neither
    (an object with no encoding) is taken as it was."""
    if value is before:
        return False
    if type(value) in _IMMUTABLE:
        return type(before) is not type(value) or value != before
    try:
        if value == before:
            return False
    except Exception:  # no truth value for the comparison (an array): compare encodings
        pass
    try:
        return canonical_json(value) != canonical_json(before)
    except Exception:
        return False


def apply_outputs(state: State, outputs: dict, writes: list, deleted: list = ()) -> State:
    """The full state after a step: the written fields set, the deleted ones removed."""
    written = {k: v for k, v in outputs.items() if k in writes} if writes else {}
    new_state = state.update(**written) if written else state
    return new_state.wipe(delete=list(deleted)) if deleted else new_state
