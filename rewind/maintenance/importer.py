"""Import: load an `export_run` document into this database, all of it or nothing.

    Rewind("postgresql://…").import_run(doc)

The whole document is validated first (`documents`: each part; `references`: the parts
against each other), then written in one transaction. A run already present with the same
content is left as it is (importing twice changes nothing the second time); one present with
different content is refused. A run exported while `running` arrives `interrupted`. Cache
entries are re-verified (`trust`) and only those that verify are written, dated no later
than now.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..errors import InvalidRequest
from ..store.schema import NODE_COLUMNS, RUN_COLUMNS
from . import documents, references, trust

_COMPARE_RUN = ("pipeline", "parent_id", "fork_node", "fork_occurrence", "graph_id", "created_at")
_COMPARE_NODE = ("idx", "node", "occurrence", "status", "input_hash", "output_hash", "inputs",
                 "outputs", "doc")


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


def _conflicts(store, run: dict, old: dict, new_nodes: list) -> list:
    """How a run already here differs from the document's ([] if it is the same run)."""
    diff = [c for c in _COMPARE_RUN if not _same(old[c], run[c])]
    if diff:
        return diff
    old_nodes = store.get_node_rows(run["id"])
    if len(old_nodes) != len(new_nodes):
        return [f"{len(old_nodes)} steps here, {len(new_nodes)} in the document"]
    for a, b in zip(old_nodes, new_nodes):
        bad = [c for c in _COMPARE_NODE if not _same(a[c], b[c])]
        if bad:
            return [f"step {a['idx']} ({', '.join(bad)})"]
    return []


def import_run(rw, doc: Any) -> list:
    """Load an `export_run` document; returns the run ids it holds (parents first)."""
    v = references.check(documents.parse(doc))
    store = rw.store
    now = time.time()
    cache, _refused = trust.trusted_cache_entries(rw, v, now)
    nodes_by_run: dict = {}
    for n in v.nodes:
        nodes_by_run.setdefault(n["run_id"], []).append(n)
    for rows in nodes_by_run.values():
        rows.sort(key=lambda n: n["idx"])
    with store.transaction():
        present = store.get_run_rows([r["id"] for r in v.runs])
        for r in v.runs:
            if r["id"] in present:
                diff = _conflicts(store, r, present[r["id"]], nodes_by_run.get(r["id"], []))
                if diff:
                    raise InvalidRequest(
                        f"run {r['id']} already exists in {store.url} with different content "
                        f"({'; '.join(diff)}); nothing was imported"
                    )
        # every referenced blob is in the document or already here
        absent = [h for h in v.referenced if h not in v.blobs]
        here = store.existing_blobs(absent)
        lost = [h for h in absent if h not in here]
        if lost:
            raise InvalidRequest(
                f"import document: blob {lost[0][:12]}… referenced by {v.referenced[lost[0]]} "
                f"is neither in the document nor in {store.url} ({len(lost)} missing); "
                "nothing was imported"
            )
        store.put_blobs(v.blobs)
        for r in v.runs:
            if r["id"] in present:
                continue
            row = dict(r)
            if row["status"] == "running":
                # its process belongs to the exporting side: here it can only be interrupted
                row["status"] = "interrupted"
                row["error"] = row["error"] or "exported while running"
                row["owner_host"] = row["owner_pid"] = row["owner_started"] = None
            store.insert_run({c: row[c] for c in RUN_COLUMNS})
            store.insert_nodes([{c: n[c] for c in NODE_COLUMNS} for n in nodes_by_run.get(r["id"], [])])
        for s in v.states:
            store.insert_state_if_absent({
                "partition_key": s.partition_key, "app_id": s.app_id, "sequence_id": s.sequence_id,
                "position": s.position, "state": s.as_text, "status": s.status,
            })
        for graph_id, rows in v.edges.items():
            if not store.has_graph(graph_id):
                store.put_graph_rows(graph_id, rows)
        for entry in cache:
            store.cache_put(entry, keep_existing=True)  # never over an entry of this database
    return [r["id"] for r in v.runs]
