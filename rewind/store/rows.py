"""Row conventions: how a step row, a state row and a content-addressed doc are spelled.

Pure functions over plain dicts (no SQL, no connection): the store writes and reads rows with
them, gc and export follow references with them, the engine builds its rows with them.

- A step row may be a *pointer* (`is_pointer`): an inherited step stored as (run_id, idx, node,
  occurrence, status) only; the rest is its run's parent's step `idx` (`inherit_row`).
- `state_app_id` NULL means the row's own run (`row_state_app`); `reason` NULL means the
  default for its status (`default_reason`); an inherited row's `input_hash` is in its doc.
- A state row holds the hash of its {field: blob hash} doc: {DOC_KEY: hash, <Burr's keys>}, or
  for the common row saved after a step just {STEP_DOC_KEY: hash} (its __PRIOR_STEP and
  __SEQUENCE_ID are the row's columns). Rows of the first layout hold {REFS_KEY: {...}} inline.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from . import serde
from ..keys import canonical_hash, canonical_json, sha256_hex

PARTITION_KEY = "rewind"
REFS_KEY = "__rewind_refs__"
DOC_KEY = "__rw"
STEP_DOC_KEY = "__rws"
PRIOR_STEP_KEY, SEQUENCE_ID_KEY = "__PRIOR_STEP", "__SEQUENCE_ID"
# What a step row keeps in its doc instead of in columns: a cached step and its parent's step
# share one doc, so a no-edit fork adds no copy of them.
STEP_DOC_FIELDS = ("field_hashes", "params", "inputs", "outputs", "output_hash", "input_hash")


# --- step rows ----------------------------------------------------------------------------------
def default_reason(status: str, source_run: Optional[str], parent_id: Optional[str]) -> Optional[str]:
    """The reason a cached or inherited step gets unless something more is said."""
    if status == "cached":
        return f"cache hit: same inputs as run {source_run}" if source_run else "cache hit"
    if status == "inherited" and parent_id:
        return f"inherited from run {parent_id}"
    return None


def is_pointer(row: dict) -> bool:
    """An inherited step stored as a pointer to its run's parent's step of the same idx. A fork
    adds no copies of the steps it inherits; gc turns pointers into full rows before it purges
    the parent."""
    return (row["status"] == "inherited" and row.get("doc") is None
            and row.get("field_hashes") is None and row.get("input_hash") is None)


def pointer_row(parent_row: dict, run_id: str, idx: int) -> dict:
    return {"run_id": run_id, "idx": idx, "node": parent_row["node"],
            "occurrence": parent_row["occurrence"], "status": "inherited", "prompt_tokens": 0,
            "completion_tokens": 0, "tokens": 0, "tokens_saved": 0, "latency_ms": 0.0}


def inherit_row(parent_row: dict, run_id: str, idx: int) -> dict:
    """Step `idx` of a fork as inherited from its parent's step row (resolved)."""
    p = parent_row
    return {
        **p, "run_id": run_id, "idx": idx, "status": "inherited", "prompt_tokens": 0,
        "completion_tokens": 0, "tokens": 0, "tokens_saved": 0, "latency_ms": 0.0,
        "reason": None, "error": None,  # NULL: the default reason, naming the run's parent
        "source_run": p["run_id"] if p["status"] != "inherited" else p["source_run"],
        "state_app_id": row_state_app(p),
        # in the doc it shares with the parent's row (a first-layout row has no doc)
        "input_hash": None if p.get("doc") else p["input_hash"],
    }


def row_state_app(row: dict) -> Optional[str]:
    """The app id of the saved state a step row points at (NULL in the row means its run)."""
    if row.get("sequence_id") is None:
        return row.get("state_app_id")
    return row.get("state_app_id") or row.get("run_id")


# --- docs and refs ------------------------------------------------------------------------------
def refs_json(refs: dict) -> str:
    return json.dumps(refs, sort_keys=True, separators=(",", ":"))


def make_doc(doc: dict) -> tuple:
    """(hash, bytes) of a content-addressed document (plain JSON data): its canonical JSON,
    stored as a blob, so reading it verifies it by its raw digest."""
    data = canonical_json(doc)
    return sha256_hex(data), data


# A refs map ({field: blob hash}) may say a step removed a field: a null hash.


def parse_refs(text: Any) -> dict:
    """{field: blob hash} from a refs column (JSON text, bytes or an already-parsed dict)."""
    if not text:
        return {}
    if isinstance(text, memoryview):
        text = bytes(text)
    data = json.loads(text) if isinstance(text, (str, bytes, bytearray)) else text
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def state_doc(raw: Any) -> dict:
    """A burr_state `state` column as a dict (TEXT on SQLite, JSONB on PostgreSQL)."""
    if isinstance(raw, memoryview):
        raw = bytes(raw)
    if isinstance(raw, (str, bytes, bytearray)):
        raw = json.loads(raw)
    return raw if isinstance(raw, dict) else {}


def state_inline_refs(raw: Any) -> dict:
    """The inline refs of a first-layout state row ({} for a row that holds a doc hash)."""
    refs = state_doc(raw).get(REFS_KEY) or {}
    return {k: v for k, v in refs.items() if isinstance(v, str)} if isinstance(refs, dict) else {}


def state_doc_hash(raw: Any) -> Optional[str]:
    doc = state_doc(raw)
    h = doc.get(DOC_KEY) or doc.get(STEP_DOC_KEY)
    return h if isinstance(h, str) else None


def doc_refs(doc: Any) -> set:
    """Blob hashes a content-addressed doc refers to: a state doc is {field: hash}; a step doc
    holds {field: hash} maps under "inputs" and "outputs"."""
    if not isinstance(doc, dict):
        return set()
    if "inputs" in doc or "outputs" in doc or "field_hashes" in doc:
        out = set()
        for key in ("inputs", "outputs"):
            refs = doc.get(key)
            if isinstance(refs, dict):
                out.update(v for v in refs.values() if isinstance(v, str))
        return out
    return {v for v in doc.values() if isinstance(v, str)}


def blob_ok(h: str, data: Any) -> bool:
    """Do stored bytes still match their hash? Most values are stored as their canonical JSON,
    so the raw digest usually settles it; otherwise decode and re-hash. Bytes that no longer
    decode at all (truncated, overwritten) are as corrupt as a wrong value."""
    data = bytes(data)
    if sha256_hex(data) == h:
        return True
    try:
        return canonical_hash(serde.decode(data)) == h
    except Exception:
        return False
