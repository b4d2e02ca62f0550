"""Every use of Burr internals, in one place, each pinned by tests/test_burr_compat.py.

Burr (0.43) has no public API for these; a Burr upgrade that changes one fails those tests
loudly instead of silently changing what Rewind records.
"""

from __future__ import annotations

from typing import Any, Optional

from burr.core import application as _app
from burr.core.application import PRIOR_STEP, SEQUENCE_ID  # noqa: F401  (re-exported)


def state_values(state: Any) -> dict:
    """The dict a Burr `State` holds, for reading only (never mutate it). `State.get_all()`
    copies it key by key through the Mapping protocol, and `state[k]`/`k in state` cost a
    Python call each: per-step work that reads two fields should not walk the whole state."""
    values = getattr(state, "_state", None)  # noqa: SLF001 (Burr has no read-only view)
    return values if type(values) is dict else dict(state)


def set_sequence_id(app: Any, sequence_id: int) -> None:
    """Make Burr number the next step `sequence_id + 1` (resume continues after the last
    saved state, including a failed attempt's)."""
    app._set_sequence_id(int(sequence_id))  # noqa: SLF001 (Burr has no public setter)


def adjust_single_step_output(output: Any, action: Any) -> tuple:
    """(result, state) from what a single-step action returned, validated as Burr does."""
    return _app._adjust_single_step_output(output, action.name, getattr(action, "schema", None))


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
