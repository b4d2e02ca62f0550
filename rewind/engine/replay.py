"""`ReplayAction`: the Burr action every pipeline node is wrapped in.

Burr hooks cannot skip an action, so the wrapper is where a visit is decided: key it, then
dry-run it (a side effect on replay), serve it from the cache, or execute it on its guarded
view. Whatever happens it returns the FULL state updated with the node's writes (Burr deletes
keys missing from the returned state), and leaves a `StepRecord` for the recorder hook.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import nullcontext
from typing import Any, Optional

from burr.core import State
from burr.core.action import Action, SingleStepAction

from ..keys import envwatch
from ..keys import filewatch
from ..model import chat as llm
from ..store import serde
from ..keys import DETERMINISTIC, SIDE_EFFECT
from ..errors import RewindError
from ..keys import is_internal_key, sha256_hex
from ..model.metering import StepMeter
from ..models import StepStatus
from ..model.calls import serving
from .burr_compat import state_values
from .calls import for_step as model_call_cache
from .context import _UNASKED, CURRENT, ExecutionContext, StepRecord
from ..keys import is_expired, keeps_first_output, miss_reason
from .keys import NodeSpec
from .node import apply_outputs, execute_node

logger = logging.getLogger("rewind")


def refs_json(refs: dict) -> str:
    return json.dumps(refs, sort_keys=True, separators=(",", ":"))


def entry_meta(entry: dict) -> dict:
    """What a cache entry keeps beside its values (see store.schema: cache.meta)."""
    raw = entry.get("meta")
    try:
        return json.loads(raw) if raw else {}
    except (TypeError, ValueError):
        return {}


OTHER_ENDPOINT = "its model calls went to another model endpoint"
_PARSED: dict = {}  # (outputs text, meta text) of a cache entry -> (refs, meta), read only
_PARSED_MAX = 20_000


def parsed_entry(entry: dict) -> tuple:
    """(refs, meta) of a cache entry, parsed once per process: every fork of a run serves the
    same entries (the dicts are shared: read them, never mutate them)."""
    key = (entry["outputs"], entry.get("meta"))
    if not isinstance(key[0], str) or not isinstance(key[1], (str, type(None))):
        return json.loads(entry["outputs"]), entry_meta(entry)
    got = _PARSED.get(key)
    if got is None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        got = _PARSED[key] = (json.loads(entry["outputs"]), entry_meta(entry))
    return got


def what_changed(meta: dict, endpoint) -> tuple:
    """What a matching cache entry's key does not hold and that differs now, so the entry
    cannot be served: (files read, environment variables read, another model endpoint?), the
    first that differs (`endpoint`: a callable giving the endpoint in force)."""
    files = meta.get("files")
    changed = filewatch.changed(files) if files else None
    if changed:
        return changed, [], False
    env = meta.get("env")
    changed = envwatch.changed(env) if env else None
    if changed:
        return [], changed, False
    return [], [], bool(meta.get("endpoint")) and meta["endpoint"] != endpoint()


def change_named(files: list, env: list) -> str:
    """'file `a` changed' / 'environment variable `X` changed' for `what_changed`'s lists
    ("" when neither changed): one spelling for the replay's reason and the fork plan's."""
    for what, names in (("file", files), ("environment variable", env)):
        if names:
            return f"{what} " + ", ".join(f"`{n}`" for n in names) + " changed"
    return ""


class EarlierVisit:
    """The last recorded visit with the same inputs but other code, from its cache entry."""

    def __init__(self, meta: dict):
        self.field_hashes = dict(meta.get("fields") or {})
        self.units = dict(meta.get("units") or {})


def shape_hash(spec: NodeSpec, record: StepRecord) -> str:
    """The visit's key without its code: equal for the same inputs under edited code."""
    if record.shape_hash is None:
        record.shape_hash = spec.input_hash(
            {k: v for k, v in record.field_hashes.items() if k != "code"})
    return record.shape_hash


class Visit:
    """One decided visit of a node: served (`outputs` set, from a dry run or the cache) or to
    be executed (the spec, record and cache entry `_execute` needs)."""

    __slots__ = ("spec", "record", "state", "started", "entry", "expired", "outputs")

    def __init__(self, spec: NodeSpec, record: StepRecord, state: State, started: float):
        self.spec, self.record, self.state, self.started = spec, record, state, started
        self.entry: Optional[dict] = None
        self.expired = False
        self.outputs: Optional[dict] = None

    def served(self) -> tuple:
        """(result, full state) of a served visit, as the wrapper returns them to Burr."""
        return dict(self.outputs), apply_outputs(self.state, self.outputs, self.record.writes(self.spec),
                                                 self.record.deleted)


class ReplayAction(SingleStepAction):
    """Wraps one pipeline action: key it, then dry-run, serve from cache, or execute."""

    def __init__(self, inner: Action):
        super().__init__()
        self._inner = inner
        self._name = inner.name

    @property
    def _ctx(self) -> ExecutionContext:
        ctx = CURRENT.get()
        if ctx is None:
            raise RewindError(f"node {self._name!r} ran outside a Rewind execution", node=self._name)
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

    _io: Optional[tuple] = None  # (inner.inputs, Burr's sets of them)

    @property
    def optional_and_required_inputs(self) -> tuple:
        # Burr's own property builds two sets from `inputs` on every call (twice a step);
        # they are remembered for as long as the inner action returns the same `inputs`
        inputs = self._inner.inputs
        io = self._io
        if io is None or io[0] is not inputs:
            io = self._io = (inputs, super().optional_and_required_inputs)
        return io[1]

    @property
    def tags(self) -> list:
        return getattr(self._inner, "tags", [])

    def get_source(self) -> str:
        return self._inner.get_source()

    def run_and_update(self, state: State, **run_kwargs) -> tuple:
        ctx = self._ctx
        visit = ctx.take_decided(self._name)  # decided by the stepper before Burr's step
        if visit is None:
            visit = self.decide(ctx, state, run_kwargs)
        if visit.outputs is not None:
            return visit.served()
        return self._execute(ctx, visit.spec, visit.record, visit.state, run_kwargs, visit.entry,
                             visit.expired, visit.started)

    def decide(self, ctx: ExecutionContext, state: State, run_kwargs: dict) -> "Visit":
        """Key this visit and serve it if it can be: a dry run of a side effect or a cache hit
        (`Visit.outputs` set), else what executing it needs (`outputs` None)."""
        node = self._name
        started = time.perf_counter()
        occurrence = ctx.occurrences[node] + 1
        ctx.occurrences[node] = occurrence
        edit = ctx.replay_edits.pop((node, occurrence), None)
        if edit:  # an ancestor fork edited the state here: its world includes that edit
            state = state.update(**edit)
            ctx.absorb(edit)
        spec = ctx.spec(node, self._inner, occurrence)
        record = self._key(ctx, spec, state, occurrence, run_kwargs)
        ctx.current = record
        visit = Visit(spec, record, state, started)
        if spec.policy.determinism == SIDE_EFFECT and ctx.dry_run_side_effects:
            visit.outputs = self._dry_run(ctx, spec, record)
        elif spec.policy.cacheable:
            key = ctx.cache_key(record.input_hash)
            entry = ctx.cache_prefetch.pop((node, key), None)
            if entry is None and ctx.parent_step(node, occurrence) is None:
                # a visit with no parent step: the newest entry with the same inputs under
                # other code comes in the same query, for the reason if it runs
                entry, record.earlier = ctx.store.cache_get_and_like(
                    node, key, ctx.cache_key(shape_hash(spec, record)))
            elif entry is None:
                entry = ctx.store.cache_get(node, key)
            if entry is None and any(r["node"] == node and r["input_hash"] == key
                                     for r in ctx.pending_cache):
                # this run computed these inputs a moment ago and the entry rides along with
                # the next commit: commit it, so a loop's repeat is served whatever the timing
                ctx.commit()
                entry = ctx.store.cache_get(node, key)
            visit.entry = entry
            if entry is not None and ctx.use_cache and node not in ctx.resample:
                visit.expired = is_expired(spec.policy, entry)
                if not visit.expired:
                    visit.outputs = self._serve(ctx, record, entry, state)
        if visit.outputs is not None:
            record.latency_ms = (time.perf_counter() - started) * 1000
        return visit

    # --- the four parts of a visit --------------------------------------------------------------
    def _key(self, ctx: ExecutionContext, spec: NodeSpec, state: State, occurrence: int,
             run_kwargs: dict) -> StepRecord:
        readable = spec.readable(state)
        inputs = ctx.refs_of(readable)
        field_hashes = spec.field_hashes(readable, ctx.state_hashes, run_kwargs, ctx.state_classes,
                                         inputs)
        runtime = {k: v for k, v in run_kwargs.items() if not k.startswith("__")}
        record = StepRecord(
            node=spec.node, occurrence=occurrence, started_at=time.time(),
            input_hash=spec.input_hash(field_hashes), field_hashes=field_hashes,
            params_doc=spec.params_doc, params_json=spec.params_json, units=spec.units,
            inputs=inputs,
            runtime=ctx.blob_refs(runtime, f"{spec.node}.inputs") if runtime else {},
        )
        record.readable = readable
        if not spec.policy.ignore:  # unstripped: each read field's hash is its value's
            learn = ctx.store.learn_ref_hash
            for k, ref in record.inputs.items():
                h = field_hashes.get("read:" + k) or field_hashes.get("prior:" + k)
                if h is not None:
                    learn(ref, h)
        return record

    def _dry_run(self, ctx: ExecutionContext, spec: NodeSpec, record: StepRecord) -> dict:
        parent = ctx.parent_step(spec.node, record.occurrence)
        record.status = StepStatus.DRY_RUN
        if parent is not None and parent.input_hash == record.input_hash and parent.output_refs:
            refs = {k: h for k, h in parent.output_refs.items() if h is not None}
            outputs = ctx.store.values(refs)
            ctx.note_served(refs, outputs)
            record.reason = (
                f"dry-run: the effect already happened with these exact inputs in run "
                f"{ctx.parent_id}; its recorded outputs are reused"
            )
        else:
            outputs = {w: None for w in spec.writes}
            record.reason = (
                "dry-run: side effect not performed (its inputs differ from the parent's); "
                "pass allow_side_effects=True to perform it"
                if parent is not None else
                "dry-run: side effect not performed; pass allow_side_effects=True to perform it"
            )
        self._finish_outputs(ctx, spec, record, outputs)
        return outputs

    def _serve(self, ctx: ExecutionContext, record: StepRecord, entry: dict,
               state: State) -> Optional[dict]:
        refs, meta = parsed_entry(entry)
        # a file or environment variable the node read differs now, or its outputs came from
        # another model endpoint (the settings changed): a miss, named
        record.files_changed, record.env_changed, elsewhere = what_changed(meta, ctx.endpoint)
        if elsewhere:
            record.integrity_note = OTHER_ENDPOINT
        if record.files_changed or record.env_changed or elsewhere:
            return None
        extra = meta.get("extra") or ()
        if extra and not getattr(self._inner, "single_step", False):
            # a class action's `update` may set an undeclared field only where the state
            # already has it (Burr's `_run_reducer`): elsewhere it runs, and fails as in Burr
            values = state_values(state)
            if any(k not in values for k in extra):
                return None
        try:
            outputs = ctx.store.values({k: h for k, h in refs.items() if h is not None})
        except RewindError as e:  # an unreadable entry is a miss, and the reason says why
            logger.warning("cache entry for %s unusable: %s", record.node, e)
            record.integrity_note = str(e)
            return None
        ctx.note_served(refs, outputs)
        record.status = StepStatus.CACHED
        record.tokens_saved = int(entry["tokens"] or 0)
        record.source_run = entry["source_run"]
        record.reason = (f"cache hit: same inputs as run {entry['source_run']}"
                         if entry["source_run"] else "cache hit")
        ctx.pending_hits.append((record.node, ctx.cache_key(record.input_hash)))
        ctx.loaded(refs)
        learn = ctx.store.learn_ref_hash
        for k, h in (meta.get("hashes") or {}).items():
            if k in refs:
                ctx.state_hashes[k] = h
                if refs[k] is not None:
                    learn(refs[k], h)
        record.outputs = dict(refs)
        record.extra = list(meta.get("extra") or ())
        record.files = dict(meta.get("files") or {})
        record.output_hash = entry["output_hash"]
        record.deleted = [k for k, h in refs.items() if h is None]
        gone = meta.get("gone")
        if gone:  # deleted by name outside what it reads: wherever the state has them now
            values = state_values(state)
            record.deleted = [k for k in record.deleted if k not in gone or k in values]
            record.deleted += [k for k in gone if k in values and k not in record.deleted]
            record.gone = list(gone)
            for k in gone:  # a null ref where it deletes one; none where there is none to delete
                if k in values:
                    record.outputs[k] = None
                else:
                    record.outputs.pop(k, None)
            ctx.loaded({k: None for k in record.deleted})
        kept = meta.get("kept")
        if kept is not None:  # it wiped with keep=: Burr deletes every other field there is now
            keep = set(kept)
            record.deleted = sorted(k for k in state_values(state)
                                    if k not in keep and not is_internal_key(k))
            for k in record.deleted:
                record.outputs[k] = None
            ctx.loaded({k: None for k in record.deleted})
        return outputs

    def _execute(self, ctx: ExecutionContext, spec: NodeSpec, record: StepRecord, state: State,
                 run_kwargs: dict, entry: Optional[dict], expired: bool, started: float) -> tuple:
        if ctx.pending_run is not None:  # make the run visible before doing real work
            ctx.commit()
        ctx.forget_endpoint()  # the node may change the model settings
        policy = spec.policy
        record.status = StepStatus.EXECUTED
        record.side_effect = policy.determinism == SIDE_EFFECT
        record.reason = miss_reason(
            spec.node, policy, record.field_hashes, ctx.parent_step(spec.node, record.occurrence),
            entry, expired, ctx.use_cache, ctx.allow_side_effects, bool(ctx.parent_id),
            spec.units, self._earlier(ctx, spec, record),
        )
        changed = change_named(record.files_changed, record.env_changed)
        if changed:  # what the key does not hold changed: the reason names it
            record.reason = f"{spec.node} ran again because {changed}"
        if record.integrity_note:
            record.reason += f" (cache entry rejected: {record.integrity_note})"
        if spec.node in ctx.resample and policy.cacheable:
            record.reason = f"{spec.node} re-sampled (a blame trial): cache and model calls bypassed"
        meter = StepMeter(node=spec.node, tool_store=ctx.store if ctx.use_cache else None)
        calls = model_call_cache(ctx, spec)
        try:
            with filewatch.track_reads() as reads, envwatch.track_env() as env, \
                    (serving(calls) if calls else nullcontext()):
                done = execute_node(spec.node, spec.runner, record.readable, spec.reads,
                                    spec.writes, run_kwargs, state, meter=meter)
            record.files = dict(reads.files)
            record.env = dict(env)
            record.kept = done.kept
            record.extra = done.extra
            record.gone = done.gone
            self._finish_outputs(ctx, spec, record, done.outputs, done.deleted)
        except BaseException as e:
            self._metered(record, meter, calls)
            record.fail(f"{type(e).__name__}: {e}")
            record.latency_ms = (time.perf_counter() - started) * 1000
            ctx.last_error = f"{spec.node}: {record.error}"
            raise
        self._metered(record, meter, calls)
        if calls is not None:
            calls.remember(meter.calls)
        if policy.cacheable:
            self._cache_entry(ctx, spec, record, entry, expired)
        # one-time set-up (the tokenizer, the client) is the process's cost, not the node's
        record.latency_ms = max((time.perf_counter() - started) * 1000 - meter.init_ms, 0.0)
        return done.result, apply_outputs(state, done.outputs, record.writes(spec), done.deleted)

    @staticmethod
    def _earlier(ctx: ExecutionContext, spec: NodeSpec, record: StepRecord) -> Optional[EarlierVisit]:
        if ctx.parent_step(spec.node, record.occurrence) is not None:
            return None  # a fork names what changed against its parent's step
        try:
            entry = record.earlier if record.earlier is not _UNASKED else \
                ctx.store.latest_cache_entry_like(spec.node, ctx.cache_key(shape_hash(spec, record)))
        except Exception:  # an explanation must never fail a step
            logger.debug("earlier visit lookup failed", exc_info=True)
            return None
        return EarlierVisit(entry_meta(entry)) if entry is not None else None

    @staticmethod
    def _metered(record: StepRecord, meter: StepMeter, calls: Optional[Any] = None) -> None:
        record.prompt_tokens, record.completion_tokens = meter.prompt_tokens, meter.completion_tokens
        record.calls = [c.to_dict() for c in meter.calls]
        record.tools = list(meter.tools)
        if meter.model_calls:  # the endpoint its outputs depend on (re-checked before a hit)
            record.endpoint = llm.endpoint_identity()
        if calls is not None and calls.served:  # answered from the model-call cache: not paid
            prompt, completion = calls.served_tokens
            record.prompt_tokens = max(record.prompt_tokens - prompt, 0)
            record.completion_tokens = max(record.completion_tokens - completion, 0)
            record.tokens_saved += prompt + completion
            record.reason += (f" ({len(calls.served)} of {len(meter.calls)} model calls served "
                              "from the model-call cache)")

    # --- outputs -------------------------------------------------------------------------------
    @staticmethod
    def _finish_outputs(ctx: ExecutionContext, spec: NodeSpec, record: StepRecord,
                        outputs: dict, deleted: tuple = ()) -> None:
        parts = spec.output_parts(outputs)  # UnhashableValue names the field
        out_refs, hashes = {}, {}
        for k, part in parts.items():
            hashes[k] = sha256_hex(part)
            if k in spec.writes or k in record.extra:
                out_refs[k] = ctx.store_value(k, outputs[k])
                ctx.state_hashes[k] = hashes[k]
                ctx.store.learn_ref_hash(out_refs[k], hashes[k])
            else:  # what a Result node returns: recorded, not part of the state
                data = serde.encode(outputs[k], k)
                out_refs[k] = serde.blob_ref(data)
                ctx.new_blobs.setdefault(out_refs[k], data)
        record.output_field_hashes = hashes
        record.output_hash = spec.output_hash(outputs, parts, deleted)
        for k in deleted:  # a null ref: the step removed the field (replayed on a hit)
            out_refs[k] = None
        ctx.loaded({k: None for k in deleted})
        record.outputs = out_refs

    @staticmethod
    def _cache_entry(ctx: ExecutionContext, spec: NodeSpec, record: StepRecord,
                     entry: Optional[dict], expired: bool) -> None:
        policy = spec.policy
        # a hit refused for what the key does not hold (a file read changed, another model
        # endpoint, an unreadable entry): the new output is no sign of nondeterminism, and it
        # replaces the entry, or no later visit could ever be served
        refused = bool(record.files_changed or record.env_changed or record.integrity_note)
        if (entry is not None and not refused and policy.determinism == DETERMINISTIC
                and entry["output_hash"] != record.output_hash):
            ctx.pending_alarms.append(
                (spec.node, record.input_hash, entry["output_hash"], record.output_hash, ctx.run_id))
            record.reason += ("; nondeterministic: these inputs gave a different output before "
                              f"(run {entry['source_run']})")
        record.cache_row = {
            "node": spec.node, "input_hash": ctx.cache_key(record.input_hash),
            "output_hash": record.output_hash,
            "outputs": refs_json(record.outputs),
            "meta": json.dumps({"hashes": record.output_field_hashes, "files": record.files,
                                **({"kept": record.kept} if record.kept is not None else {}),
                                **({"extra": record.extra} if record.extra else {}),
                                **({"gone": record.gone} if record.gone else {}),
                                **({"env": record.env} if record.env else {}),
                                "fields": record.field_hashes, "units": record.units,
                                **({"endpoint": record.endpoint} if record.endpoint else {})},
                               sort_keys=True, separators=(",", ":")),
            "shape_hash": ctx.cache_key(shape_hash(spec, record)),
            "prompt_tokens": record.prompt_tokens,
            "completion_tokens": record.completion_tokens,
            "tokens": record.prompt_tokens + record.completion_tokens,
            "cached_at": time.time(), "hits": 0, "determinism": policy.determinism,
            "source_run": ctx.run_id, "_keep_existing": keeps_first_output(policy, expired) and not refused,
        }
