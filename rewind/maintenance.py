"""Maintenance: garbage collection, and moving runs between databases.

    rw.gc(older_than_days=30)             # old cache entries, old runs, then orphaned blobs
    doc = rw.export_run(run_id)           # the run and its ancestors, self-contained JSON
    Rewind("postgresql://…").import_run(doc)

GC never breaks the lineage of what it keeps: a fork whose parent was purged keeps every row
and blob its own steps refer to (inherited steps are copied rows that reference the parent's
blobs and saved states), so it still renders, diffs and forks at any of its steps; `rw.lineage`
names the purged parent as missing. A run still `running` is never purged.

An export holds run rows (the run and every ancestor still present), their node rows, the Burr
state rows those steps and runs need, the blobs all of them reference (base64, checked against
their hashes), the cache entries of their steps and their pipeline graphs. Import validates the
whole document before writing anything, then writes it in one transaction; importing the same
document twice changes nothing the second time.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import re
import time
from typing import Any, Iterable, Optional

from . import serde
from .errors import IntegrityError, InvalidRequest, NotFound
from .hashing import canonical_hash, sha256_hex
from .models import RUN_STATUSES, STEP_STATUSES
from .store import (
    BURR_TABLE, CACHE_COLUMNS, DOC_KEY, NODE_COLUMNS, PARTITION_KEY, REFS_KEY, RUN_COLUMNS,
    SCHEMA_VERSION, STEP_DOC_KEY, SQLStore, is_pointer, row_state_app,
)

EXPORT_FORMAT = "rewind-run-export"
EXPORT_VERSION = 1
CHUNK = 500
STATE_COLUMNS = ("partition_key", "app_id", "sequence_id", "position", "status", "state")
_HASH = re.compile(r"^[0-9a-f]{64}$")
_INT_MAX = 2**63 - 1


# --- shared helpers ---------------------------------------------------------------------------
def _chunks(items: list, n: int = CHUNK) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _refs(text: Any) -> dict:
    """{field: blob hash} from a refs JSON column (or an already-parsed dict)."""
    if not text:
        return {}
    data = json.loads(text) if isinstance(text, (str, bytes, bytearray, memoryview)) else text
    if isinstance(data, memoryview):
        data = json.loads(bytes(data))
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def _state_doc(raw: Any) -> dict:
    """A burr_state `state` column as a dict (TEXT on SQLite, JSONB on PostgreSQL)."""
    if isinstance(raw, memoryview):
        raw = bytes(raw)
    if isinstance(raw, (str, bytes, bytearray)):
        raw = json.loads(raw)
    return raw if isinstance(raw, dict) else {}


def _state_refs(raw: Any) -> dict:
    """The inline refs of a state row of the first layout ({} for a row that holds a doc hash)."""
    refs = _state_doc(raw).get(REFS_KEY) or {}
    return {k: v for k, v in refs.items() if isinstance(v, str)} if isinstance(refs, dict) else {}


def _state_doc_hash(raw: Any) -> Optional[str]:
    doc = _state_doc(raw)
    h = doc.get(DOC_KEY) or doc.get(STEP_DOC_KEY)
    return h if isinstance(h, str) else None


def _doc_refs(doc: Any) -> set:
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


def _read_docs(store: SQLStore, hashes: Iterable[str]) -> dict:
    """{hash: parsed doc} straight from `blobs` (no verification, no memory kept): what a doc
    refers to must be kept even if the doc itself is later found corrupt."""
    out: dict = {}
    for chunk in _chunks(sorted(set(hashes))):
        for h, data in store.query(
            f"SELECT hash, data FROM blobs WHERE hash IN ({','.join('?' * len(chunk))})", chunk
        ):
            try:
                out[h] = json.loads(bytes(data))
            except ValueError:
                continue
    return out


def _blob_ok(h: str, data: Any) -> bool:
    """Does a blob's content still match its hash? (As `store.get_blobs` checks: most values are
    stored as their canonical JSON, so the raw digest usually settles it without decoding.)"""
    data = bytes(data)
    if sha256_hex(data) == h:
        return True
    try:
        return canonical_hash(serde.decode(data)) == h
    except Exception:  # undecodable bytes are as corrupt as a wrong value
        return False


def _is_postgres(store: SQLStore) -> bool:
    return store.placeholder != "?"


def _scan(store: SQLStore, sql: str, params: tuple = (), size: int = 1000) -> Iterable[tuple]:
    cur = store.execute(sql, params)
    while True:
        rows = cur.fetchmany(size)
        if not rows:
            break
        yield from rows
    store._end_read()  # noqa: SLF001 (the backend's end-of-read hook)


# --- gc ---------------------------------------------------------------------------------------
def _older_than(value: Any) -> float:
    try:
        days = float(value)
    except (TypeError, ValueError):
        raise InvalidRequest(f"older_than_days must be a number of days, not {value!r}") from None
    if math.isnan(days) or days < 0:
        raise InvalidRequest(f"older_than_days must be >= 0, not {value!r}")
    return days


def _corrupt_blobs(store: SQLStore) -> dict:
    """{hash: size} of blobs whose content no longer matches their hash (read in pages)."""
    bad: dict = {}
    last = ""
    while True:
        rows = store.query(
            "SELECT hash, data, size FROM blobs WHERE hash > ? ORDER BY hash LIMIT 200", (last,)
        )
        if not rows:
            return bad
        for h, data, size in rows:
            if not _blob_ok(h, data):
                bad[h] = int(size or 0)
        last = rows[-1][0]


def gc(rw, older_than_days: float, dry_run: bool = False, verify: bool = True) -> dict:
    """Purge cache and tool-cache entries older than `older_than_days`, runs created before
    then (their steps and saved states), then blobs nothing kept refers to. With `verify`,
    blobs whose content no longer matches their hash are dropped too (a later execution
    stores the value again). `dry_run` counts without changing anything.

    Returns {cache_entries, tool_entries, runs, blobs, bytes, corrupt_blobs}.
    """
    store: SQLStore = rw.store
    days = _older_than(older_than_days)
    cutoff = time.time() - days * 86400
    corrupt = _corrupt_blobs(store) if verify else {}
    guard = contextlib.nullcontext() if dry_run else store.transaction()
    with guard:
        if not dry_run and _is_postgres(store):
            # Nothing may reference a blob between our scan and our delete. (SQLite: our
            # BEGIN IMMEDIATE already holds the only write lock.) Readers are not blocked.
            store.execute(
                f"LOCK TABLE blobs, nodes, cache, tool_cache, {BURR_TABLE}, runs IN EXCLUSIVE MODE"
            )
        n_cache = int(store.query("SELECT COUNT(*) FROM cache WHERE cached_at < ?", (cutoff,))[0][0])
        n_tools = int(
            store.query("SELECT COUNT(*) FROM tool_cache WHERE cached_at < ?", (cutoff,))[0][0]
        )
        purged, surviving = set(), set()
        parents: dict = {}
        for run_id, created_at, status, parent_id in _scan(
            store, "SELECT id, created_at, status, parent_id FROM runs"
        ):
            parents[run_id] = parent_id
            if created_at < cutoff and status != "running":
                purged.add(run_id)
            else:
                surviving.add(run_id)
        # A surviving fork whose parent goes keeps its inherited steps: their pointer rows
        # become full rows (resolved while the ancestors are still here).
        orphaned = sorted({
            r for (r,) in _scan(store, "SELECT DISTINCT run_id FROM nodes WHERE status = "
                                "'inherited' AND doc IS NULL AND field_hashes IS NULL "
                                "AND input_hash IS NULL")
            if r in surviving and parents.get(r) in purged
        })
        materialized: dict = {}
        for run_id in orphaned:
            raw = store.raw_node_rows(run_id)
            full = store.get_node_rows(run_id, parents[run_id])
            materialized[run_id] = [f for r, f in zip(raw, full) if is_pointer(r)]

        # what the survivors refer to
        keep: set = set()
        kept_states: set = set()  # (app_id, sequence_id) that surviving steps were saved at
        docs: set = set()  # content-addressed docs kept rows refer to
        for run_id, app_id, seq, inputs, outputs, doc in _scan(
            store, "SELECT run_id, state_app_id, sequence_id, inputs, outputs, doc FROM nodes"
        ):
            if run_id in purged:
                continue
            keep.update(_refs(inputs).values())
            keep.update(_refs(outputs).values())
            if doc:
                docs.add(doc)
            app_id = app_id or run_id  # NULL: the row's own run
            if app_id is not None and seq is not None:
                kept_states.add((app_id, int(seq)))
        for rows in materialized.values():
            for n in rows:
                keep.update(_refs(n["inputs"]).values())
                keep.update(_refs(n["outputs"]).values())
                if n["doc"]:
                    docs.add(n["doc"])
                if n["sequence_id"] is not None:
                    kept_states.add((row_state_app(n), int(n["sequence_id"])))
        for (outputs,) in _scan(store, "SELECT outputs FROM cache WHERE cached_at >= ?", (cutoff,)):
            keep.update(_refs(outputs).values())
        for (h,) in _scan(store, "SELECT result_hash FROM tool_cache WHERE cached_at >= ?", (cutoff,)):
            keep.add(h)
        # A saved state stays while its run does, or while a surviving step points at it (a
        # fork's inherited steps point at their ancestors' states). That also drops the states
        # an earlier gc kept for a fork that is now purged in turn.
        drop_states: list = []
        for pk, app_id, seq, position, state in _scan(
            store, f"SELECT partition_key, app_id, sequence_id, position, state FROM {BURR_TABLE}"
        ):
            if (pk == PARTITION_KEY and app_id not in surviving
                    and (app_id, int(seq)) not in kept_states):
                drop_states.append((pk, app_id, seq, position))
                continue
            keep.update(_state_refs(state).values())
            h = _state_doc_hash(state)
            if h:
                docs.add(h)
        keep.update(docs)
        for doc in _read_docs(store, docs).values():
            keep.update(_doc_refs(doc))

        orphans: dict = {}
        for h, size in _scan(store, "SELECT hash, size FROM blobs"):
            if h not in keep or h in corrupt:
                orphans[h] = int(size or 0)

        if not dry_run:
            store.execute("DELETE FROM cache WHERE cached_at < ?", (cutoff,))
            store.execute("DELETE FROM tool_cache WHERE cached_at < ?", (cutoff,))
            for run_id, rows in materialized.items():
                store.execute(
                    "DELETE FROM nodes WHERE run_id = ? AND status = 'inherited' AND doc IS NULL "
                    "AND field_hashes IS NULL AND input_hash IS NULL", (run_id,),
                )
                store.insert_nodes(rows)
            ids = sorted(purged)
            for chunk in _chunks(ids):
                marks = ",".join("?" * len(chunk))
                store.execute(f"DELETE FROM nodes WHERE run_id IN ({marks})", chunk)
                store.execute(f"DELETE FROM runs WHERE id IN ({marks})", chunk)
            kept_apps = {k[0] for k in kept_states}
            whole = sorted({d[1] for d in drop_states if d[1] not in kept_apps})
            for chunk in _chunks(whole):
                store.execute(
                    f"DELETE FROM {BURR_TABLE} WHERE partition_key = ? AND app_id IN "
                    f"({','.join('?' * len(chunk))})",
                    (PARTITION_KEY, *chunk),
                )
            for pk, app_id, seq, position in drop_states:
                if app_id not in kept_apps:
                    continue  # went with its whole app above
                store.execute(
                    f"DELETE FROM {BURR_TABLE} WHERE partition_key = ? AND app_id = ? "
                    "AND sequence_id = ? AND position = ?",
                    (pk, app_id, seq, position),
                )
            for chunk in _chunks(sorted(orphans)):
                store.execute(f"DELETE FROM blobs WHERE hash IN ({','.join('?' * len(chunk))})", chunk)
        if orphans and not dry_run:
            store.forget_blobs()
    return {
        "cache_entries": n_cache,
        "tool_entries": n_tools,
        "runs": len(purged),
        "blobs": len(orphans),
        "bytes": sum(orphans.values()),
        "corrupt_blobs": len(corrupt),
    }


# --- export -----------------------------------------------------------------------------------
def export_run(rw, run_id: str) -> dict:
    """The run, its ancestors still present, and everything they need, as plain JSON data."""
    store: SQLStore = rw.store
    row = store.get_run_row(str(run_id))
    if row is None:
        raise NotFound(f"no run {run_id!r} in {store.url}")
    chain, missing, seen = [row], [], {row["id"]}
    parent = row["parent_id"]
    while parent and parent not in seen:
        seen.add(parent)
        prow = store.get_run_row(parent)
        if prow is None:
            missing.append(parent)
            break
        chain.append(prow)
        parent = prow["parent_id"]
    chain.reverse()  # oldest first: a parent is imported before its forks
    ids = [r["id"] for r in chain]

    node_rows = []
    by_run = store.get_node_rows_for_runs(ids)
    for rid in ids:
        node_rows.extend(by_run[rid])

    wanted: set = set()
    state_keys: set = set()
    docs: set = set()
    for n in node_rows:
        wanted.update(_refs(n["inputs"]).values())
        wanted.update(_refs(n["outputs"]).values())
        if n.get("doc"):
            docs.add(n["doc"])
        if n["sequence_id"] is not None:
            state_keys.add((row_state_app(n), int(n["sequence_id"])))

    states, have = [], set()
    cols = ", ".join(STATE_COLUMNS)
    for chunk in _chunks(ids):
        for r in store.query(
            f"SELECT {cols} FROM {BURR_TABLE} WHERE app_id IN ({','.join('?' * len(chunk))}) "
            "ORDER BY app_id, sequence_id, position",
            chunk,
        ):
            states.append(r)
            have.add((r[1], int(r[2]), r[3]))
    for app_id, seq in sorted(state_keys):
        if app_id in ids:
            continue
        for r in store.query(
            f"SELECT {cols} FROM {BURR_TABLE} WHERE app_id = ? AND sequence_id = ? ORDER BY position",
            (app_id, seq),
        ):
            if (r[1], int(r[2]), r[3]) not in have:
                states.append(r)
                have.add((r[1], int(r[2]), r[3]))
    state_docs = []
    for pk, app_id, seq, position, status, state in states:
        doc = _state_doc(state)
        wanted.update(_state_refs(doc).values())
        if _state_doc_hash(doc):
            docs.add(_state_doc_hash(doc))
        state_docs.append({
            "partition_key": pk, "app_id": app_id, "sequence_id": int(seq),
            "position": position, "status": status, "state": doc,
        })

    wanted.update(docs)
    doc_values = store.get_docs(sorted(docs))
    for d in doc_values.values():
        wanted.update(_doc_refs(d))

    def input_hash(n: dict) -> Optional[str]:
        return n["input_hash"] or (doc_values.get(n.get("doc")) or {}).get("input_hash")

    cache_rows = []
    for key in sorted({(n["node"], input_hash(n)) for n in node_rows if input_hash(n)}):
        entry = store.cache_get(*key)
        if entry is not None:
            cache_rows.append(entry)
            wanted.update(_refs(entry["outputs"]).values())

    blobs: dict = {}
    wanted_list = sorted(wanted)
    for chunk in _chunks(wanted_list):
        for h, data in store.query(
            f"SELECT hash, data FROM blobs WHERE hash IN ({','.join('?' * len(chunk))})", chunk
        ):
            data = bytes(data)
            if not _blob_ok(h, data):
                raise IntegrityError(
                    f"blob {h[:12]}… no longer matches its hash; run gc to drop it before exporting"
                )
            blobs[h] = base64.b64encode(data).decode("ascii")
    lost = [h for h in wanted_list if h not in blobs]
    if lost:
        raise NotFound(
            f"{len(lost)} blob(s) the runs refer to are missing from {store.url} "
            f"(first {lost[0][:12]}…); the export would not be self-contained"
        )

    edges = {}
    for graph_id in sorted({r["graph_id"] for r in chain if r["graph_id"]}):
        rows = store.query(
            "SELECT ord, src, dst, condition FROM edges WHERE graph_id = ? ORDER BY ord", (graph_id,)
        )
        if rows:
            edges[graph_id] = [[int(o), s, d, c] for o, s, d, c in rows]

    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "schema_version": SCHEMA_VERSION,
        "exported_at": time.time(),
        "run_id": row["id"],
        "runs": [dict(r) for r in chain],
        "missing_ancestors": missing,
        "nodes": [dict(n) for n in node_rows],
        "states": state_docs,
        "blobs": blobs,
        "cache": [dict(c) for c in cache_rows],
        "edges": edges,
    }


# --- import: validation -----------------------------------------------------------------------
class _V:
    """Type checks that name the offending place in the document."""

    @staticmethod
    def fail(where: str, what: str):
        raise InvalidRequest(f"import document: {where} {what}")

    @classmethod
    def text(cls, value: Any, where: str, optional: bool = False, ident: bool = False) -> Optional[str]:
        if value is None:
            if optional:
                return None
            cls.fail(where, "is missing")
        if not isinstance(value, str):
            cls.fail(where, f"must be a string, not {type(value).__name__}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            cls.fail(where, "is not valid Unicode (a lone surrogate)")
        if ident:
            if not value or len(value) > 500:
                cls.fail(where, "must be a non-empty string of at most 500 characters")
            if "\x00" in value:
                cls.fail(where, "contains a NUL character")
        return value

    @classmethod
    def integer(cls, value: Any, where: str, optional: bool = False, minimum: Optional[int] = None):
        if value is None:
            if optional:
                return None
            cls.fail(where, "is missing")
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            cls.fail(where, f"must be an integer, not {type(value).__name__}")
        if abs(value) > _INT_MAX or (minimum is not None and value < minimum):
            cls.fail(where, f"is out of range ({value})")
        return value

    @classmethod
    def number(cls, value: Any, where: str, optional: bool = False):
        if value is None:
            if optional:
                return None
            cls.fail(where, "is missing")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            cls.fail(where, f"must be a number, not {type(value).__name__}")
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            cls.fail(where, f"must be a finite number, not {value}")
        return value

    @classmethod
    def hash(cls, value: Any, where: str, optional: bool = False):
        if value is None and optional:
            return None
        if not isinstance(value, str) or not _HASH.match(value):
            cls.fail(where, f"must be a sha256 hex digest, not {str(value)[:80]!r}")
        return value

    @classmethod
    def json_text(cls, value: Any, where: str, optional: bool = True) -> Optional[str]:
        value = cls.text(value, where, optional=optional)
        if value is None:
            return None
        try:
            json.loads(value)
        except ValueError:
            cls.fail(where, "is not valid JSON")
        return value

    @classmethod
    def refs(cls, value: Any, where: str) -> str:
        value = cls.json_text(value, where, optional=True) or "{}"
        data = json.loads(value)
        if not isinstance(data, dict):
            cls.fail(where, "must be a JSON object of {field: blob hash}")
        for k, h in data.items():
            cls.hash(h, f"{where}[{k!r}]")
        return value

    @classmethod
    def record(cls, value: Any, where: str, allowed: Iterable[str]) -> dict:
        if not isinstance(value, dict):
            cls.fail(where, f"must be an object, not {type(value).__name__}")
        unknown = sorted(set(value) - set(allowed), key=str)
        if unknown:
            cls.fail(where, f"has unknown field(s) {', '.join(map(repr, unknown[:5]))}")
        return value


_RUN_TYPES = {
    "id": ("ident", False), "pipeline": ("ident", False), "status": ("status", False),
    "parent_id": ("ident", True), "fork_node": ("ident", True), "fork_occurrence": ("int", True),
    "graph_id": ("text", True), "entrypoint": ("text", True), "created_at": ("number", False),
    "finished_at": ("number", True), "summary": ("text", True), "total_tokens": ("int", True),
    "tokens_saved": ("int", True), "latency_ms": ("number", True), "step_count": ("int", True),
    "edit_json": ("json", True), "params_json": ("json", True),
    "allow_side_effects": ("int", True), "use_cache": ("int", True), "error": ("text", True),
    "owner_host": ("text", True), "owner_pid": ("int", True), "owner_started": ("number", True),
    "heartbeat_at": ("number", True), "start_seq": ("int", True), "fork_index": ("int", True),
}
_NODE_TYPES = {
    "run_id": ("ident", False), "idx": ("int", False), "node": ("ident", False),
    "occurrence": ("int", False), "status": ("step_status", False), "sequence_id": ("int", True),
    "state_app_id": ("ident", True), "input_hash": ("hash", True), "output_hash": ("hash", True),
    "field_hashes": ("json", True), "params": ("json", True), "inputs": ("refs", True),
    "outputs": ("refs", True), "prompt_tokens": ("int", True), "completion_tokens": ("int", True),
    "tokens": ("int", True), "tokens_saved": ("int", True), "latency_ms": ("number", True),
    "reason": ("text", True), "error": ("text", True), "started_at": ("number", True),
    "source_run": ("ident", True), "doc": ("hash", True),
}
_CACHE_TYPES = {
    "node": ("ident", False), "input_hash": ("hash", False), "output_hash": ("hash", False),
    "outputs": ("refs", False), "prompt_tokens": ("int", True), "completion_tokens": ("int", True),
    "tokens": ("int", True), "latency_ms": ("number", True), "cached_at": ("number", False),
    "hits": ("int", True), "determinism": ("text", True), "source_run": ("ident", True),
}
_INT_DEFAULTS = {
    "total_tokens": 0, "tokens_saved": 0, "latency_ms": 0.0, "step_count": 0,
    "allow_side_effects": 0, "use_cache": 1, "fork_index": 0, "prompt_tokens": 0,
    "completion_tokens": 0, "tokens": 0, "hits": 0,
}


def _typed(value: Any, kind: str, optional: bool, where: str) -> Any:
    if kind == "ident":
        return _V.text(value, where, optional=optional, ident=True)
    if kind == "text":
        return _V.text(value, where, optional=optional)
    if kind == "int":
        return _V.integer(value, where, optional=optional)
    if kind == "number":
        return _V.number(value, where, optional=optional)
    if kind == "hash":
        return _V.hash(value, where, optional=optional)
    if kind == "json":
        return _V.json_text(value, where, optional=optional)
    if kind == "refs":
        if value is None and optional:
            return None  # a step row whose refs live in its doc
        return _V.refs(value, where)
    if kind == "status":
        if value not in RUN_STATUSES:
            _V.fail(where, f"must be one of {', '.join(RUN_STATUSES)}, not {str(value)[:40]!r}")
        return value
    if kind == "step_status":
        if value not in STEP_STATUSES:
            _V.fail(where, f"must be one of {', '.join(STEP_STATUSES)}, not {str(value)[:40]!r}")
        return value
    raise AssertionError(kind)


def _typed_row(raw: Any, types: dict, where: str) -> dict:
    _V.record(raw, where, types)
    out = {}
    for col, (kind, optional) in types.items():
        value = raw.get(col)
        if value is None and col in _INT_DEFAULTS:
            value = _INT_DEFAULTS[col]
        out[col] = _typed(value, kind, optional, f"{where}.{col}")
    return out


def _validate(doc: Any) -> dict:
    if not isinstance(doc, dict):
        raise InvalidRequest(
            f"import document must be an object from export_run, not {type(doc).__name__}"
        )
    if doc.get("format") != EXPORT_FORMAT:
        _V.fail("format", f"must be {EXPORT_FORMAT!r}, not {str(doc.get('format'))[:60]!r}")
    version = _V.integer(doc.get("version"), "version")
    if version > EXPORT_VERSION:
        _V.fail("version", f"is {version}, newer than this Rewind reads ({EXPORT_VERSION}); upgrade")
    schema = _V.integer(doc.get("schema_version", SCHEMA_VERSION), "schema_version")
    if schema > SCHEMA_VERSION:
        _V.fail("schema_version", f"is {schema}, newer than this database's ({SCHEMA_VERSION})")
    known = {"format", "version", "schema_version", "exported_at", "run_id", "runs",
             "missing_ancestors", "nodes", "states", "blobs", "cache", "edges"}
    _V.record(doc, "the document", known)
    run_id = _V.text(doc.get("run_id"), "run_id", ident=True)

    runs_raw = doc.get("runs")
    if not isinstance(runs_raw, list) or not runs_raw:
        _V.fail("runs", "must be a non-empty list")
    runs = [_typed_row(r, _RUN_TYPES, f"runs[{i}]") for i, r in enumerate(runs_raw)]
    ids = [r["id"] for r in runs]
    if len(set(ids)) != len(ids):
        _V.fail("runs", "lists a run id twice")
    if run_id not in ids:
        _V.fail("run_id", f"{run_id!r} is not one of the runs in the document")
    by_id = {r["id"]: r for r in runs}
    for r in runs:  # a parent chain must not loop
        seen, cur = set(), r
        while cur is not None and cur["parent_id"]:
            if cur["id"] in seen:
                _V.fail(f"run {r['id']}", "has a parent chain that loops")
            seen.add(cur["id"])
            cur = by_id.get(cur["parent_id"])
    # parents first, whatever order the document lists them in
    order: list = []
    placed: set = set()

    def place(r: dict) -> None:
        if r["id"] in placed:
            return
        if r["parent_id"] in by_id:
            place(by_id[r["parent_id"]])
        placed.add(r["id"])
        order.append(r)

    for r in runs:
        place(r)

    nodes_raw = doc.get("nodes", [])
    if not isinstance(nodes_raw, list):
        _V.fail("nodes", "must be a list")
    nodes = [_typed_row(n, _NODE_TYPES, f"nodes[{i}]") for i, n in enumerate(nodes_raw)]
    keys = set()
    for i, n in enumerate(nodes):
        if n["run_id"] not in by_id:
            _V.fail(f"nodes[{i}].run_id", f"{n['run_id']!r} is not one of the runs in the document")
        if n["idx"] < 0 or n["occurrence"] < 1:
            _V.fail(f"nodes[{i}]", "has a negative idx or an occurrence below 1")
        if (n["run_id"], n["idx"]) in keys:
            _V.fail(f"nodes[{i}]", f"repeats step {n['idx']} of run {n['run_id']}")
        keys.add((n["run_id"], n["idx"]))

    states_raw = doc.get("states", [])
    if not isinstance(states_raw, list):
        _V.fail("states", "must be a list")
    states = []
    for i, s in enumerate(states_raw):
        where = f"states[{i}]"
        _V.record(s, where, STATE_COLUMNS)
        state = s.get("state")
        if isinstance(state, str):
            try:
                state = json.loads(state)
            except ValueError:
                _V.fail(f"{where}.state", "is not valid JSON")
        if not isinstance(state, dict) or not isinstance(state.get(REFS_KEY, {}), dict):
            _V.fail(f"{where}.state", f"must be an object with a {REFS_KEY!r} object or a "
                    f"{DOC_KEY!r} hash")
        for k, h in state.get(REFS_KEY, {}).items():
            _V.hash(h, f"{where}.state.{REFS_KEY}[{k!r}]")
        for key in (DOC_KEY, STEP_DOC_KEY):
            if key in state:
                _V.hash(state[key], f"{where}.state.{key}")
        try:
            state_text = json.dumps(state, sort_keys=True, separators=(",", ":"), allow_nan=False)
            state_text.encode("utf-8")
        except (ValueError, UnicodeEncodeError):
            _V.fail(f"{where}.state", "holds a value JSON cannot carry (NaN or invalid Unicode)")
        if "\\u0000" in state_text:
            _V.fail(f"{where}.state", "contains a NUL character")
        states.append({
            "partition_key": _V.text(s.get("partition_key", PARTITION_KEY), f"{where}.partition_key"),
            "app_id": _V.text(s.get("app_id"), f"{where}.app_id", ident=True),
            "sequence_id": _V.integer(s.get("sequence_id"), f"{where}.sequence_id"),
            "position": _V.text(s.get("position"), f"{where}.position", ident=True),
            "status": _V.text(s.get("status"), f"{where}.status", ident=True),
            "state": state_text, "refs": state.get(REFS_KEY, {}),
            "doc": state.get(DOC_KEY) or state.get(STEP_DOC_KEY),
        })

    blobs_raw = doc.get("blobs", {})
    if not isinstance(blobs_raw, dict):
        _V.fail("blobs", "must be an object of {hash: base64 data}")
    blobs = {}
    for h, b64 in blobs_raw.items():
        _V.hash(h, "blobs key")
        if not isinstance(b64, str):
            _V.fail(f"blobs[{h[:12]}…]", "must be base64 text")
        try:
            data = base64.b64decode(b64.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            _V.fail(f"blobs[{h[:12]}…]", "is not valid base64")
        if not _blob_ok(h, data):
            _V.fail(f"blobs[{h[:12]}…]", "does not match its hash (altered or corrupt)")
        blobs[h] = data

    cache_raw = doc.get("cache", [])
    if not isinstance(cache_raw, list):
        _V.fail("cache", "must be a list")
    cache = [_typed_row(c, _CACHE_TYPES, f"cache[{i}]") for i, c in enumerate(cache_raw)]

    edges_raw = doc.get("edges", {})
    if not isinstance(edges_raw, dict):
        _V.fail("edges", "must be an object of {graph_id: [[ord, src, dst, condition], ...]}")
    edges = {}
    for graph_id, rows in edges_raw.items():
        _V.text(graph_id, "edges key", ident=True)
        if not isinstance(rows, list):
            _V.fail(f"edges[{graph_id!r}]", "must be a list")
        out = []
        for j, e in enumerate(rows):
            where = f"edges[{graph_id!r}][{j}]"
            if not isinstance(e, (list, tuple)) or len(e) != 4:
                _V.fail(where, "must be [ord, src, dst, condition]")
            out.append((
                _V.integer(e[0], f"{where}.ord"), _V.text(e[1], f"{where}.src", ident=True),
                _V.text(e[2], f"{where}.dst", optional=True), _V.text(e[3], f"{where}.condition", optional=True),
            ))
        edges[graph_id] = out

    missing = doc.get("missing_ancestors", [])
    if not isinstance(missing, list):
        _V.fail("missing_ancestors", "must be a list of run ids")
    for i, m in enumerate(missing):
        _V.text(m, f"missing_ancestors[{i}]", ident=True)

    referenced: dict = {}  # blob hash -> where it is referenced (for the message)
    for n in nodes:
        for col in ("inputs", "outputs"):
            for k, h in json.loads(n[col] or "{}").items():
                referenced.setdefault(h, f"step {n['idx']} ({n['node']}) of run {n['run_id']}")
    for n in nodes:
        if n["doc"]:
            where = f"step {n['idx']} ({n['node']}) of run {n['run_id']}"
            referenced.setdefault(n["doc"], where)
            if n["doc"] in blobs:
                for h in _doc_refs(_parse_doc(blobs[n["doc"]], n["doc"])):
                    referenced.setdefault(h, where)
    for s in states:
        for h in s["refs"].values():
            referenced.setdefault(h, f"saved state {s['app_id']}@{s['sequence_id']}")
        if s["doc"]:
            where = f"saved state {s['app_id']}@{s['sequence_id']}"
            referenced.setdefault(s["doc"], where)
            if s["doc"] in blobs:
                for h in _doc_refs(_parse_doc(blobs[s["doc"]], s["doc"])):
                    referenced.setdefault(h, where)
    for c in cache:
        for h in json.loads(c["outputs"]).values():
            referenced.setdefault(h, f"the cache entry of {c['node']}")
    return {
        "run_id": run_id, "runs": order, "nodes": nodes, "states": states, "blobs": blobs,
        "cache": cache, "edges": edges, "referenced": referenced,
    }


def _parse_doc(data: bytes, h: str) -> dict:
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        _V.fail(f"blobs[{h[:12]}…]", "is referenced as a document but is not a JSON object")
    for v in _doc_refs(doc):
        _V.hash(v, f"blobs[{h[:12]}…] (a document) reference")
    return doc


# --- import: writing --------------------------------------------------------------------------
_COMPARE_RUN = ("pipeline", "parent_id", "fork_node", "fork_occurrence", "graph_id", "created_at")
_COMPARE_NODE = ("idx", "node", "occurrence", "status", "input_hash", "output_hash", "inputs", "outputs",
                 "doc")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return a is not None and b is not None and abs(float(a) - float(b)) < 1e-6
        except (TypeError, ValueError):
            return False
    if isinstance(a, str) and isinstance(b, str) and a.startswith("{") and b.startswith("{"):
        try:
            return json.loads(a) == json.loads(b)
        except ValueError:
            pass
    return a == b


def import_run(rw, doc: Any) -> list:
    """Load an `export_run` document. Validates everything first, then writes in one
    transaction; a run already present with the same content is left as it is (importing
    twice is a no-op), one present with different content is refused. Returns the run ids."""
    v = _validate(doc)
    store: SQLStore = rw.store
    nodes_by_run: dict = {}
    for n in v["nodes"]:
        nodes_by_run.setdefault(n["run_id"], []).append(n)
    with store.transaction():
        present = store.get_run_rows([r["id"] for r in v["runs"]])
        for r in v["runs"]:
            old = present.get(r["id"])
            if old is None:
                continue
            diff = [c for c in _COMPARE_RUN if not _same(old[c], r[c])]
            if not diff:
                old_nodes = store.get_node_rows(r["id"])
                new_nodes = sorted(nodes_by_run.get(r["id"], []), key=lambda n: n["idx"])
                if len(old_nodes) != len(new_nodes):
                    diff = [f"{len(old_nodes)} steps here, {len(new_nodes)} in the document"]
                else:
                    for a, b in zip(old_nodes, new_nodes):
                        bad = [c for c in _COMPARE_NODE if not _same(a[c], b[c])]
                        if bad:
                            diff = [f"step {a['idx']} ({', '.join(bad)})"]
                            break
            if diff:
                raise InvalidRequest(
                    f"run {r['id']} already exists in {store.url} with different content "
                    f"({'; '.join(diff)}); nothing was imported"
                )
        # every referenced blob is in the document or already here
        absent = [h for h in v["referenced"] if h not in v["blobs"]]
        here: set = set()
        for chunk in _chunks(absent):
            here.update(
                r[0] for r in store.query(
                    f"SELECT hash FROM blobs WHERE hash IN ({','.join('?' * len(chunk))})", chunk
                )
            )
        lost = [h for h in absent if h not in here]
        if lost:
            raise InvalidRequest(
                f"import document: blob {lost[0][:12]}… referenced by {v['referenced'][lost[0]]} "
                f"is neither in the document nor in {store.url} ({len(lost)} missing); "
                "nothing was imported"
            )
        store.put_blobs(v["blobs"])
        for r in v["runs"]:
            if r["id"] in present:
                continue
            row = dict(r)
            if row["status"] == "running":
                # its process belongs to the exporting side: here it can only be interrupted
                row["status"] = "interrupted"
                row["error"] = row["error"] or "exported while running"
                row["owner_host"] = row["owner_pid"] = row["owner_started"] = None
            store.insert_run({c: row[c] for c in RUN_COLUMNS})
            store.insert_nodes([{c: n[c] for c in NODE_COLUMNS}
                                for n in sorted(nodes_by_run.get(r["id"], []), key=lambda n: n["idx"])])
        for s in v["states"]:
            exists = store.query(
                f"SELECT 1 FROM {BURR_TABLE} WHERE partition_key = ? AND app_id = ? AND "
                "sequence_id = ? AND position = ?",
                (s["partition_key"], s["app_id"], s["sequence_id"], s["position"]),
            )
            if not exists:
                store.execute(
                    f"INSERT INTO {BURR_TABLE} (partition_key, app_id, sequence_id, position, state, "
                    "status) VALUES (?, ?, ?, ?, ?, ?)",
                    (s["partition_key"], s["app_id"], s["sequence_id"], s["position"], s["state"],
                     s["status"]),
                )
        for graph_id, rows in v["edges"].items():
            if store.query("SELECT 1 FROM edges WHERE graph_id = ? LIMIT 1", (graph_id,)):
                continue
            for ord_, src, dst, cond in rows:
                store.execute(
                    "INSERT INTO edges (graph_id, ord, src, dst, condition) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (graph_id, ord) DO NOTHING",
                    (graph_id, ord_, src, dst, cond),
                )
        for c in v["cache"]:
            if store.cache_get(c["node"], c["input_hash"]) is None:
                store.cache_put({k: c[k] for k in CACHE_COLUMNS})
    return [r["id"] for r in v["runs"]]
