"""The cache key of a node visit, in one place: what a node's output may depend on, hashed.

A key covers the node's code fingerprint, the fields it may read (declared reads, and the prior
values of its declared writes, since Burr's `append`/`increment`/`extend` build on them), its
effective params (defaults, then `.bind()`, then a fork's overrides) and its Burr runtime
inputs. Per-field hashes are kept beside the combined hash so every miss can be explained.
The replay wrapper, the audit and the noise band all key through `NodeSpec`; nothing else
computes an input or output hash.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from ..errors import UnhashableValue
from ..keys import (
    Policy, canonical_hash, canonical_parts, code_fingerprint, combine, describe_fingerprint,
    is_internal_key, join_parts, node_params, param_hash, params_json, policy_of, sha256_hex,
    strip_ignored, type_name,
)
from ..keys import user_objects
from ..store.serde import blob_ref, encode
from .burr_compat import state_values

# values whose canonical JSON already tells their form apart from every twin's: no `form:` part
_ONE_FORM = (str, int, bool, type(None))


def value_form(value: Any, path: str, hashed: str, ref: Optional[str] = None) -> Optional[str]:
    """The `form:` key part of a value whose canonical hash is `hashed`: the address of its
    type-preserving encoding (`ref`, when the value is stored under it), which tells apart what
    canonical JSON spells alike (1 and 1.0, a list and a tuple, another key order,
    Decimal('1.0') and Decimal('1.00')). None when that encoding is its canonical JSON (plain
    data in canonical order: the hash says it all, and keys made before forms stay put), for
    a value with one form (str, int, bool, None) and for one that cannot be stored (a client
    object, keyed by `param_hash` alone)."""
    if type(value) in _ONE_FORM:
        return None
    if ref is None:
        try:
            ref = blob_ref(encode(value, path))
        except Exception:
            return None
    return None if ref == hashed else ref


def code_of(inner: Any) -> Any:
    """What a node's code fingerprint is taken of: its function, or a class-based action's class."""
    fn = getattr(inner, "_originating_fn", None) or getattr(inner, "fn", None)
    return fn if fn is not None else type(inner)


_SCALARS = frozenset({str, int, float, bool, type(None), bytes})


def class_hashes(value: Any, field: str, memo: Optional[dict] = None) -> dict:
    """{`class:<module.qualname>`: code fingerprint} of the user's classes inside a state value
    (a dataclass, a pydantic model): its canonical spelling says only its fields, but a method
    the node calls on it is code the node runs. `memo` keeps, per field, the value last walked
    and its classes, so a value is walked once however many steps read it."""
    got = memo.get(field) if memo is not None else None
    if got is not None and got[0] is value:
        found = got[1]
    else:
        found = sorted({type(o) for _, o in user_objects(value, limit=1 << 62, deep=True)}, key=type_name)
        if memo is not None:
            memo[field] = (value, found)
    return {f"class:{type_name(t)}": code_fingerprint(t) for t in found}


_INPUT_HASHES: dict = {}  # (node, field hash items) -> input hash
_INPUT_HASHES_MAX = 100_000


@dataclasses.dataclass
class NodeSpec:
    """What is fixed about a node for one execution: policy, params, runner and their hashes."""

    node: str
    inner: Any
    policy: Policy
    params: dict
    runner: Any
    code: str
    param_hashes: dict
    params_json: str
    params_doc: dict
    units: dict = dataclasses.field(default_factory=dict)  # code unit -> hash, for reasons

    @property
    def reads(self) -> list:
        return list(self.inner.reads)

    @property
    def writes(self) -> list:
        return list(self.inner.writes)

    def refresh_code(self) -> "NodeSpec":
        """The same spec with the code fingerprint re-read (a constant may have been rebound)."""
        fn = code_of(self.inner)
        code = code_fingerprint(fn, self.policy.version)
        if code == self.code:
            return self
        return dataclasses.replace(self, code=code, units=describe_fingerprint(fn, self.policy.version))

    # --- the key ------------------------------------------------------------------------------
    def readable(self, state: Any) -> dict:
        """The values this node may read from `state`: declared reads, then the prior values
        of declared writes (Burr's append/increment build on them)."""
        values = state_values(state)
        out = {k: values[k] for k in self.inner.reads if k in values}
        for k in self.inner.writes:
            if k not in out and k in values:
                out[k] = values[k]
        return out

    def field_hashes(self, readable: dict, known: Optional[dict] = None,
                     run_kwargs: Optional[dict] = None, classes: Optional[dict] = None,
                     refs: Optional[dict] = None) -> dict:
        """Per-field hashes of a visit: `code`, `read:<field>` (reads), `prior:<field>` (writes
        the node does not declare as reads), `class:<type>` (the code of a user class a value
        holds), `param:<name>`, `input:<name>` (runtime inputs), and `form:<name>` beside a
        field, param or input whose value has twins (`value_form`). `known` maps fields to
        hashes already computed for exactly these values; `classes` remembers, per field,
        which user classes its live value holds; `refs` are the fields' stored addresses."""
        ignore = self.policy.ignore
        reads = set(self.inner.reads)
        out = {"code": self.code}
        for k, v in readable.items():
            if type(v) not in _SCALARS:
                out.update(class_hashes(v, k, classes))
            if ignore and k in ignore:
                continue
            h = None if ignore or known is None else known.get(k)
            stripped = ignore and any(n.startswith(k + ".") for n in ignore)
            if h is None:
                if stripped:
                    v = strip_ignored(v, [n.split(".", 1)[1] if n.startswith(k + ".") else n
                                          for n in ignore])
                h = canonical_hash(v, k)
            out[("read:" if k in reads else "prior:") + k] = h
            form = None if stripped else value_form(v, k, h, refs.get(k) if refs else None)
            if form is not None:
                out["form:" + k] = form
        out.update(self.param_hashes)
        for k, v in (run_kwargs or {}).items():
            if not is_internal_key(k):  # Burr-injected (__context, __tracer): never hashed
                add_keyed(out, "input", k, v, f"{self.node}.{k}")
        return out

    def input_hash(self, field_hashes: dict) -> str:
        # a pure function of strings, remembered: a replay keys the visits its parent keyed
        key = (self.node, tuple(field_hashes.items()))
        got = _INPUT_HASHES.get(key)
        if got is None:
            got = combine({"node": self.node, "fields": field_hashes})
            if len(_INPUT_HASHES) >= _INPUT_HASHES_MAX:
                _INPUT_HASHES.clear()
            _INPUT_HASHES[key] = got
        return got

    # --- outputs ------------------------------------------------------------------------------
    def output_parts(self, outputs: dict) -> dict:
        """Canonical JSON of each written field (raises UnhashableValue naming the field)."""
        return canonical_parts(outputs, self.node)

    def output_hash(self, outputs: dict, parts: Optional[dict] = None, deleted: Any = ()) -> str:
        """The hash of what the step wrote (and, when it removed fields, which)."""
        ignore = self.policy.ignore
        if ignore:
            stripped = {k: v for k, v in outputs.items() if k not in ignore}
            h = canonical_hash(strip_ignored(stripped, ignore))
        else:
            h = sha256_hex(join_parts(parts if parts is not None else self.output_parts(outputs)))
        return combine({"written": h, "deleted": sorted(deleted)}) if deleted else h

    def output_field_hashes(self, outputs: dict) -> dict:
        """Per-field output hashes consistent with `output_hash`: a field varies here iff the
        output hash varies."""
        ignore = self.policy.ignore
        values = dict(outputs)
        if ignore:
            values = strip_ignored({k: v for k, v in values.items() if k not in ignore}, ignore)
        return {k: canonical_hash(v, k) for k, v in values.items() if not is_internal_key(k)}


def node_spec(node: str, inner: Any, overrides: Optional[dict] = None,
              defaults: Optional[dict] = None) -> NodeSpec:
    """The spec of `inner` with a fork's param `overrides` applied (`defaults`: the node's
    effective default params when the caller already has them)."""
    overrides = dict(overrides or {})
    policy = policy_of(inner)
    params = dict(defaults) if defaults is not None else node_params(inner)
    params.update(overrides)
    runner = with_params(inner, overrides) if overrides else inner
    doc_json = params_json(params)
    fn = code_of(inner)
    return NodeSpec(
        node=node, inner=inner, policy=policy, params=params, runner=runner,
        code=code_fingerprint(fn, policy.version), units=describe_fingerprint(fn, policy.version),
        param_hashes=param_key_parts(node, params),
        params_json=doc_json, params_doc=json.loads(doc_json),
    )


def add_keyed(out: dict, kind: str, name: str, value: Any, path: str) -> None:
    """`<kind>:<name>` (`param`, `input`) of a value, and `form:<kind>:<name>` for one with twins."""
    hashed = out[f"{kind}:{name}"] = param_hash(value, path)
    form = value_form(value, path, hashed)
    if form is not None:
        out[f"form:{kind}:{name}"] = form


def param_key_parts(node: str, params: dict) -> dict:
    """The key parts of a node's params (`add_keyed`)."""
    out: dict = {}
    for k, v in params.items():
        add_keyed(out, "param", k, v, f"{node}.{k}")
    return out


def with_params(inner: Any, overrides: dict) -> Any:
    """`inner` with params overridden: `.with_params` for function actions; a copy with the
    attributes set for class-based actions (their params are `__init__` keywords kept as
    attributes of the same name)."""
    if hasattr(inner, "with_params") and getattr(inner, "_originating_fn", None) is not None:
        return inner.with_params(**overrides)
    import copy

    runner = copy.copy(inner)
    for k, v in overrides.items():
        setattr(runner, k, v)
    return runner


def recorded_overrides(inner: Any, params: dict) -> dict:
    """The recorded params of a step that differ (canonically) from the node's defaults: what
    must be re-applied to execute it again as it ran."""
    defaults = node_params(inner)
    out = {}
    for k, v in (params or {}).items():
        if k in defaults:
            try:
                if param_hash(defaults[k], k) == param_hash(v, k):
                    continue
            except UnhashableValue:
                pass
        out[k] = v
    return out
