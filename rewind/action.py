"""`rewind.action` and `rewind.tool`: Burr's `@action` plus a replay policy.

The policy (determinism, ttl, ignore, version) lives on `PolicyAction`, a subclass of Burr's
`FunctionBasedAction` whose `with_params` returns the subclass again, so `.bind()` keeps it.
"""

from __future__ import annotations

import functools
import json
import time
import types
from typing import Any, Callable, Iterable, Optional, Sequence

from burr.core.action import FunctionBasedAction, bind

from .keys.policy import DEFAULT_POLICY
from .keys import (  # noqa: F401  (re-exported: the policy is part of `rewind.action`)
    DETERMINISTIC, SIDE_EFFECT, TIME_BOUND, Policy, canonical_hash, params_json,
    policy_of,
)
from .model import metering

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


def _tool_record(name: str, started: float, cached: bool, error: Optional[str], args: tuple,
                 kwargs: dict, result: Any) -> dict:
    """A tool call as the step keeps it (values in their JSON spelling, or their repr)."""
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
