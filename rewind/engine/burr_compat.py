"""Every use of Burr internals, in one place, each pinned by tests/test_burr_compat.py.

Burr (0.43) has no public API for these; a Burr upgrade that changes one fails those tests
loudly instead of silently changing what Rewind records.
"""

from __future__ import annotations

from typing import Any, Optional

from burr.core import State
from burr.core import application as _app
from burr.core.application import PRIOR_STEP, SEQUENCE_ID  # noqa: F401  (re-exported)
from burr.core.persistence import PersisterHook
from burr.core.action import DEFAULT_SCHEMA as _DEFAULT_SCHEMA
from burr.core.typing import DictBasedTypingSystem
from burr.lifecycle.internal import LifecycleAdapterSet


def state_values(state: Any) -> dict:
    """The dict a Burr `State` holds, for reading only (never mutate it). `State.get_all()`
    copies it key by key through the Mapping protocol, and `state[k]`/`k in state` cost a
    Python call each: per-step work that reads two fields should not walk the whole state."""
    values = getattr(state, "_state", None)  # noqa: SLF001 (Burr has no read-only view)
    return values if type(values) is dict else dict(state)


# --- stepping without Burr: what `Application.step` does to the state, step by step -----------

def resumed(loaded: dict, override: Optional[dict], entrypoint: str) -> tuple:
    """(state, start, sequence_id) of the application `ApplicationBuilder().initialize_from(
    persister, resume_at_next_action=True, default_entrypoint=entrypoint,
    override_state_values=override, fork_from_...)` builds from what the persister `loaded`."""
    # Burr's `update`/`wipe` each copy the dict (and deep-copy the fields they overwrite,
    # which they then drop): one copy, changed in the same order, is the same state for the
    # decoded values a persister loads
    values = dict(state_values(loaded["state"]))
    if override:
        values.update(override)
    start = entrypoint
    if loaded["status"] == "completed":  # Burr goes on at the node after the saved position
        values[PRIOR_STEP] = loaded["position"]
    else:  # a failed (or start) state: Burr starts at its position
        start = loaded["position"]
        values.pop(PRIOR_STEP, None)
    sequence_id = loaded["sequence_id"]
    if sequence_id is not None:
        values[SEQUENCE_ID] = sequence_id
    return State(values, DictBasedTypingSystem()), start, sequence_id


def next_action(graph: Any, state: Any, entrypoint: str) -> Any:
    """The action `Application.get_next_action` would run next on `state`."""
    prior = state_values(state).get(PRIOR_STEP)
    if prior is not None:
        got = _of_graph(_UNCONDITIONAL, graph, _unconditional_next).get(prior)
        if got is not None:
            return got
    return graph.get_next_node(prior, state, entrypoint)


# id(graph) -> (graph, {action: the action after it when its first transition is Burr's
# `default`}): Burr tries an action's transitions in order and takes the first whose condition
# holds, and `default` holds on every state (it reads no key); its `run` builds a set of every
# state key. (A pipeline builds its graph once; a weak key costs a weakref on every lookup.)
_UNCONDITIONAL: dict = {}


def _unconditional_next(graph: Any) -> dict:
    from burr.core.action import Condition

    out = {}
    for name, possibilities in graph._adjacency_map.items():  # noqa: SLF001
        if possibilities and possibilities[0][1] is Condition.default:
            out[name] = graph._action_map[possibilities[0][0]]  # noqa: SLF001
    return out


def _of_graph(memo: dict, graph: Any, compute: Any) -> Any:
    """`compute(graph)`, remembered in `memo` by id(graph) (checked against the graph itself,
    as an id may be reused once a graph is gone), at most 256 graphs."""
    known = memo.get(id(graph))
    if known is None or known[0] is not graph:
        if len(memo) >= 256:
            memo.clear()
        known = memo[id(graph)] = (graph, compute(graph))
    return known[1]


_READS_SEQUENCE: dict = {}  # id(graph) -> (graph, whether a transition's condition reads it)


def _reads_sequence(graph: Any) -> bool:
    return any(SEQUENCE_ID in (getattr(t.condition, "reads", None) or ()) for t in graph.transitions)


def reads_sequence_id(graph: Any) -> bool:
    """Whether a transition of `graph` reads `__SEQUENCE_ID`: then the action a step runs can
    differ from the one the halt checks saw, as `Application.step` advances it before picking."""
    return _of_graph(_READS_SEQUENCE, graph, _reads_sequence)


def declared_inputs(action: Any, inputs: dict) -> dict:
    """What Burr's `_process_inputs` keeps of a call's `inputs` for `action`: the names it
    declares (another node's input must not reach it, nor pass for one of its params)."""
    if not inputs:
        return {}
    required, optional = action.optional_and_required_inputs
    return {k: v for k, v in inputs.items() if k in required or k in optional}


def numbered(state: Any) -> Any:
    """`state` as `Application.step` hands it to the action: its sequence id advanced."""
    values = dict(state_values(state))
    values[SEQUENCE_ID] = values[SEQUENCE_ID] + 1 if SEQUENCE_ID in values else 0
    return State(values, state.typing_system)


def after_served(state: Any, outputs: dict, writes: list, deleted: list, action: Any) -> Any:
    """The state Burr holds after a single-step action given `state` returned it with
    `outputs` written and `deleted` removed (`_run_single_step_action`'s `_state_update`, then
    the prior step); None where Burr would raise because a declared write is missing."""
    values = dict(state_values(state))
    for k, v in outputs.items():
        if k in writes:
            values[k] = v
    for k in deleted:
        values.pop(k, None)
    if any(w not in values for w in action.writes):
        return None
    values[PRIOR_STEP] = action.name
    return State(values, state.typing_system)


def hook_set(hooks: list, persister: Any) -> Any:
    """The lifecycle hooks an application built `.with_hooks(*hooks).with_state_persister(
    persister)` calls, in its order: `hooks`, Burr's `PersisterHook` over the persister
    (`ApplicationBuilder._set_sync_state_persister`), then the hook `Application.__init__`
    adds to put the tracer factory in context around each step."""
    adapters = _adapter_set([*hooks, PersisterHook(persister)])
    return _adapter_set([*adapters._adapters, _app.TracerFactoryContextHook(adapters)])  # noqa: SLF001


def own_hooks(adapters: Any, recorder_type: type) -> Optional[tuple]:
    """(recorder, persister hook) when `adapters` is exactly `hook_set([recorder], persister)`:
    the step recorder, Burr's `PersisterHook` and the tracer-context hook `Application.__init__`
    adds, and nothing else. Then a served step's hooks are only those two `post_run_step`s:
    the tracer factory the third would put in context around the step has no reader, since no
    other code runs in between. None for any other set (a user's hook, a tracker)."""
    found = adapters.adapters
    if [type(a) for a in found] != [recorder_type, PersisterHook, _app.TracerFactoryContextHook]:
        return None
    return found[0], found[1]


# adapter classes -> ({sync hook: adapter positions}, {async hook: positions}), as Burr's
# `LifecycleAdapterSet.__init__` finds them by walking each class's MRO (~20 us a set): a
# fork builds two sets of the same classes every time
_HOOK_LAYOUTS: dict = {}


def _adapter_set(adapters: list) -> Any:
    """`LifecycleAdapterSet(*adapters)`, its hook tables laid out once per adapter classes."""
    key = tuple(map(type, adapters))
    layout = _HOOK_LAYOUTS.get(key)
    if layout is None:
        built = LifecycleAdapterSet(*adapters)
        if any(type(a).__eq__ is not object.__eq__ for a in adapters):
            return built  # Burr de-duplicates adapters by equality: no layout by position
        layout = tuple({hook: [next(i for i, a in enumerate(adapters) if a is x) for x in found]
                        for hook, found in table.items()}
                       for table in (built.sync_hooks, built.async_hooks))
        _HOOK_LAYOUTS[key] = layout
        return built
    out = LifecycleAdapterSet.__new__(LifecycleAdapterSet)
    out._adapters = list(adapters)  # noqa: SLF001
    out.sync_hooks = {hook: [adapters[i] for i in at] for hook, at in layout[0].items()}
    out.async_hooks = {hook: [adapters[i] for i in at] for hook, at in layout[1].items()}
    return out


INJECTED = ("__context", "__tracer")  # the inputs Burr's `_process_inputs` injects


def injected_inputs(app: Any, action: Any, inputs: dict, sequence_id: int, app_id: str,
                    partition_key: str, persister: Any, adapters: Any) -> dict:
    """`inputs` as `Application._process_inputs` hands them to the hooks: with the
    `__context`/`__tracer` Burr injects for an action declaring them. From the built `app`'s
    own factories, or (no app built yet) as its `_context_factory`/`__tracer` factory make
    them for an application built with `persister` and no tracker or state initializer."""
    required, optional = action.optional_and_required_inputs
    names = [k for k in INJECTED if k in required or k in optional]
    if not names:
        return inputs
    if app is not None:
        return app._process_inputs(inputs, action)  # noqa: SLF001
    from burr.visibility.tracing import TracerFactory

    out = dict(inputs)
    if "__context" in names:
        out["__context"] = _app.ApplicationContext(
            app_id=app_id, tracker=None, partition_key=partition_key, sequence_id=sequence_id,
            parallel_executor_factory=_app._create_default_executor, state_initializer=None,
            state_persister=persister, action_name=action.name)
    if "__tracer" in names:
        out["__tracer"] = TracerFactory(action, sequence_id, lifecycle_adapters=adapters,
                                        app_id=app_id, partition_key=partition_key)
    return out


def adapter_set(app: Any) -> Any:
    """The lifecycle hooks a built application calls (the user's, the persister's)."""
    return app._adapter_set  # noqa: SLF001 (Burr has no public accessor)


def sync_hooks(adapters: Any) -> dict:
    """{hook name: the adapters implementing it, in order} of a `LifecycleAdapterSet`: what
    its `call_all_lifecycle_hooks_sync(name, ...)` calls."""
    return adapters.sync_hooks


def set_state(app: Any, state: Any) -> None:
    """Put `state` in a built application, as its own step does after an action."""
    app._set_state(state)  # noqa: SLF001


def set_sequence_id(app: Any, sequence_id: int) -> None:
    """Make Burr number the next step `sequence_id + 1` (resume continues after the last
    saved state, including a failed attempt's)."""
    app._set_sequence_id(int(sequence_id))  # noqa: SLF001 (Burr has no public setter)


def adjust_single_step_output(output: Any, action: Any) -> tuple:
    """(result, state) from what a single-step action returned, validated as Burr does
    (`_run_single_step_action`: its shape, then its result's type)."""
    schema = getattr(action, "schema", None)
    result, state = _app._adjust_single_step_output(output, action.name, schema)
    _app._validate_result(result, action.name, schema or _DEFAULT_SCHEMA)
    return result, state


def validate_result(result: Any, action: Any) -> None:
    """Burr's refusal of a class action's `run` result that is not a dict (`_run_function`)."""
    _app._validate_result(result, action.name)


def remap_dunder_inputs(action: Any, inputs: dict) -> dict:
    """Burr's own remapping of `__context`/`__tracer` onto a class action's mangled `run` params."""
    if "__context" in inputs or "__tracer" in inputs:
        return _app._remap_dunder_parameters(action.run, inputs, ["__context", "__tracer"])
    return inputs


def expand_halts(graph: Any, names: Optional[list]) -> set:
    """Action names a halt list means: plain names, and `@tag:x` as every action tagged x."""
    out = set()
    for item in names or []:
        item = str(item)
        if item.startswith("@tag:"):
            tag = item[len("@tag:"):]
            out.update(a.name for a in graph.actions if tag in (getattr(a, "tags", None) or []))
        else:
            out.add(item)
    return out


class _ContextCopyingExecutor:
    """An executor that runs each task in a copy of the submitting thread's contextvars, so a
    sub-application's model calls are metered into the step that spawned it."""

    def __init__(self, inner: Any):
        self._inner = inner

    def submit(self, fn, *args, **kwargs):
        import contextvars

        return self._inner.submit(contextvars.copy_context().run, fn, *args, **kwargs)

    def map(self, fn, *iterables, **kwargs):
        import contextvars

        ctx = contextvars.copy_context()
        return self._inner.map(lambda *a: ctx.copy().run(fn, *a), *iterables, **kwargs)

    def shutdown(self, *args, **kwargs):
        return self._inner.shutdown(*args, **kwargs)

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self._inner.__exit__(*exc)


def metered_context(run_kwargs: dict) -> dict:
    """`run_kwargs` with Burr's injected ApplicationContext (if any) giving out executors that
    carry the running step's meter into their worker threads (MapStates, MapActions)."""
    context = run_kwargs.get("__context")
    factory = getattr(context, "parallel_executor_factory", None)
    if context is None or factory is None:
        return run_kwargs
    import dataclasses

    wrapped = dataclasses.replace(
        context, parallel_executor_factory=lambda: _ContextCopyingExecutor(factory()))
    return {**run_kwargs, "__context": wrapped}
