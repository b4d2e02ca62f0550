"""A fork plan: before anything runs or is paid for, which steps of a fork will re-run and why,
which stay cached, which side effects would be skipped, and what it should cost.

The fork node's key is computed exactly (its recorded inputs with the edit, its params with the
overrides, its code as it is now). Downstream, a step that reads a field an upstream re-run
writes *may* re-run (its new inputs are only known once the upstream step has run); a step
whose code changed since it was recorded re-runs; the rest are expected from the cache. The
estimate charges each step that will or may re-run its recorded cost, so it errs high.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

from ..model import chat as llm
from ..keys import SIDE_EFFECT
from ..costs import price_table, step_cost, step_dollars
from ..errors import InvalidRequest, NotFound
from ..models import RunStatus, StepStatus, normalize_overrides, overrides_at
from ..store import serde
from .context import cache_key
from .fork import _check_request, load_steps
from ..keys import code_fingerprint
from ..keys import changed_fields, is_expired
from .keys import code_of, node_spec, recorded_overrides
from .replay import OTHER_ENDPOINT, change_named, parsed_entry, what_changed

RERUN = "re-run"
MAY_RERUN = "may re-run"
CACHED = "cached"
DRY_RUN = "dry-run"
INHERITED = "inherited"

# an edit larger than this (characters of JSON) needs an explicit confirmation
EDIT_CONFIRM_CHARS = 20_000


# what an edit adds to a field a re-run node reads reaches its prompt: ~4 characters a token,
# counted low (3) so that the estimate errs high
CHARS_PER_TOKEN = 3


def confirm_tokens() -> Optional[int]:
    """`REWIND_CONFIRM_TOKENS`: a plan estimated above it needs an explicit confirmation."""
    raw = os.environ.get("REWIND_CONFIRM_TOKENS", "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidRequest(f"REWIND_CONFIRM_TOKENS must be a whole number of tokens (0 or more), "
                             f"not {raw[:40]!r}; unset it to never ask", field="REWIND_CONFIRM_TOKENS")
    return value


def _chars(value: Any) -> int:
    return len(value) if isinstance(value, str) else len(json.dumps(value, default=str))


def _stored(store: Any, refs: dict) -> dict:
    """{field: (size as stored, location or None)} of recorded values, from their rows."""
    info = getattr(store, "field_blob_info", None)
    return info(refs) if info is not None and refs else {}


def edit_growth(step: Any, spec: Any, edit: dict, store: Any = None) -> int:
    """Tokens an edit adds to what `step`'s node reads: how much each edited field it reads
    grew (none for a field that shrank), over `CHARS_PER_TOKEN`. In characters; for a recorded
    value in an object store (a plan fetches no object), in bytes of the stored encoding
    against the edit's own encoding: at least its characters, so the estimate still errs high."""
    grown = 0
    fields = [f for f in edit if f in spec.reads]
    elsewhere = {f: size for f, (size, where) in
                 _stored(store, {f: (step.input_refs or {}).get(f) for f in fields}).items()
                 if where is not None}
    for field in fields:
        try:
            if field in elsewhere:
                before, after = elsewhere[field], len(serde.encode(edit[field], field))
            else:
                before = _chars(step.load_inputs([field]).get(field, ""))
                after = _chars(edit[field])
        except Exception:  # its recorded value purged: the whole new value counts
            before, after = 0, _chars(edit[field])
        grown += max(after - before, 0)
    return -(-grown // CHARS_PER_TOKEN)


def recorded_parts(store: Any, spec: Any, step: Any, edit: dict) -> dict:
    """{field: its key parts as recorded} for the unedited fields whose values live in an
    object store: a plan keys the fork node with these hashes instead of fetching the values
    (the hash of a value is the hash of those bytes; the key parts are those of the recording).
    A field the node's `ignore` drops whole has no part (nor is it loaded). Every value is
    loaded and hashed when the recording names user classes (a class's code is keyed as it is
    now); so is a field `ignore` strips parts of now, or whose recorded hash was of a stripped
    value (its recorded hash is then neither its stored address nor beside a `form:`)."""
    recorded = step.field_hashes or {}
    if any(k.startswith("class:") for k in recorded):
        return {}
    ignore = spec.policy.ignore or ()
    refs = {k: r for k, r in (step.input_refs or {}).items()
            if k not in edit and isinstance(r, str)}
    stored = _stored(store, refs)
    out = {}
    for k, r in refs.items():
        if stored.get(k, (0, None))[1] is None:
            continue  # inline: cheap to read, hashed as it is
        if k in ignore:
            out[k] = {}  # not part of the key at all
            continue
        part, form = ("read:" if k in spec.reads else "prior:") + k, "form:" + k
        whole = recorded.get(form) == r or (form not in recorded and recorded.get(part) == r)
        if part in recorded and whole and not any(n.startswith(k + ".") for n in ignore):
            out[k] = {p: recorded[p] for p in (part, form) if p in recorded}
    return out


@dataclasses.dataclass
class PlanRow:
    node: str
    occurrence: int
    verdict: str                 # re-run | may re-run | cached | dry-run | inherited
    reason: str
    est_tokens: int = 0
    est_dollars: Optional[float] = 0.0


@dataclasses.dataclass
class ForkPlan:
    run_id: str
    at: str
    occurrence: int
    rows: list
    est_tokens: int
    est_dollars: Optional[float]
    edit_chars: int
    confirm_reasons: list        # why the fork needs an explicit confirmation (empty: it does not)

    @property
    def needs_confirmation(self) -> bool:
        return bool(self.confirm_reasons)

    def nodes(self, verdict: str) -> list:
        return [r.node for r in self.rows if r.verdict == verdict]


def plan_fork(store: Any, pipeline: Any, parent_row: dict, at: str, *, edit: Optional[dict] = None,
              params: Optional[dict] = None, inputs: Optional[dict] = None,
              occurrence: int = 1, allow_side_effects: bool = False) -> ForkPlan:
    """The plan of `fork(parent, at, edit, params)`; writes nothing, calls no node."""
    edit, params = dict(edit or {}), dict(params or {})
    _check_request(pipeline, at, edit, params, occurrence)
    steps = load_steps(store, parent_row)
    visits = [i for i, s in enumerate(steps) if s.node == at]
    if len(visits) >= occurrence:
        index = visits[occurrence - 1]
    elif parent_row["status"] in (RunStatus.FAILED, RunStatus.INTERRUPTED, RunStatus.HALTED) \
            and occurrence == len(visits) + 1:
        index = len(steps)
    else:
        raise NotFound(f"node {at!r} ran {len(visits)} time(s) in run {parent_row['id']}; there is "
                       f"no occurrence {occurrence} to plan a fork at", run_id=parent_row["id"], node=at)
    overrides = normalize_overrides(json.loads(parent_row["params_json"]) if parent_row["params_json"] else {})
    if params:
        overrides.setdefault(at, []).append([occurrence, dict(params)])
    prices = price_table()
    rows, changed = [], set()
    for i, s in enumerate(steps):
        if i < index:
            rows.append(PlanRow(s.node, s.occurrence, INHERITED, f"inherited from run {parent_row['id']}"))
            continue
        action = pipeline.action(s.node)
        spec = node_spec(s.node, action, {**recorded_overrides(action, s.params),
                                          **overrides_at(overrides, s.node, s.occurrence)})
        verdict, reason = _verdict(store, spec, s, i == index, edit, inputs, changed,
                                   allow_side_effects, parent_row.get("owner"))
        row = PlanRow(s.node, s.occurrence, verdict, reason)
        if verdict in (RERUN, MAY_RERUN):
            changed.update(spec.writes)
            cost = step_cost(s)  # a step that spent tokens puts the edit in its prompt
            row.est_tokens = cost + (edit_growth(s, spec, edit, store) if cost else 0)
            row.est_dollars = step_dollars(s, prices)
        rows.append(row)
    est = sum(r.est_tokens for r in rows)
    dollars: Optional[float] = 0.0
    for r in rows:
        dollars = None if r.est_dollars is None or dollars is None else dollars + r.est_dollars
    edit_chars = sum(_chars(v) for v in edit.values())  # as typed: a text by its own length
    reasons = []
    if edit_chars > EDIT_CONFIRM_CHARS:
        reasons.append(f"the edit is {edit_chars:,} characters (over {EDIT_CONFIRM_CHARS:,})")
    limit = confirm_tokens()
    if limit is not None and est > limit:
        reasons.append(f"it is estimated at {est:,} tokens (over REWIND_CONFIRM_TOKENS={limit:,})")
    return ForkPlan(parent_row["id"], at, occurrence, rows, est, dollars, edit_chars, reasons)


def _verdict(store: Any, spec: Any, step: Any, is_fork_node: bool, edit: dict,
             inputs: Optional[dict], changed: set, allow_side_effects: bool,
             owner: Optional[str]) -> tuple:
    if spec.policy.determinism == SIDE_EFFECT and not allow_side_effects:
        return DRY_RUN, "side effect: not performed on a fork (allow_side_effects=True performs it)"
    code_now = code_fingerprint(code_of(spec.inner), spec.policy.version)
    if is_fork_node:
        kept = recorded_parts(store, spec, step, edit)
        try:
            rest = [k for k in (step.input_refs or {}) if k not in kept and k not in edit]
            readable = {**step.load_inputs(rest), **edit}
            runtime = {**step.runtime_inputs, **(inputs or {})}
        except Exception as e:  # recorded values purged: it must run again
            return RERUN, f"its recorded inputs are unavailable ({e})"
        refs = {k: r for k, r in (step.input_refs or {}).items() if k not in edit}
        fields = spec.field_hashes(readable, None, runtime, refs=refs)
        for parts in kept.values():
            fields.update(parts)
        if spec.input_hash(fields) != step.input_hash:
            parts = changed_fields(step.field_hashes or {}, fields, step.units, spec.units)
            return RERUN, "; ".join(parts) or "its inputs changed"
    else:
        touched = sorted(f for f in changed if f in spec.reads or f in spec.writes)
        if touched:
            return MAY_RERUN, ("re-runs if " + ", ".join(f"`{f}`" for f in touched)
                               + (" comes" if len(touched) == 1 else " come") + " out different")
        if (step.field_hashes or {}).get("code") not in (None, code_now):
            return RERUN, "; ".join(changed_fields(step.field_hashes, {**step.field_hashes,
                                                                        "code": code_now},
                                                   step.units, spec.units))
    if step.status == StepStatus.FAILED:
        return RERUN, "it failed in the parent (failures are never cached)"
    if spec.policy.cacheable and step.input_hash:
        entry = store.cache_get(step.node, cache_key(owner, step.input_hash))
        if entry is None:
            return RERUN, "no cache entry for its inputs (purged or never stored)"
        if is_expired(spec.policy, entry):
            return RERUN, f"its cache entry is older than its ttl ({spec.policy.ttl:g}s)"
        files, env, elsewhere = what_changed(parsed_entry(entry)[1], llm.endpoint_identity)
        if files or env:  # as the replay will find: what the key does not hold changed
            return RERUN, change_named(files, env)
        if elsewhere:
            return RERUN, OTHER_ENDPOINT
    if spec.policy.determinism == SIDE_EFFECT:
        return RERUN, "side effect performed again: allow_side_effects=True"
    return CACHED, "same inputs: served from the cache"
