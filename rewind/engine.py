"""The engine: run, fork and resume pipelines through Burr, one cached step at a time.

Every action of a pipeline is wrapped in `ReplayAction`, a Burr `SingleStepAction` that hashes
the node's declared reads and params, serves a cache hit without calling the node, dry-runs
side effects on replay, and otherwise runs the node on `state.subset(*reads)`. A
`StepRecorder` (Burr's post-run-step hook) turns each step into a `nodes` row; Burr's own
persister (subclassed in `store`) saves each state as blob references in the same commit.
"""

from __future__ import annotations

import collections
import copy
import contextvars
import json
import logging
import os
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Optional

from burr.core import ApplicationBuilder, State
from burr.core.action import Action, SingleStepAction
from burr.core.graph import Graph, GraphBuilder, Transition
from burr.lifecycle import PostRunStepHook

from . import serde
from .action import DETERMINISTIC, SIDE_EFFECT, TIME_BOUND, node_params, param_names, policy_of
from .errors import ForkError, InvalidRequest, NotFound, RewindError, UndeclaredRead
from .hashing import (
    canonical_hash, canonical_parts, code_fingerprint, combine, is_internal_key, join_parts,
    sha256_hex, strip_ignored,
)
from .metering import StepMeter, metering
from .models import Run, Step, normalize_overrides, overrides_at
from .store import (
    HOST, PARTITION_KEY, PID, RUN_COLUMNS, SQLStore, default_reason, row_state_app, make_doc, process_started, refs_json,
)

MAX_STEPS = 10_000
logger = logging.getLogger("rewind")


class Pipeline:
    """A named Burr graph with an entrypoint: what Rewind runs, forks and replays."""

    def __init__(
        self,
        name: str,
        graph: Any,
        entrypoint: str,
        description: str = "",
        sample_state: Optional[dict] = None,
    ):
        if isinstance(graph, GraphBuilder):
            graph = graph.build()
        if not isinstance(graph, Graph):
            raise InvalidRequest(
                f"pipeline {name!r}: graph must be a burr Graph (GraphBuilder().with_actions(...)"
                f".with_transitions(...).build()), not {type(graph).__name__}"
            )
        self.name = str(name)
        self.graph = graph
        self.entrypoint = entrypoint
        self.description = description
        self.sample_state = dict(sample_state or {})
        self.actions = {a.name: a for a in graph.actions}
        if entrypoint not in self.actions:
            raise InvalidRequest(
                f"pipeline {name!r}: entrypoint {entrypoint!r} is not one of its actions "
                f"({', '.join(self.actions)})"
            )
        self.edges = [
            (t.from_.name, t.to.name, getattr(t.condition, "name", str(t.condition)))
            for t in graph.transitions
        ]
        self.graph_id = canonical_hash(
            {"pipeline": self.name, "nodes": list(self.actions), "edges": self.edges}
        )
        self._params = {n: node_params(a) for n, a in self.actions.items()}
        self._param_names: dict = {}
        self._wrapped: Optional[Graph] = None
        self._constants: dict = {}  # node -> its constants with no param overrides

    def __repr__(self) -> str:
        return f"Pipeline({self.name!r}, nodes={list(self.actions)})"

    def action(self, node: str) -> Action:
        try:
            return self.actions[node]
        except KeyError:
            raise NotFound(
                f"pipeline {self.name!r} has no node {node!r}; its nodes are "
                f"{', '.join(self.actions)}"
            ) from None

    def reads(self, node: str) -> list:
        return list(self.action(node).reads)

    def writes(self, node: str) -> list:
        return list(self.action(node).writes)

    def params(self, node: str) -> dict:
        """The node's effective default params (signature defaults, then `.bind()`)."""
        self.action(node)
        return dict(self._params[node])

    def param_names(self, node: str) -> set:
        got = self._param_names.get(node)
        if got is None:
            got = self._param_names[node] = frozenset(param_names(self.action(node)))
        return set(got)

    def policy(self, node: str):
        return policy_of(self.action(node))

    def wrapped_graph(self, ctx: "ExecutionContext" = None) -> Graph:
        """The graph with every action wrapped in `ReplayAction`; built once per pipeline (the
        wrappers find the running execution through `CURRENT`)."""
        graph = self._wrapped
        if graph is None:
            wrapped = {n: ReplayAction(a) for n, a in self.actions.items()}
            transitions = [
                Transition(from_=wrapped[t.from_.name], to=wrapped[t.to.name], condition=t.condition)
                for t in self.graph.transitions
            ]
            graph = self._wrapped = Graph(actions=list(wrapped.values()), transitions=transitions)
        return graph


def load_pipeline_spec(spec: str) -> list:
    """Import `pkg.mod:attr` and return the Pipelines it names (a Pipeline or a list of them)."""
    import importlib

    mod_name, _, attr = spec.strip().partition(":")
    if not mod_name or not attr:
        raise InvalidRequest(f"pipeline spec {spec!r} must look like package.module:attribute")
    try:
        module = importlib.import_module(mod_name)
    except ImportError as e:
        raise NotFound(f"cannot import {mod_name!r} for pipeline spec {spec!r}: {e}") from e
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise NotFound(f"{mod_name} has no attribute {attr!r} (pipeline spec {spec!r})") from None
    if callable(obj) and not isinstance(obj, Pipeline):
        obj = obj()
    items = obj if isinstance(obj, (list, tuple)) else [obj]
    for item in items:
        if not isinstance(item, Pipeline):
            raise InvalidRequest(f"{spec!r} is a {type(item).__name__}, not a rewind.Pipeline")
    return list(items)


class _ReadGuard(State):
    """The subset of state a node may read; reading any other key is an `UndeclaredRead`."""

    def __init__(self, values: dict, node: str, reads: Iterable[str], full_keys: Iterable[str]):
        super().__init__(values)
        self._rw_node = node
        self._rw_reads = set(reads)
        self._rw_full = set(full_keys)

    def __getitem__(self, key: str) -> Any:
        if key not in self._state and key not in self._rw_reads and not is_internal_key(key):
            raise UndeclaredRead(
                f"node {self._rw_node!r} read state key {key!r} that it does not declare in "
                f"reads={sorted(self._rw_reads)}; add {key!r} to its reads"
            )
        return super().__getitem__(key)


class ExecutionContext:
    """Everything one run, fork or resume needs while Burr drives it."""

    def __init__(
        self,
        store: SQLStore,
        run_id: str,
        pipeline: Pipeline,
        use_cache: bool = True,
        dry_run_side_effects: bool = False,
        allow_side_effects: bool = False,
        param_overrides: Optional[dict] = None,
        parent_steps: Optional[dict] = None,
        parent_id: Optional[str] = None,
        prior_steps: Optional[list] = None,
        on_step: Optional[Callable[[Step], None]] = None,
    ):
        self.store = store
        self.run_id = run_id
        self.pipeline = pipeline
        self.use_cache = use_cache
        self.dry_run_side_effects = dry_run_side_effects
        self.allow_side_effects = allow_side_effects
        self.param_overrides = normalize_overrides(param_overrides)
        # edits made by ancestor forks at visits this execution has yet to reach
        self.replay_edits: dict = {}
        self.parent_steps = parent_steps or {}
        self.parent_id = parent_id
        self.steps: list = list(prior_steps or [])
        self.occurrences = collections.Counter(s.node for s in self.steps)
        self.on_step = on_step
        self.state_hashes: dict = {}
        self.new_blobs: dict = {}
        self.pending_rows: list = []
        self.pending_cache: list = []
        self.pending_alarms: list = []
        self.pending_hits: list = []
        self.pending_states: list = []
        self.unreported: list = []
        self.served: dict = {}  # blob hash -> value served from storage (see flush_pending)
        self.cache_prefetch: dict = {}  # (node, input_hash) -> cache entry read ahead by a fork
        self.pending_run: Optional[dict] = None  # a fork's run row, written with its first commit
        self.run_row: Optional[dict] = None  # the run row as written, to return the Run from
        self._last_commit = time.monotonic()
        self._heartbeat_written = time.time()  # the run row is inserted with heartbeat_at = now
        self.current: Optional[dict] = None
        self.last_error: Optional[str] = None
        self._node_cache: dict = {}

    # state hashes ----------------------------------------------------------------------------
    def absorb(self, values: dict) -> None:
        """Hash and queue blobs for values entering the state from outside a step."""
        parts = canonical_parts(values)
        for k, part in parts.items():
            h = sha256_hex(part)
            self.state_hashes[k] = h
            self.new_blobs[h] = serde.encode(values[k], k)

    def state_refs(self, values: dict) -> dict:
        unknown = {k: v for k, v in values.items() if not is_internal_key(k) and k not in self.state_hashes}
        if unknown:
            self.absorb(unknown)
        return {k: self.state_hashes[k] for k in values if not is_internal_key(k)}

    def take_new_blobs(self) -> dict:
        blobs, self.new_blobs = self.new_blobs, {}
        return blobs

    def flush_pending(self, store: SQLStore) -> None:
        """Write queued step rows, cache entries and alarms (inside the caller's transaction)."""
        if self.pending_run is not None:
            store.insert_run(self.pending_run)
            self.pending_run = None
        if self.new_blobs:
            store.put_blobs(self.take_new_blobs())
        if self.served:
            # A blob read before this transaction (a cache hit, often from memory) may have been
            # purged by a concurrent gc since: store it again so no row points at nothing.
            served, self.served = self.served, {}
            present = store.existing_blobs(list(served))
            missing = {h: serde.encode(v, "value") for h, v in served.items() if h not in present}
            if missing:
                store.put_blobs(missing)
        if self.pending_rows:
            store.insert_nodes(self.pending_rows)
        for row in self.pending_cache:
            store.cache_put(row, keep_existing=row.pop("_keep_existing", False))
        if self.pending_hits:
            store.cache_hits(self.pending_hits)
        for alarm in self.pending_alarms:
            store.add_alarm(*alarm)
        if self.pending_states:
            store.insert_state_rows(self.pending_states)
        now = time.time()
        if self.pending_rows and now - self._heartbeat_written >= 5.0:
            store.update_run(self.run_id, heartbeat_at=now)
            self._heartbeat_written = now
        self.pending_rows, self.pending_cache, self.pending_alarms, self.pending_hits = [], [], [], []
        self.pending_states = []
        self._last_commit = time.monotonic()

    def commit(self) -> None:
        with self.store.transaction():
            self.flush_pending(self.store)
        self.report_committed()

    def report_committed(self) -> None:
        """Tell on_step about steps now durable: nothing reported done is lost in a crash."""
        steps, self.unreported = self.unreported, []
        if self.on_step is None:
            return
        for step in steps:
            try:
                self.on_step(step)
            except Exception:  # progress display must never break a run
                logger.exception("on_step callback failed")

    def note_served(self, refs: dict, values: dict) -> None:
        """Remember values served from storage that rows of this execution will refer to."""
        for field, h in refs.items():
            if field in values:
                self.served[h] = values[field]

    def must_commit(self) -> bool:
        """Commit now after work that cost something (a step that spent tokens or took 20 ms,
        a failure) or 100 ms after the last commit; let cached, dry-run and cheap executed
        steps ride along with the next commit or the end of the run."""
        if len(self.pending_states) >= 64:
            return True
        if time.monotonic() - self._last_commit >= 0.1:
            return True
        return any(
            r["status"] == "failed" or r.get("_durable") or (r["status"] == "executed" and (
                r["tokens"] or (r["latency_ms"] or 0) >= 20))
            for r in self.pending_rows
        )

    # per-node constants ----------------------------------------------------------------------
    def node_constants(self, node: str, inner: Action, occurrence: int = 1) -> dict:
        overrides = overrides_at(self.param_overrides, node, occurrence)
        key = (node, json.dumps(overrides, sort_keys=True, default=repr)) if overrides else node
        got = self._node_cache.get(key)
        if got is not None:
            return got
        shared = self.pipeline.actions.get(node) is inner and not overrides
        if shared:  # the same for every execution of the pipeline: computed once
            got = self.pipeline._constants.get(node)
            if got is not None:
                # the constants and helpers the node names may have been rebound since
                got = {**got, "code": code_fingerprint(_code_of(inner), got["policy"].version)}
                self._node_cache[key] = got
                return got
        policy = policy_of(inner)
        params = self.pipeline.params(node) if self.pipeline.actions.get(node) is inner else node_params(inner)
        params.update(overrides)
        runner = inner.with_params(**overrides) if overrides else inner
        code = code_fingerprint(_code_of(inner), policy.version)
        param_hashes = {f"param:{k}": canonical_hash(v, f"{node}.{k}") for k, v in params.items()}
        got = {
            "policy": policy, "params": params, "runner": runner, "code": code,
            "param_hashes": param_hashes, "params_json": _json_or_repr(params),
        }
        got["params_doc"] = json.loads(got["params_json"])
        self._node_cache[key] = got
        if shared:
            self.pipeline._constants[node] = got
        return got

    def parent_step(self, node: str, occurrence: int) -> Optional[Step]:
        return self.parent_steps.get((node, occurrence))


def _code_of(inner: Action) -> Any:
    fn = getattr(inner, "_originating_fn", None) or getattr(inner, "fn", None)
    return fn if fn is not None else type(inner)  # a class-based action: its class is its code


def _miss_reason(ctx: ExecutionContext, node: str, occurrence: int, field_hashes: dict,
                 input_hash: str, entry: Optional[dict], expired: bool, policy) -> str:
    """Why a step runs again, named against the parent's same step where there is one."""
    parent = ctx.parent_step(node, occurrence)
    if policy.determinism == SIDE_EFFECT:
        if ctx.allow_side_effects and ctx.parent_id:
            return "side effect performed again: allow_side_effects=True"
        return "side-effect node: never cached"
    if expired and entry is not None:
        age = time.time() - entry["cached_at"]
        return f"ttl expired: cached {age:.0f}s ago, ttl {policy.ttl:g}s"
    if parent is not None and parent.field_hashes:
        before, now = parent.field_hashes, field_hashes
        changed_reads = sorted(
            k.split(":", 1)[1] for k in set(before) | set(now)
            if k.startswith("read:") and before.get(k) != now.get(k)
        )
        changed_params = sorted(
            k.split(":", 1)[1] for k in set(before) | set(now)
            if k.startswith("param:") and before.get(k) != now.get(k)
        )
        changed_inputs = sorted(
            k.split(":", 1)[1] for k in set(before) | set(now)
            if k.startswith("input:") and before.get(k) != now.get(k)
        )
        parts = []
        if changed_reads:
            parts.append(", ".join(f"`{f}`" for f in changed_reads) + (" changed" if len(changed_reads) > 1 else " changed"))
        if changed_params:
            parts.append("param " + ", ".join(f"`{p}`" for p in changed_params) + " changed")
        if changed_inputs:
            parts.append("input " + ", ".join(f"`{p}`" for p in changed_inputs) + " changed")
        if before.get("code") != now.get("code"):
            parts.append("the node's code changed")
        if parts:
            return f"{node} ran again because " + "; ".join(parts)
        if parent.status == "failed":
            return "same inputs as the parent's step, which failed (failures are never cached)"
        if not ctx.use_cache:
            return "cache bypassed (use_cache=False)"
        return "same inputs as the parent's step, but no cache entry (purged or never stored)"
    if not ctx.use_cache:
        return "cache bypassed (use_cache=False)"
    return "no earlier entry for these inputs"


# The execution Burr is driving in this thread (set by `execute`): the wrapped graph of a
# pipeline is built once and shared, so its actions look their execution up here.
CURRENT: contextvars.ContextVar = contextvars.ContextVar("rewind_execution", default=None)


class ReplayAction(SingleStepAction):
    """Wraps one pipeline action: hash, serve from cache, dry-run, or run on the read subset."""

    def __init__(self, inner: Action, ctx: Optional[ExecutionContext] = None):
        super().__init__()
        self._inner = inner
        self._ctx_fixed = ctx
        self._name = inner.name

    @property
    def _ctx(self) -> ExecutionContext:
        ctx = self._ctx_fixed or CURRENT.get()
        if ctx is None:
            raise RewindError(f"node {self._name!r} ran outside a Rewind execution")
        return ctx

    @property
    def reads(self) -> list:
        return self._inner.reads

    @property
    def writes(self) -> list:
        return self._inner.writes

    @property
    def inputs(self):
        return self._inner.inputs

    @property
    def tags(self) -> list:
        return getattr(self._inner, "tags", [])

    def get_source(self) -> str:
        return self._inner.get_source()

    def run_and_update(self, state: State, **run_kwargs) -> tuple:
        ctx, node, inner = self._ctx, self.name, self._inner
        started = time.perf_counter()
        started_at = time.time()
        occurrence = ctx.occurrences[node] + 1
        ctx.occurrences[node] = occurrence
        edit = ctx.replay_edits.pop((node, occurrence), None)
        if edit:  # an ancestor fork edited the state here: its world includes that edit
            state = state.update(**edit)
            ctx.absorb(edit)
        const = ctx.node_constants(node, inner, occurrence)
        policy = const["policy"]
        reads, writes = list(inner.reads), list(inner.writes)

        read_values = {k: state[k] for k in reads if k in state}
        read_hashes = {}
        for k in read_values:
            h = ctx.state_hashes.get(k)
            if h is None or policy.ignore:
                v = read_values[k]
                if policy.ignore:
                    if k in policy.ignore:
                        continue
                    v = strip_ignored(v, [n.split(".", 1)[1] if n.startswith(k + ".") else n for n in policy.ignore])
                h = canonical_hash(v, k)
            read_hashes[f"read:{k}"] = h
        field_hashes = {"code": const["code"], **read_hashes, **const["param_hashes"]}
        for k, v in run_kwargs.items():
            field_hashes[f"input:{k}"] = canonical_hash(v, f"{node}.{k}")
        input_hash = combine({"node": node, "fields": field_hashes})
        input_refs = {k: ctx.state_hashes[k] for k in read_values if k in ctx.state_hashes}
        for k in read_values:
            if k not in input_refs:
                ctx.absorb({k: read_values[k]})
                input_refs[k] = ctx.state_hashes[k]

        record = {
            "node": node, "occurrence": occurrence, "input_hash": input_hash,
            "field_hashes": field_hashes, "params": const["params"], "inputs": input_refs,
            "params_json": const["params_json"], "params_doc": const["params_doc"],
            "started_at": started_at, "prompt_tokens": 0, "completion_tokens": 0,
            "tokens_saved": 0, "source_run": None, "error": None, "cache_row": None,
        }
        ctx.current = record
        outputs: Optional[dict] = None
        entry = None
        expired = False

        if policy.determinism == SIDE_EFFECT and ctx.dry_run_side_effects:
            parent = ctx.parent_step(node, occurrence)
            if parent is not None and parent.input_hash == input_hash and parent.output_refs:
                outputs = ctx.store.values(parent.output_refs)
                ctx.note_served(parent.output_refs, outputs)
                record["reason"] = (
                    f"dry-run: the effect already happened with these exact inputs in run "
                    f"{ctx.parent_id}; its recorded outputs are reused"
                )
            else:
                outputs = {w: None for w in writes}
                record["reason"] = (
                    "dry-run: side effect not performed (its inputs differ from the parent's); "
                    "pass allow_side_effects=True to perform it"
                    if parent is not None else
                    "dry-run: side effect not performed; pass allow_side_effects=True to perform it"
                )
            record["status"] = "dry-run"
        elif policy.cacheable:
            entry = ctx.cache_prefetch.pop((node, input_hash), None)
            if entry is None:
                entry = ctx.store.cache_get(node, input_hash)
            if entry is not None and ctx.use_cache:
                expired = policy.determinism == TIME_BOUND and (
                    time.time() - entry["cached_at"] >= policy.ttl
                )
                if not expired:
                    try:
                        refs = json.loads(entry["outputs"])
                        outputs = ctx.store.values(refs)
                        ctx.note_served(refs, outputs)
                    except RewindError as e:  # integrity failure: a miss, reported
                        logger.warning("cache entry for %s unusable: %s", node, e)
                        record["integrity_note"] = str(e)
                        outputs = None
                    if outputs is not None:
                        record["status"] = "cached"
                        record["tokens_saved"] = int(entry["tokens"] or 0)
                        record["source_run"] = entry["source_run"]
                        record["reason"] = (
                            f"cache hit: same inputs as run {entry['source_run']}"
                            if entry["source_run"] else "cache hit"
                        )
                        ctx.pending_hits.append((node, input_hash))
                        for k, h in refs.items():
                            ctx.state_hashes[k] = h
                        record["outputs"] = refs
                        record["outputs_json"] = entry["outputs"]
                        record["output_hash"] = entry["output_hash"]

        if outputs is None:
            if ctx.pending_run is not None:  # make the run visible before doing real work
                ctx.commit()
            record["status"] = "executed"
            record["side_effect"] = policy.determinism == SIDE_EFFECT
            record["reason"] = _miss_reason(
                ctx, node, occurrence, field_hashes, input_hash, entry, expired, policy
            )
            if record.get("integrity_note"):
                record["reason"] += f" (cache entry rejected: {record['integrity_note']})"
            meter = StepMeter(node=node, tool_store=ctx.store if ctx.use_cache else None)
            # by value: an in-place change to a read must not leak into the state, since a
            # cache hit could not replay it and the next node would see other inputs
            guard = _ReadGuard(copy.deepcopy(read_values), node, reads, state.keys())
            try:
                with metering(meter):
                    runner = const["runner"]
                    if getattr(runner, "single_step", False):
                        out = runner.run_and_update(guard, **run_kwargs)
                    else:  # a class-based Burr action: run, then its reducer
                        out = runner.update(runner.run(guard, **run_kwargs), guard)
            except BaseException as e:
                record["prompt_tokens"] = meter.prompt_tokens
                record["completion_tokens"] = meter.completion_tokens
                record["status"] = "failed"
                record["error"] = f"{type(e).__name__}: {e}"
                record["latency_ms"] = (time.perf_counter() - started) * 1000
                ctx.last_error = f"{node}: {record['error']}"
                raise
            record["prompt_tokens"] = meter.prompt_tokens
            record["completion_tokens"] = meter.completion_tokens
            if isinstance(out, tuple) and len(out) == 2:
                result, new_state = out
            else:
                result, new_state = None, out
            if not isinstance(new_state, State):
                record["status"] = "failed"
                record["error"] = (
                    f"node {node!r} returned {type(new_state).__name__}; return a burr State "
                    "(state.update(...)) or (result, state)"
                )
                ctx.last_error = f"{node}: {record['error']}"
                raise RewindError(record["error"])
            outputs = {w: new_state[w] for w in writes if w in new_state}
        else:
            result = None

        if "outputs" not in record:
            try:
                parts = canonical_parts(outputs, node)
            except RewindError as e:
                record["status"] = "failed"
                record["error"] = f"{type(e).__name__}: {e}"
                ctx.last_error = f"{node}: {record['error']}"
                raise
            out_refs = {}
            for k, part in parts.items():
                h = sha256_hex(part)
                out_refs[k] = h
                if h not in ctx.new_blobs:
                    ctx.new_blobs[h] = serde.encode(outputs[k], k)
                ctx.state_hashes[k] = h
            if policy.ignore:
                stripped = {k: v for k, v in outputs.items() if k not in policy.ignore}
                record["output_hash"] = canonical_hash(strip_ignored(stripped, policy.ignore))
            else:
                record["output_hash"] = sha256_hex(join_parts(parts))
            record["outputs"] = out_refs
            if record["status"] == "executed" and policy.cacheable:
                tokens = record["prompt_tokens"] + record["completion_tokens"]
                if (
                    entry is not None and policy.determinism == DETERMINISTIC
                    and entry["output_hash"] != record["output_hash"]
                ):
                    ctx.pending_alarms.append(
                        (node, input_hash, entry["output_hash"], record["output_hash"], ctx.run_id)
                    )
                    record["reason"] += (
                        "; nondeterministic: these inputs gave a different output before "
                        f"(run {entry['source_run']})"
                    )
                record["cache_row"] = {
                    "node": node, "input_hash": input_hash, "output_hash": record["output_hash"],
                    "outputs": refs_json(out_refs), "prompt_tokens": record["prompt_tokens"],
                    "completion_tokens": record["completion_tokens"], "tokens": tokens,
                    "cached_at": time.time(), "hits": 0, "determinism": policy.determinism,
                    "source_run": ctx.run_id,
                    # a deterministic entry keeps its first output; a time-bound one refreshes
                    "_keep_existing": policy.determinism == DETERMINISTIC and not expired,
                }
        record["latency_ms"] = (time.perf_counter() - started) * 1000
        if result is None:
            result = dict(outputs)
        return result, state.update(**outputs)


class StepRecorder(PostRunStepHook):
    """Burr's post-run-step hook: turns the wrapper's record into a `nodes` row and a `Step`."""

    def __init__(self, ctx: ExecutionContext):
        self.ctx = ctx

    def post_run_step(self, *, app_id, partition_key, sequence_id, state, action, result,
                      exception, **future_kwargs):
        ctx = self.ctx
        record = ctx.current
        ctx.current = None
        if record is None or record["node"] != action.name:
            record = {
                "node": action.name, "occurrence": ctx.occurrences[action.name],
                "input_hash": None, "field_hashes": {}, "params": {}, "inputs": {},
                "started_at": time.time(), "prompt_tokens": 0, "completion_tokens": 0,
                "tokens_saved": 0, "source_run": None, "cache_row": None, "latency_ms": 0.0,
            }
        if exception is not None:
            if record.get("status") != "failed":
                record["status"] = "failed"
                record["error"] = f"{type(exception).__name__}: {exception}"
                ctx.last_error = f"{action.name}: {record['error']}"
            record["outputs"] = {}
            record["output_hash"] = None
            record["cache_row"] = None
        tokens = 0 if record["status"] in ("cached", "dry-run") else (
            record["prompt_tokens"] + record["completion_tokens"]
        )
        idx = len(ctx.steps)
        field_hashes = record["field_hashes"]
        input_refs = record["inputs"]
        output_refs = record.get("outputs") or {}
        params_doc = record.get("params_doc")
        params_json = record.get("params_json")
        if params_doc is None:
            params_json = _json_or_repr(record["params"]) if record["params"] else "{}"
            params_doc = json.loads(params_json)
        # What a cached step shares with the step it was cached from goes into one
        # content-addressed doc: a no-edit fork re-uses its parent's docs instead of copying.
        doc_hash, doc_data = ctx.store.memo_doc(
            ("step", tuple(field_hashes.items()), tuple(input_refs.items()),
             tuple(output_refs.items()), record.get("output_hash"), record["input_hash"],
             params_json),
            lambda: {
                "field_hashes": field_hashes, "params": params_doc, "inputs": input_refs,
                "outputs": output_refs, "output_hash": record.get("output_hash"),
                "input_hash": record["input_hash"],
            },
        )
        if doc_hash not in ctx.new_blobs:
            ctx.new_blobs[doc_hash] = doc_data
        reason = record.get("reason", "")
        if reason == default_reason(record["status"], record["source_run"], ctx.parent_id):
            reason = None
        row = {
            "run_id": ctx.run_id, "idx": idx, "node": record["node"],
            "occurrence": record["occurrence"], "status": record["status"],
            "sequence_id": sequence_id,
            # NULL for the run's own app id, and for the default reason (see store.py)
            "state_app_id": None if app_id == ctx.run_id else app_id,
            "input_hash": record["input_hash"], "doc": doc_hash,
            "prompt_tokens": record["prompt_tokens"], "completion_tokens": record["completion_tokens"],
            "tokens": tokens, "tokens_saved": record["tokens_saved"],
            "latency_ms": record.get("latency_ms", 0.0), "reason": reason,
            "error": record.get("error"), "started_at": record["started_at"],
            "source_run": record["source_run"],
            # a performed side effect is committed at once: its record must survive a crash
            "_durable": record["status"] == "executed" and record.get("side_effect", False),
        }
        ctx.pending_rows.append(row)
        if record.get("cache_row") is not None:
            ctx.pending_cache.append(record["cache_row"])
        step = Step(
            node=row["node"], status=row["status"], input_hash=row["input_hash"],
            output_hash=record.get("output_hash"), tokens=tokens,
            latency_ms=float(row["latency_ms"] or 0), params=dict(params_doc),
            reason=record.get("reason") or "", error=row["error"], occurrence=int(row["occurrence"]),
            index=idx, prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
            tokens_saved=row["tokens_saved"], field_hashes=dict(field_hashes),
            sequence_id=sequence_id, state_app_id=app_id, run_id=ctx.run_id,
            source_run=row["source_run"], started_at=row["started_at"],
            input_refs=dict(input_refs), output_refs=dict(output_refs),
            _loader=ctx.store.values,
        )
        ctx.steps.append(step)
        ctx.unreported.append(step)  # reported to on_step once the commit holding it is done


def _json_or_repr(value: Any) -> str:
    from .hashing import to_canonical

    try:
        return json.dumps(to_canonical(value), sort_keys=True)
    except Exception:
        return json.dumps({k: repr(v) for k, v in value.items()})


def _col(value: Any, default: Any) -> Any:
    if value is None:
        return default
    if isinstance(value, memoryview):
        value = bytes(value)
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def step_from_row(row: dict, store: SQLStore, docs: Optional[dict] = None,
                  parent_id: Optional[str] = None) -> Step:
    """A `Step` from a `nodes` row; its doc (field hashes, params, refs, hashes) is read from
    `docs` ({hash: doc}, see `steps_from_rows`) or the store. A column that is set (a row of
    the first layout) wins over the doc. `parent_id` (the run's parent) spells the default
    reason of an inherited step."""
    h = row.get("doc")
    doc: dict = {}
    if h:
        doc = docs[h] if docs is not None and h in docs else store.get_docs([h])[h]
    fh, params, inputs, outputs = (row.get(c) for c in ("field_hashes", "params", "inputs", "outputs"))
    reason = row["reason"]
    if reason is None:
        reason = default_reason(row["status"], row["source_run"], parent_id) or ""
    return Step(
        node=row["node"], status=row["status"],
        input_hash=row["input_hash"] if row["input_hash"] is not None else doc.get("input_hash"),
        output_hash=row["output_hash"] if row.get("output_hash") is not None else doc.get("output_hash"),
        tokens=int(row["tokens"] or 0),
        latency_ms=float(row["latency_ms"] or 0),
        params=_col(params, None) if params is not None else dict(doc.get("params") or {}),
        reason=reason, error=row["error"], occurrence=int(row["occurrence"]),
        index=int(row["idx"]), prompt_tokens=int(row["prompt_tokens"] or 0),
        completion_tokens=int(row["completion_tokens"] or 0),
        tokens_saved=int(row["tokens_saved"] or 0),
        field_hashes=_col(fh, None) if fh is not None else dict(doc.get("field_hashes") or {}),
        sequence_id=row["sequence_id"],
        state_app_id=row_state_app(row), run_id=row["run_id"], source_run=row["source_run"],
        started_at=row["started_at"],
        input_refs=_col(inputs, None) if inputs is not None else dict(doc.get("inputs") or {}),
        output_refs=_col(outputs, None) if outputs is not None else dict(doc.get("outputs") or {}),
        _loader=store.values,
    )


def steps_from_rows(rows: list, store: SQLStore, parent_id: Optional[str] = None) -> list:
    """`Step`s of one run's `nodes` rows, their docs read in one query."""
    docs = store.get_docs([r.get("doc") for r in rows]) if rows else {}
    return [step_from_row(r, store, docs, parent_id) for r in rows]


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def summarize_state(state: dict) -> str:
    for v in state.values():
        if isinstance(v, str) and v.strip():
            return v.strip()[:200].replace("\x00", "\ufffd")
    try:
        return json.dumps(state, default=str)[:200]
    except Exception:
        return ""


class Heartbeat:
    """One thread per store updating `heartbeat_at` of this process's running runs, so another
    host can tell a live run from a dead one (the lease in `store.HEARTBEAT_LEASE_S`)."""

    INTERVAL_S = 15.0

    def __init__(self, store: SQLStore):
        self.store = store
        self.live: set = set()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()

    def add(self, run_id: str) -> None:
        with self._lock:
            self.live.add(run_id)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, daemon=True, name="rewind-heartbeat")
                self._thread.start()

    def remove(self, run_id: str) -> None:
        with self._lock:
            self.live.discard(run_id)

    def _loop(self) -> None:
        while not self._stop.wait(self.INTERVAL_S):
            with self._lock:
                ids = list(self.live)
            if not ids:
                continue
            try:
                now = time.time()
                with self.store.transaction():
                    for run_id in ids:
                        self.store.update_run(run_id, heartbeat_at=now)
            except Exception:
                logger.debug("heartbeat failed", exc_info=True)


_OWNER_STARTED = process_started(PID)


def owner_fields() -> dict:
    return {
        "owner_host": HOST, "owner_pid": PID, "owner_started": _OWNER_STARTED,
        "heartbeat_at": time.time(),
    }


def execute(ctx: ExecutionContext, builder: ApplicationBuilder, heartbeat: Heartbeat,
            started: float) -> Run:
    """Drive a built application step by step until it halts; finalize the run row."""
    store = ctx.store
    app = builder.build() if isinstance(builder, ApplicationBuilder) else builder
    store.live_contexts[ctx.run_id] = ctx
    heartbeat.add(ctx.run_id)
    status, error = "completed", None
    token = CURRENT.set(ctx)
    try:
        steps = 0
        while app.get_next_action() is not None:
            steps += 1
            if steps > MAX_STEPS:
                raise RewindError(f"run exceeded {MAX_STEPS} steps; is there a loop with no exit?")
            app.step()
    except Exception as e:
        status = "failed"
        error = ctx.last_error or f"{type(e).__name__}: {e}"
    except BaseException:
        status = "interrupted"
        error = "interrupted (KeyboardInterrupt or exit)"
        raise
    finally:
        CURRENT.reset(token)
        heartbeat.remove(ctx.run_id)
        store.live_contexts.pop(ctx.run_id, None)
        own = [s for s in ctx.steps if s.status != "inherited"]
        fields = dict(
            status=status, error=error, finished_at=time.time(),
            total_tokens=sum(s.tokens for s in own),
            tokens_saved=sum(s.tokens_saved for s in own),
            latency_ms=(time.perf_counter() - started) * 1000, step_count=len(ctx.steps),
        )
        with store.transaction():
            if ctx.pending_run is not None:  # a fork not yet written: its row, final at once
                ctx.pending_run.update(fields)
                ctx.flush_pending(store)
            else:
                ctx.flush_pending(store)
                store.update_run(ctx.run_id, **fields)
        ctx.report_committed()
    if ctx.run_row is not None:
        row = {c: None for c in RUN_COLUMNS}
        row.update(ctx.run_row)
        row.update(fields)
    else:
        row = store.get_run_row(ctx.run_id)
    return Run.from_row(row, steps=list(ctx.steps))


def base_builder(ctx: ExecutionContext, run_id: str) -> ApplicationBuilder:
    return (
        ApplicationBuilder()
        .with_graph(ctx.pipeline.wrapped_graph())
        .with_hooks(StepRecorder(ctx))
        .with_identifiers(app_id=run_id, partition_key=PARTITION_KEY)
        .with_state_persister(ctx.store.persister())
    )
