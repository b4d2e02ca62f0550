"""The state of one run, fork or resume while Burr drives it: what is known, what is pending.

`ExecutionContext` holds the per-field hashes of the live state, the write buffer (blobs, step
rows, state rows, cache entries, hit counts, alarms) and when to commit it. The buffer is only
cleared once its commit succeeded: a failed commit leaves everything queued for the next try,
so no committed row can point at a blob that was never written.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import json
import logging
import time
from typing import Any, Callable, Optional

from ..model import chat as llm
from ..store import serde
from ..keys import runtime_input_names
from ..errors import CommitError, ObjectStoreError, ReadOnlyError, RewindError, StoreError
from ..keys import canonical_parts, combine, is_internal_key, sha256_hex
from ..models import Step, StepStatus, normalize_overrides, overrides_at
from ..redaction import redact
from . import burr_compat
from .keys import NodeSpec, node_spec

logger = logging.getLogger("rewind")
_IMMUTABLE = (str, int, float, bool, type(None))

# The execution Burr is driving in this thread: the wrapped graph of a pipeline is built once
# and shared, so its actions look their execution up here.
CURRENT: contextvars.ContextVar = contextvars.ContextVar("rewind_execution", default=None)


_UNASKED = object()  # StepRecord.earlier before the lookup


@dataclasses.dataclass
class StepRecord:
    """What the replay wrapper learned about one visit, for the recorder to turn into a row."""

    node: str
    occurrence: int
    started_at: float
    input_hash: Optional[str] = None
    field_hashes: dict = dataclasses.field(default_factory=dict)
    params_doc: dict = dataclasses.field(default_factory=dict)
    params_json: str = "{}"
    inputs: dict = dataclasses.field(default_factory=dict)      # read field -> blob hash
    runtime: dict = dataclasses.field(default_factory=dict)     # runtime input -> blob hash
    status: str = StepStatus.EXECUTED
    reason: str = ""
    error: Optional[str] = None
    outputs: Optional[dict] = None                              # written field -> blob hash
    output_hash: Optional[str] = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_saved: int = 0
    source_run: Optional[str] = None
    latency_ms: float = 0.0
    side_effect: bool = False
    cache_row: Optional[dict] = None
    readable: dict = dataclasses.field(default_factory=dict, repr=False)  # values, not stored
    units: dict = dataclasses.field(default_factory=dict)    # code unit -> hash
    files: dict = dataclasses.field(default_factory=dict)    # file read -> content hash
    files_changed: list = dataclasses.field(default_factory=list)  # why a hit was refused
    env: dict = dataclasses.field(default_factory=dict)      # environment variable read -> value hash
    env_changed: list = dataclasses.field(default_factory=list)  # (envwatch) why a hit was refused
    output_field_hashes: dict = dataclasses.field(default_factory=dict)
    calls: list = dataclasses.field(default_factory=list)    # model calls (ModelCall dicts)
    tools: list = dataclasses.field(default_factory=list)    # rewind.tool calls
    endpoint: Optional[str] = None   # the model endpoint its calls went to (llm.endpoint_identity)
    integrity_note: Optional[str] = None   # why a cache entry was unusable
    deleted: list = dataclasses.field(default_factory=list)  # fields a served step removes
    kept: Optional[list] = None  # the fields a `wipe(keep=)` kept (NodeResult.kept)
    extra: list = dataclasses.field(default_factory=list)  # fields set, undeclared (NodeResult.extra)
    gone: list = dataclasses.field(default_factory=list)  # deleted by name outside the view (NodeResult.gone)
    shape_hash: Optional[str] = None  # its key without the code (replay.shape_hash)
    # the newest cache entry with the same inputs under other code, if already looked up
    earlier: Any = dataclasses.field(default=_UNASKED, repr=False)

    def writes(self, action: Any) -> list:
        """The fields this visit sets in the state: the declared ones, then any it set undeclared."""
        return list(action.writes) + self.extra if self.extra else action.writes

    def fail(self, error: str) -> None:
        self.status, self.error = StepStatus.FAILED, redact(error)  # it may echo a key
        self.outputs, self.output_hash, self.cache_row = {}, None, None


def cache_key(owner: Optional[str], input_hash: Optional[str]) -> Optional[str]:
    if owner is None or input_hash is None:
        return input_hash
    return combine({"owner": owner, "input_hash": input_hash})


def _costly(row: dict) -> bool:
    """A queued step row that must be durable at once: a failure, a performed side effect,
    an executed step that spent tokens or took 20 ms."""
    return row["status"] == StepStatus.FAILED or bool(row.get("_durable")) or (
        row["status"] == StepStatus.EXECUTED
        and bool(row["tokens"] or (row["latency_ms"] or 0) >= 20))


class ExecutionContext:
    """Everything one run, fork or resume needs while Burr drives it."""

    def __init__(
        self,
        store: Any,
        run_id: str,
        pipeline: Any,
        use_cache: bool = True,
        dry_run_side_effects: bool = False,
        allow_side_effects: bool = False,
        param_overrides: Optional[dict] = None,
        parent_steps: Optional[dict] = None,
        parent_id: Optional[str] = None,
        prior_steps: Optional[list] = None,
        on_step: Optional[Callable[[Step], None]] = None,
        inputs: Optional[dict] = None,
        owner: Optional[str] = None,
        resample: Any = (),
    ):
        self.store = store
        # nodes re-sampled (a blame trial): executed afresh, neither their node cache nor their
        # model calls served, however unchanged their inputs
        self.resample = frozenset(resample or ())
        self.owner = owner
        self.run_id = run_id
        self.pipeline = pipeline
        self.use_cache = use_cache
        self.dry_run_side_effects = dry_run_side_effects
        self.allow_side_effects = allow_side_effects
        self.param_overrides = normalize_overrides(param_overrides)
        self.inputs = dict(inputs or {})          # runtime inputs for every step (run, resume)
        self.replay_inputs: dict = {}             # (node, occurrence) -> recorded inputs (fork)
        # the calls this execution replays or records (`turns`): None for a run recorded
        # before turns were; a fork's later turns, their inputs, and the one it is in
        self.turns: Optional[list] = None
        self.later_turns: list = []
        self.turn_inputs: Optional[list] = None
        self.turn = 0
        self.turns_moved = False  # a later turn began after the row recorded `turns`
        # edits made by ancestor forks at visits this execution has yet to reach
        self.replay_edits: dict = {}
        self.parent_steps = parent_steps or {}
        self.parent_id = parent_id
        self.steps: list = list(prior_steps or [])
        self.occurrences = collections.Counter(s.node for s in self.steps)
        self.on_step = on_step
        self.state_hashes: dict = {}   # field -> canonical hash of its live value (keys)
        self.state_classes: dict = {}  # field -> (its live value, the user classes it holds)
        self.state_blobs: dict = {}    # field -> address of its stored value (refs)
        self._internal_blobs = False   # whether state_blobs holds a Burr-style `__` key
        self.new_blobs: dict = {}
        self.pending_rows: list = []
        self.pending_cache: list = []
        self.pending_alarms: list = []
        self.pending_hits: list = []
        self.pending_states: list = []
        self._scanned, self._costly = 0, False  # pending rows must_commit looked at; any costly
        self.unreported: list = []
        self.served: dict = {}  # blob hash -> value served from storage (see flush_pending)
        self.written_values: dict = {}  # blob hash -> immutable value queued (kept decoded)
        self.cache_prefetch: dict = {}  # (node, input_hash) -> cache entry read ahead by a fork
        self.pending_run: Optional[dict] = None  # a fork's run row, written with its first commit
        self.run_row: Optional[dict] = None  # the run row as written, to return the Run from
        self._last_commit = time.monotonic()
        self._heartbeat_written = time.time()  # the run row is inserted with heartbeat_at = now
        self.current: Optional[StepRecord] = None
        self.decided: Any = None  # a replay.Visit the stepper decided, for Burr's step to run
        self.last_error: Optional[str] = None
        self._specs: dict = {}
        self._endpoint: Optional[str] = None

    # state hashes ----------------------------------------------------------------------------
    def absorb(self, values: dict) -> None:
        """Hash (for keys) and store (type-preserving, under its own address) values entering
        the state from outside a step."""
        parts = canonical_parts(values)
        for k, part in parts.items():
            h = self.state_hashes[k] = sha256_hex(part)
            self.store.learn_ref_hash(self.store_value(k, values[k]), h)

    def store_value(self, field: str, value: Any) -> str:
        """Queue a field's value as a blob; its address is the hash of its stored bytes, so
        values that hash alike (a tuple and a list, 1 and 1.0) keep their own types."""
        data = serde.encode(value, field)
        ref = serde.blob_ref(data)
        self.state_blobs[field] = ref
        if is_internal_key(field):
            self._internal_blobs = True
        if ref not in self.new_blobs:
            self.new_blobs[ref] = data
            if type(value) in _IMMUTABLE:
                self.written_values[ref] = value
        return ref

    def refs_of(self, values: dict) -> dict:
        """{field: blob address} of values in the live state, storing the ones not seen yet.
        The live state's addresses are kept as steps write fields, so this costs set
        operations on the keys, not a walk over the values."""
        blobs = self.state_blobs
        for k in values.keys() - blobs.keys():
            if not is_internal_key(k):
                self.store_value(k, values[k])
        if not self._internal_blobs and blobs.keys() <= values.keys():
            return dict(blobs)  # the whole live state (the persister's save of a step)
        return {k: blobs[k] for k in values if k in blobs and not is_internal_key(k)}

    state_refs = refs_of  # the persister's name for it

    @staticmethod
    def state_values(state: Any) -> dict:
        """A Burr `State`'s values for the persister to read (not a copy: never mutated)."""
        return burr_compat.state_values(state)

    def loaded(self, refs: dict) -> None:
        """The live state now holds the stored values at `refs` (a fork's or a resume's start,
        a cache hit): their addresses are known; their key hashes are computed when read."""
        known = self.store.ref_hash
        for k, ref in refs.items():
            h = known(ref)  # a value this process hashed before keeps its hash
            if h is None:
                self.state_hashes.pop(k, None)
            else:
                self.state_hashes[k] = h
            if ref is None:
                self.state_blobs.pop(k, None)
            else:
                self.state_blobs[k] = ref

    def blob_refs(self, values: dict, path: str) -> dict:
        """{name: blob hash} of runtime inputs, queued as blobs. An input with no stored form
        (a client object) is keyed by `param_hash` but not stored: a fork must be given it."""
        refs = {}
        for k, v in values.items():
            try:
                data = serde.encode(v, k)
            except Exception:
                continue
            refs[k] = serde.blob_ref(data)
            self.new_blobs.setdefault(refs[k], data)
        return refs


    # runtime inputs --------------------------------------------------------------------------
    def inputs_for(self, node: str, occurrence: int) -> dict:
        """The runtime inputs to give Burr for this visit: a fork's recorded ones, else the
        run's; a lineage's param change that names a runtime input overrides it."""
        inputs = self.given_inputs(node, occurrence)
        action = self.pipeline.actions.get(node)
        if action is not None and self.param_overrides.get(node):
            names = runtime_input_names(action) | set(inputs)
            inputs.update({k: v for k, v in overrides_at(self.param_overrides, node, occurrence).items()
                           if k in names})
        return inputs

    def next_turn(self) -> Any:
        """Begin the next recorded turn of a fork (the last one halted); its halts."""
        turn = self.later_turns.pop(0).moved_to(len(self.steps))
        self.turns.append(turn)
        self.turn += 1
        self.turns_moved = True
        return turn.halts

    def given_inputs(self, node: str, occurrence: int) -> dict:
        """The inputs this visit was given. In a fork of a run with recorded turns: those of the
        turn it is in, as Burr hands every step of a call the same inputs. Else recorded by
        visit; for a visit the parent never made (an edit made a loop go round more often),
        those of the node's latest earlier visit; else the run's."""
        if self.turn_inputs is not None:
            given = self.replay_inputs.get((node, occurrence))
            if given is None:
                given = self.turn_inputs[self.turn] if self.turn < len(self.turn_inputs) else {}
            action = self.pipeline.actions.get(node)
            return dict(given) if action is None else burr_compat.declared_inputs(action, given)
        recorded = self.replay_inputs.get((node, occurrence))
        if recorded is None and self.replay_inputs:
            earlier = [o for n, o in self.replay_inputs if n == node and o < occurrence]
            if earlier:
                recorded = self.replay_inputs[(node, max(earlier))]
        return dict(recorded) if recorded is not None else dict(self.inputs)

    # the write buffer ------------------------------------------------------------------------
    def flush_pending(self, store: Any) -> None:
        """Write queued rows inside the caller's transaction. The queues are emptied only by
        `_clear_pending`, after the commit, so a failed commit loses nothing."""
        if self.pending_run is not None:
            store.insert_run(self.pending_run)
        if self.new_blobs or self.served:
            # A blob read before this transaction (a cache hit, often from memory) may have been
            # purged by a concurrent gc since: put_blobs checks it is there (with the blobs this
            # store wrote before, in one statement) and stores it again if not.
            store.put_blobs(self.new_blobs, served=self.served)
        if self.pending_rows:  # the store writes the columns a step row has (not "_durable")
            store.insert_nodes(self.pending_rows)
        if self.pending_cache:
            store.cache_put_many([({k: v for k, v in row.items() if not k.startswith("_")},
                                   row.get("_keep_existing", False)) for row in self.pending_cache])
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

    def _clear_pending(self) -> None:
        self.pending_run = None
        self.new_blobs, self.served = {}, {}
        self.pending_rows, self.pending_cache, self.pending_alarms, self.pending_hits = [], [], [], []
        self.pending_states = []
        self._scanned, self._costly = 0, False
        self._last_commit = time.monotonic()

    def commit(self, extra: Optional[Callable[[Any], None]] = None) -> None:
        """Commit `extra(store)` and the buffer in one transaction, then report. A failed
        commit (a lost connection, a lock held too long, a full disk) is retried once on a
        fresh connection; the buffer is cleared only once a commit went through."""
        for attempt in (1, 2):
            written, served = self.new_blobs, self.served
            try:
                with self.store.transaction():
                    if extra is not None:
                        extra(self.store)
                    self.flush_pending(self.store)
                break
            except Exception as e:
                # a refusal (a lease taken, bad data) is not retried; a server that could not
                # be reached is, like any driver error
                refused = isinstance(e, RewindError) and not isinstance(e, StoreError)
                if refused or isinstance(e, (CommitError, ReadOnlyError)):
                    raise
                logger.info("commit of run %s failed (attempt %d): %s", self.run_id, attempt, e)
                self.store.reset_connection()
                if attempt == 2:
                    elsewhere = isinstance(e, ObjectStoreError)  # the database is not at fault
                    raise CommitError(
                        f"could not write run {self.run_id}"
                        f"{'' if elsewhere else ' to ' + str(self.store.url)}: "
                        f"{type(e).__name__}: {e}. Everything committed before is intact; "
                        f"resume the run once the {'object store' if elsewhere else 'database'} "
                        "is reachable", run_id=self.run_id,
                    ) from e
        # committed: what this process wrote is stored and right; never re-sent or re-verified
        self.store.remember_written(written, self.written_values)
        self.store.note_served(served)
        self.written_values = {}
        self._clear_pending()
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
        rows = self.pending_rows
        if self._scanned < len(rows):  # rows are final once queued: look at each once
            self._costly = self._costly or any(_costly(r) for r in rows[self._scanned:])
            self._scanned = len(rows)
        return self._costly

    def settle_before_running(self) -> None:
        """Commit an executed step still riding along before another node runs: that node
        may block for as long as it likes, and a crash meanwhile must not lose a step a resume
        would have to compute again, perhaps differently. (Served visits keep riding: a cache
        hit is reproduced exactly.)"""
        if any(r["status"] == StepStatus.EXECUTED for r in self.pending_rows):
            self.commit()

    def take_decided(self, node: str) -> Any:
        """The visit of `node` the stepper already keyed (then handed to Burr), if any."""
        visit, self.decided = self.decided, None
        return visit if visit is not None and visit.record.node == node else None

    # node specs ------------------------------------------------------------------------------
    def spec(self, node: str, inner: Any, occurrence: int = 1) -> NodeSpec:
        """The node's spec for this visit, with the lineage's param overrides applied."""
        overrides = overrides_at(self.param_overrides, node, occurrence)
        if overrides:  # those naming runtime inputs reach the node as inputs (`inputs_for`)
            names = runtime_input_names(inner) | set(self.given_inputs(node, occurrence))
            overrides = {k: v for k, v in overrides.items() if k not in names}
        key = (node, json.dumps(overrides, sort_keys=True, default=repr)) if overrides else node
        got = self._specs.get(key)
        if got is not None:
            return got
        pipeline_action = self.pipeline.actions.get(node) is inner
        if pipeline_action and not overrides:
            got = self.pipeline.spec(node).refresh_code()  # built once per pipeline
        else:
            defaults = self.pipeline.params(node) if pipeline_action else None
            got = node_spec(node, inner, overrides, defaults)
        self._specs[key] = got
        return got

    def endpoint(self) -> str:
        """The model endpoint in force (`llm.endpoint_identity`), asked once per run of cache
        hits: only a node that executes can change the settings."""
        if self._endpoint is None:
            self._endpoint = llm.endpoint_identity()
        return self._endpoint

    def forget_endpoint(self) -> None:
        self._endpoint = None

    def cache_key(self, input_hash: Optional[str]) -> Optional[str]:
        """Where a visit's cache entry lives: its input hash, in the owner's own namespace when
        runs have owners (a hit never tells one user what another computed, nor that they did)."""
        return cache_key(self.owner, input_hash)

    def parent_step(self, node: str, occurrence: int) -> Optional[Step]:
        return self.parent_steps.get((node, occurrence))
