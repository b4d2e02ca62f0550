"""A node's replay policy and its params: what the `rewind.action` decorator records, and what
a node's key reads of them.

`Policy` (determinism, ttl, ignore, version) says whether and how long a node's output is
served; `node_params` / `param_names` say which keyword parameters a fork may set and their
effective defaults (signature defaults, then `.bind()`); a class-based action's params are its
`__init__` keywords read back from its attributes. Nothing here hashes: `keys.node` does.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import time
from typing import Any, Optional

from burr.core.action import Action

from ..errors import InvalidRequest
from .canonical import to_canonical

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


def policy_of(burr_action: Any) -> Policy:
    """The policy of an action; plain Burr actions are deterministic."""
    return getattr(burr_action, "policy", DEFAULT_POLICY)


def node_params(burr_action: Any) -> dict:
    """The effective default params of an action: signature defaults, then `.bind()` values."""
    fn = getattr(burr_action, "_originating_fn", None) or getattr(burr_action, "fn", None)
    params: dict = {}
    if fn is None and isinstance(burr_action, Action):
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


def class_params(action: Any) -> dict:
    """A class-based action's forkable params: keyword parameters of its `__init__` with
    defaults, read back from the attribute of the same name (the usual Burr pattern)."""
    try:
        sig = inspect.signature(type(action).__init__)
    except (TypeError, ValueError):
        return {}
    out = {}
    for name, p in sig.parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if hasattr(action, name) and not callable(getattr(action, name)):
            out[name] = getattr(action, name)
    return out


def params_json(params: dict) -> str:
    """The params as canonical JSON for display; values with no JSON spelling as their repr."""
    try:
        return json.dumps(to_canonical(params), sort_keys=True)
    except Exception:
        return json.dumps({k: _display(v) for k, v in params.items()}, sort_keys=True)


def _display(value: Any) -> Any:
    try:
        return to_canonical(value)
    except Exception:
        return repr(value)


def is_expired(policy: Policy, entry: dict, now: Optional[float] = None) -> bool:
    return policy.determinism == TIME_BOUND and (
        (now if now is not None else time.time()) - entry["cached_at"] >= policy.ttl
    )


def keeps_first_output(policy: Policy, expired: bool) -> bool:
    """A deterministic entry keeps its first output; a time-bound one refreshes."""
    return policy.determinism == DETERMINISTIC and not expired
