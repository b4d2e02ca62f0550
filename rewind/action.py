"""`rewind.action` and `rewind.tool`: Burr's `@action` plus a replay policy.

The policy (determinism, ttl, ignore, version) lives on `PolicyAction`, a subclass of Burr's
`FunctionBasedAction` whose `with_params` returns the subclass again, so `.bind()` keeps it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import time
import types
from typing import Any, Callable, Iterable, Optional, Sequence

from burr.core.action import Action, FunctionBasedAction, bind

from .errors import InvalidRequest
from . import metering

DETERMINISTIC = "deterministic"
TIME_BOUND = "time-bound"
SIDE_EFFECT = "side-effect"
DETERMINISM_LEVELS = (DETERMINISTIC, TIME_BOUND, SIDE_EFFECT)


@dataclasses.dataclass(frozen=True)
class Policy:
    determinism: str = DETERMINISTIC
    ttl: Optional[float] = None
    ignore: tuple = ()
    version: Optional[str] = None

    def __post_init__(self):
        if self.determinism not in DETERMINISM_LEVELS:
            raise InvalidRequest(
                f"determinism={self.determinism!r} is not one of {', '.join(DETERMINISM_LEVELS)}"
            )
        if self.determinism == TIME_BOUND and (self.ttl is None or self.ttl <= 0):
            raise InvalidRequest("a time-bound action needs ttl= (seconds, > 0)")
        if self.ttl is not None and self.determinism != TIME_BOUND:
            raise InvalidRequest(f"ttl= only applies to time-bound actions, not {self.determinism}")

    @property
    def cacheable(self) -> bool:
        return self.determinism != SIDE_EFFECT


DEFAULT_POLICY = Policy()


class PolicyAction(FunctionBasedAction):
    """A function-based Burr action that carries a Rewind policy through `.bind()`."""

    def __init__(self, *args, policy: Policy = DEFAULT_POLICY, **kwargs):
        super().__init__(*args, **kwargs)
        self.policy = policy

    def with_params(self, **kwargs: Any) -> "PolicyAction":
        return PolicyAction(
            self._fn,
            self._reads,
            self._writes,
            {**self._bound_params, **kwargs},
            input_spec=self._inputs,
            originating_fn=self._originating_fn,
            schema=self._schema,
            tags=self._tags,
            policy=self.policy,
        )

    @property
    def bound_params(self) -> dict:
        return dict(self._bound_params)

    @property
    def originating_fn(self) -> Callable:
        return self._originating_fn


def action(
    reads: Sequence[str],
    writes: Sequence[str],
    determinism: str = DETERMINISTIC,
    ttl: Optional[float] = None,
    ignore: Iterable[str] = (),
    version: Optional[str] = None,
    tags: Optional[list] = None,
) -> Callable:
    """Decorate a function as a Burr action with a replay policy.

    Keyword parameters with defaults (model, temperature, prompt, ...) are the node's params: a
    fork may override them, and they are part of the input hash.
    """
    policy = Policy(determinism, ttl, tuple(ignore), None if version is None else str(version))

    def decorate(fn: Callable) -> Callable:
        setattr(
            fn,
            FunctionBasedAction.ACTION_FUNCTION,
            PolicyAction(fn, list(reads), list(writes), tags=tags, policy=policy),
        )
        setattr(fn, "bind", types.MethodType(bind, fn))
        return fn

    return decorate


def _as_policy_action(fn: Callable, policy: Policy) -> Callable:
    """Re-make the Burr action a decorator attached to `fn` as a `PolicyAction`."""
    inner = getattr(fn, FunctionBasedAction.ACTION_FUNCTION)
    setattr(fn, FunctionBasedAction.ACTION_FUNCTION, PolicyAction(
        inner._fn, inner._reads, inner._writes, inner._bound_params, input_spec=inner._inputs,
        originating_fn=inner._originating_fn, schema=inner._schema, tags=inner._tags,
        policy=policy,
    ))
    return fn


def _pydantic(reads: Sequence[str], writes: Sequence[str], state_input_type: Any = None,
              state_output_type: Any = None, tags: Optional[list] = None,
              determinism: str = DETERMINISTIC, ttl: Optional[float] = None,
              ignore: Iterable[str] = (), version: Optional[str] = None) -> Callable:
    """`rewind.action.pydantic`: Burr's `action.pydantic` (typed state in and out) with a
    replay policy."""
    from burr.integrations.pydantic import pydantic_action

    policy = Policy(determinism, ttl, tuple(ignore), None if version is None else str(version))
    burr_decorate = pydantic_action(reads=list(reads), writes=list(writes),
                                    state_input_type=state_input_type,
                                    state_output_type=state_output_type, tags=tags)
    return lambda fn: _as_policy_action(burr_decorate(fn), policy)


action.pydantic = _pydantic


def runtime_input_names(burr_action: Any) -> set:
    """The runtime inputs a class-based action declares (`inputs`), without Burr's injected
    `__context`/`__tracer`: a fork's param change naming one replaces that input. (A function
    action's keyword parameters are params, bound with `.bind()`, not inputs.)"""
    if (getattr(burr_action, "_originating_fn", None) or getattr(burr_action, "fn", None)) is not None:
        return set()
    try:
        required, optional = burr_action.optional_and_required_inputs
    except Exception:
        return set()
    return {n for n in set(required) | set(optional) if not str(n).startswith("__")}


def policy_of(burr_action: Any) -> Policy:
    """The policy of an action; plain Burr actions are deterministic."""
    return getattr(burr_action, "policy", DEFAULT_POLICY)


def node_params(burr_action: Any) -> dict:
    """The effective default params of an action: signature defaults, then `.bind()` values."""
    fn = getattr(burr_action, "_originating_fn", None) or getattr(burr_action, "fn", None)
    params: dict = {}
    if fn is None and isinstance(burr_action, Action):
        from .engine.keys import class_params

        params.update(class_params(burr_action))
    if fn is not None:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            for name, p in sig.parameters.items():
                if name == "state" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    continue
                if p.default is not inspect.Parameter.empty:
                    params[name] = p.default
    params.update(getattr(burr_action, "_bound_params", {}) or {})
    return params


def param_names(burr_action: Any) -> set:
    """Every keyword parameter a fork may set on this action: its function's parameters, or a
    class-based action's `__init__` keywords, and the runtime inputs it declares."""
    fn = getattr(burr_action, "_originating_fn", None) or getattr(burr_action, "fn", None)
    if fn is None:
        from .engine.keys import class_params

        return set(class_params(burr_action)) | runtime_input_names(burr_action)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return set()
    return {
        n
        for n, p in sig.parameters.items()
        if n != "state" and not n.startswith("__") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def _tool_record(name: str, started: float, cached: bool, error: Optional[str], args: tuple,
                 kwargs: dict, result: Any) -> dict:
    """A tool call as the step keeps it (values in their JSON spelling, or their repr)."""
    from .engine.keys import params_json

    return {"name": name, "started_at": started, "latency_ms": (time.time() - started) * 1000,
            "cached": cached, "error": error,
            "args": json.loads(params_json({"args": list(args), "kwargs": dict(kwargs)})),
            "result": None if error else json.loads(params_json({"value": result}))["value"]}


def tool(name: Optional[str] = None, ttl: Optional[float] = None) -> Callable:
    """Cache a tool call made inside a node, keyed by (tool, hash of its arguments).

    Inside a running step the result is served from the store's tool cache while younger than
    `ttl` seconds (forever when ttl is None); outside a step, or in an audit, the tool just runs.
    """

    def decorate(fn: Callable) -> Callable:
        tool_name = name or f"{fn.__module__}.{fn.__qualname__}"

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            meter = metering.current_meter()
            store = meter.tool_store if meter is not None else None
            if meter is None:
                return fn(*args, **kwargs)
            started, cached, error, result = time.time(), False, None, None
            try:
                if store is None:  # an audit: the tool really runs
                    result = fn(*args, **kwargs)
                    return result
                from .hashing import canonical_hash

                args_hash = canonical_hash({"args": list(args), "kwargs": kwargs})
                hit = store.tool_cache_get(tool_name, args_hash, ttl, time.time())
                if hit is not None:
                    meter.tool_hits += 1
                    cached, result = True, hit[0]
                    return result
                result = fn(*args, **kwargs)
                store.tool_cache_put(tool_name, args_hash, result, time.time())
                return result
            except BaseException as e:
                error = f"{type(e).__name__}: {e}"
                raise
            finally:
                meter.tools.append(_tool_record(tool_name, started, cached, error, args, kwargs, result))

        wrapper.tool_name = tool_name
        wrapper.ttl = ttl
        return wrapper

    return decorate
