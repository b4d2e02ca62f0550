"""Steps as records: Burr's post-run-step hook turns each visit into a `nodes` row and a `Step`,
and stored rows are read back into `Step`s.

What a step shares with the step it was cached from (field hashes, params, refs, hashes) goes
into one content-addressed doc, so a no-edit fork re-uses its parent's docs instead of copying.
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional

from burr.lifecycle import PostRunStepHook

from ..models import Step, StepStatus
from ..store import default_reason, row_state_app
from .context import ExecutionContext, StepRecord


class StepRecorder(PostRunStepHook):
    """Burr's post-run-step hook: turns the wrapper's `StepRecord` into a row and a `Step`."""

    def __init__(self, ctx: ExecutionContext):
        self.ctx = ctx

    def post_run_step(self, *, app_id, partition_key, sequence_id, state, action, result,
                      exception, **future_kwargs):
        ctx = self.ctx
        record, ctx.current = ctx.current, None
        if record is None or record.node != action.name:  # Burr failed before our wrapper ran
            record = StepRecord(node=action.name, occurrence=ctx.occurrences[action.name],
                                started_at=time.time())
        if exception is not None:
            if record.status != StepStatus.FAILED:
                record.fail(f"{type(exception).__name__}: {exception}")
                ctx.last_error = f"{action.name}: {record.error}"
            record.outputs, record.output_hash, record.cache_row = {}, None, None
        record_step(ctx, record, sequence_id, app_id)


def record_step(ctx: ExecutionContext, record: StepRecord, sequence_id: Optional[int],
                app_id: Optional[str]) -> Step:
    """Queue the row (and cache entry) of a visit; the `Step` is reported once committed."""
    status = record.status
    tokens = 0 if status in (StepStatus.CACHED, StepStatus.DRY_RUN) else (
        record.prompt_tokens + record.completion_tokens)
    idx = len(ctx.steps)
    outputs = record.outputs or {}

    def doc_fields() -> dict:  # built only for a doc this process has not made before
        doc = {
            "field_hashes": record.field_hashes, "params": record.params_doc,
            "inputs": record.inputs, "outputs": outputs, "output_hash": record.output_hash,
            "input_hash": record.input_hash,
        }
        for name, value in (("runtime", record.runtime), ("units", record.units),
                            ("files", record.files), ("calls", record.calls),  # the step view's
                            ("tools", record.tools)):
            if value:
                doc[name] = value
        return doc

    doc_hash, doc_data = ctx.store.memo_doc(
        ("step", tuple(record.field_hashes.items()), tuple(record.inputs.items()),
         tuple(outputs.items()), record.output_hash, record.input_hash, record.params_json,
         tuple(record.runtime.items()), tuple(record.units.items()), tuple(record.files.items()),
         json.dumps([record.calls, record.tools], sort_keys=True, default=str)
         if record.calls or record.tools else None),
        doc_fields,
    )
    if doc_hash not in ctx.new_blobs:
        ctx.new_blobs[doc_hash] = doc_data
    reason = record.reason
    if reason == default_reason(status, record.source_run, ctx.parent_id):
        reason = None  # NULL: the default reason (see store.default_reason)
    row = {
        "run_id": ctx.run_id, "idx": idx, "node": record.node, "occurrence": record.occurrence,
        "status": str(status), "sequence_id": sequence_id,
        "state_app_id": None if app_id == ctx.run_id else app_id,
        "input_hash": record.input_hash, "doc": doc_hash,
        "prompt_tokens": record.prompt_tokens, "completion_tokens": record.completion_tokens,
        "tokens": tokens, "tokens_saved": record.tokens_saved, "latency_ms": record.latency_ms,
        "reason": reason, "error": record.error, "started_at": record.started_at,
        "source_run": record.source_run,
        # a performed side effect is committed at once: its record must survive a crash
        "_durable": status == StepStatus.EXECUTED and record.side_effect,
    }
    ctx.pending_rows.append(row)
    if record.cache_row is not None:
        ctx.pending_cache.append(record.cache_row)
    step = Step.built(
        node=record.node, status=status, input_hash=record.input_hash,
        output_hash=record.output_hash, tokens=tokens, latency_ms=float(record.latency_ms or 0),
        params=dict(record.params_doc), reason=record.reason or "", error=record.error,
        occurrence=int(record.occurrence), index=idx, prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens, tokens_saved=record.tokens_saved,
        # the record's own containers are the step's; those it shares with the node's spec
        # (params, units) and with the row's doc (outputs) are copied
        field_hashes=record.field_hashes, sequence_id=sequence_id, state_app_id=app_id,
        run_id=ctx.run_id, source_run=record.source_run, started_at=record.started_at,
        input_refs=record.inputs, output_refs=dict(outputs),
        runtime_refs=record.runtime, units=dict(record.units), files=record.files,
        calls=record.calls, tools=record.tools,
        _loader=ctx.store.values, _sizer=getattr(ctx.store, "field_blob_info", None),
    )
    ctx.steps.append(step)
    ctx.unreported.append(step)  # reported to on_step once the commit holding it is done
    return step


# --- reading stored steps -------------------------------------------------------------------

def _col(value: Any) -> Any:
    if isinstance(value, memoryview):
        value = bytes(value)
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def step_from_row(row: dict, store: Any, docs: Optional[dict] = None,
                  parent_id: Optional[str] = None) -> Step:
    """A `Step` from a `nodes` row; its doc is read from `docs` ({hash: doc}) or the store. A
    column that is set (a row of the first layout) wins over the doc. `parent_id` (the run's
    parent) spells the default reason of an inherited step."""
    h = row.get("doc")
    doc: dict = {}
    if h:
        doc = docs[h] if docs is not None and h in docs else store.get_docs([h])[h]

    def field(name: str) -> Any:
        value = row.get(name)
        return _col(value) if value is not None else dict(doc.get(name) or {})

    reason = row["reason"]
    if reason is None:
        reason = default_reason(row["status"], row["source_run"], parent_id) or ""
    return Step(
        node=row["node"], status=row["status"],
        input_hash=row["input_hash"] if row["input_hash"] is not None else doc.get("input_hash"),
        output_hash=row["output_hash"] if row.get("output_hash") is not None else doc.get("output_hash"),
        tokens=int(row["tokens"] or 0), latency_ms=float(row["latency_ms"] or 0),
        params=field("params"), reason=reason, error=row["error"],
        occurrence=int(row["occurrence"]), index=int(row["idx"]),
        prompt_tokens=int(row["prompt_tokens"] or 0),
        completion_tokens=int(row["completion_tokens"] or 0),
        tokens_saved=int(row["tokens_saved"] or 0), field_hashes=field("field_hashes"),
        sequence_id=row["sequence_id"], state_app_id=row_state_app(row), run_id=row["run_id"],
        source_run=row["source_run"], started_at=row["started_at"],
        input_refs=field("inputs"), output_refs=field("outputs"),
        runtime_refs=dict(doc.get("runtime") or {}), units=dict(doc.get("units") or {}),
        files=dict(doc.get("files") or {}), calls=list(doc.get("calls") or []),
        tools=list(doc.get("tools") or []),
        _loader=store.values, _sizer=getattr(store, "field_blob_info", None),
    )


def steps_from_rows(rows: list, store: Any, parent_id: Optional[str] = None) -> list:
    """`Step`s of one run's `nodes` rows, their docs read in one query."""
    docs = store.get_docs([r.get("doc") for r in rows]) if rows else {}
    return [step_from_row(r, store, docs, parent_id) for r in rows]
