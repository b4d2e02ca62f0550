"""Export: a run and its ancestors still present, with everything they need, as plain JSON.

    doc = rw.export_run(run_id)

The document (see `documents.ExportDocument`) holds run rows (oldest ancestor first), their
step rows (inherited steps resolved), the Burr state rows those steps and runs need, the blobs
all of them reference (base64, checked against their hashes), the cache entries of their steps
and their pipeline graphs. An importing database re-verifies the cache entries before it uses
any of them (see `trust`).
"""

from __future__ import annotations

import base64
import time
from typing import Optional

from ..errors import IntegrityError, NotFound
from ..store import SCHEMA_VERSION
from ..store.rows import (
    blob_ok, doc_refs, parse_refs, row_state_app, state_doc, state_doc_hash, state_inline_refs,
)

EXPORT_FORMAT = "rewind-run-export"
EXPORT_VERSION = 1


def _lineage(store, run_id: str) -> tuple:
    """(run rows oldest first, ids of ancestors no longer present)."""
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
    chain.reverse()  # a parent is imported before its forks
    return chain, missing


def _states(store, ids: list, state_keys: set) -> list:
    """The state rows of the runs, and those of other apps the steps point at."""
    rows, have = [], set()
    for r in store.state_rows_of_apps(ids):
        rows.append(r)
        have.add((r[1], int(r[2]), r[3]))
    for app_id, seq in sorted(state_keys):
        if app_id in ids:
            continue
        for r in store.state_rows_at(app_id, seq):
            if (r[1], int(r[2]), r[3]) not in have:
                rows.append(r)
                have.add((r[1], int(r[2]), r[3]))
    return [{"partition_key": pk, "app_id": app_id, "sequence_id": int(seq), "position": position,
             "status": status, "state": state_doc(state)}
            for pk, app_id, seq, position, status, state in rows]


def export_run(rw, run_id: str) -> dict:
    """The run, its ancestors still present, and everything they need, as plain JSON data."""
    store = rw.store
    chain, missing = _lineage(store, run_id)
    ids = [r["id"] for r in chain]
    by_run = store.get_node_rows_for_runs(ids)
    node_rows = [n for rid in ids for n in by_run[rid]]

    wanted: set = set()
    state_keys: set = set()
    docs: set = set()
    for n in node_rows:
        wanted.update(parse_refs(n["inputs"]).values())
        wanted.update(parse_refs(n["outputs"]).values())
        if n.get("doc"):
            docs.add(n["doc"])
        if n["sequence_id"] is not None:
            state_keys.add((row_state_app(n), int(n["sequence_id"])))
    states = _states(store, ids, state_keys)
    for s in states:
        wanted.update(state_inline_refs(s["state"]).values())
        if state_doc_hash(s["state"]):
            docs.add(state_doc_hash(s["state"]))
    wanted.update(docs)
    doc_values = store.get_docs(sorted(docs))
    for d in doc_values.values():
        wanted.update(doc_refs(d))

    def input_hash(n: dict) -> Optional[str]:
        return n["input_hash"] or (doc_values.get(n.get("doc")) or {}).get("input_hash")

    keys = sorted({(n["node"], input_hash(n)) for n in node_rows if input_hash(n)})
    cache_rows = [e for _, e in sorted(store.cache_get_many(keys).items())]
    for entry in cache_rows:
        wanted.update(parse_refs(entry["outputs"]).values())

    blobs: dict = {}
    for h, data in store.raw_blobs(wanted).items():
        if not blob_ok(h, data):
            raise IntegrityError(
                f"blob {h[:12]}… no longer matches its hash; run gc to drop it before exporting"
            )
        blobs[h] = base64.b64encode(data).decode("ascii")
    lost = sorted(h for h in wanted if h not in blobs)
    if lost:
        where = store.blob_locations(lost[:1]).get(lost[0]) if hasattr(store, "blob_locations") \
            else None
        raise NotFound(
            f"{len(lost)} blob(s) the runs refer to are missing from "
            f"{'the object store ' + where if where else store.url} (first {lost[0][:12]}…); "
            "the export would not be self-contained; re-running the steps that wrote them "
            "stores them again"
        )
    edges = {}
    for graph_id in sorted({r["graph_id"] for r in chain if r["graph_id"]}):
        rows = store.graph_rows(graph_id)
        if rows:
            edges[graph_id] = [[int(o), s, d, c] for o, s, d, c in rows]
    return {
        "format": EXPORT_FORMAT, "version": EXPORT_VERSION, "schema_version": SCHEMA_VERSION,
        "exported_at": time.time(), "run_id": chain[-1]["id"],
        "runs": [dict(r) for r in chain], "missing_ancestors": missing,
        "nodes": [dict(n) for n in node_rows], "states": states, "blobs": blobs,
        "cache": [dict(c) for c in cache_rows], "edges": edges,
    }
