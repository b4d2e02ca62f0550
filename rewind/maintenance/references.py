"""Checks across an export document's parts, once each part is valid on its own (`documents`).

Ids that must refer to each other do (a step's run is in the document, the exported run is
one of its runs, parent chains end), no step is listed twice, every blob matches its hash, and
every blob a row refers to is named with the place that refers to it (the importer then checks
each is in the document or already in the database). Returns the runs parents first; a
lineage deeper than `MAX_LINEAGE` runs is refused (measured without recursion).
"""

from __future__ import annotations

import dataclasses
import json

from ..errors import InvalidRequest
from ..store.rows import blob_ok, doc_refs
from .documents import HASH, ExportDocument


def _fail(where: str, what: str) -> None:
    raise InvalidRequest(f"import document: {where} {what}")


@dataclasses.dataclass
class Checked:
    """A document whose parts agree with each other, ready to write."""

    run_id: str
    runs: list        # run rows (dicts), parents before their forks
    nodes: list       # step rows (dicts)
    states: list      # StateRow models
    blobs: dict       # {hash: bytes}
    cache: list       # cache rows (dicts), not yet trusted (see `trust`)
    edges: dict       # {graph_id: [(ord, src, dst, condition)]}
    referenced: dict  # {blob hash: the place that refers to it}


# A lineage deeper than this is refused: reading a fork walks its ancestors, some of it by
# recursion (a RecursionError near 1000), and no real history of forks of forks is this deep.
MAX_LINEAGE = 500


def _parents_first(runs: list) -> list:
    """The runs, each parent before its forks; refused when a parent chain loops or is deeper
    than MAX_LINEAGE. Iterative: the depth is measured, never recursed into."""
    by_id = {r["id"]: r for r in runs}
    depth: dict = {}  # run id -> runs in its chain within the document (itself included)
    for r in runs:
        chain, on_chain, cur = [], set(), r
        while cur is not None and cur["id"] not in depth:
            if cur["id"] in on_chain:
                _fail(f"run {r['id']}", "has a parent chain that loops")
            chain.append(cur)
            on_chain.add(cur["id"])
            cur = by_id.get(cur["parent_id"]) if cur["parent_id"] else None
        below = depth[cur["id"]] if cur is not None else 0
        for c in reversed(chain):
            below += 1
            depth[c["id"]] = below
    deepest = max(runs, key=lambda r: depth[r["id"]])
    if depth[deepest["id"]] > MAX_LINEAGE:
        _fail(f"run {deepest['id']}", f"has a lineage {depth[deepest['id']]} runs deep; Rewind "
              f"imports lineages of at most {MAX_LINEAGE} runs; nothing was imported")
    # a parent's depth is one less than its fork's: sorted by depth (stable: ties keep their order)
    return sorted(runs, key=lambda r: depth[r["id"]])


def _doc(blobs: dict, h: str) -> dict:
    try:
        doc = json.loads(blobs[h])
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        _fail(f"blobs[{h[:12]}…]", "is referenced as a document but is not a JSON object")
    for v in doc_refs(doc):
        if not isinstance(v, str) or not HASH.match(v):
            _fail(f"blobs[{h[:12]}…] (a document) reference", f"must be a sha256 hex digest, not {str(v)[:80]!r}")
    return doc


def check(doc: ExportDocument) -> Checked:
    runs = [r.model_dump() for r in doc.runs]
    ids = [r["id"] for r in runs]
    if len(set(ids)) != len(ids):
        _fail("runs", "lists a run id twice")
    if doc.run_id not in ids:
        _fail("run_id", f"{doc.run_id!r} is not one of the runs in the document")
    nodes = [n.model_dump() for n in doc.nodes]
    keys = set()
    for i, n in enumerate(nodes):
        if n["run_id"] not in ids:
            _fail(f"nodes[{i}].run_id", f"{n['run_id']!r} is not one of the runs in the document")
        if n["idx"] < 0 or n["occurrence"] < 1:
            _fail(f"nodes[{i}]", "has a negative idx or an occurrence below 1")
        if (n["run_id"], n["idx"]) in keys:
            _fail(f"nodes[{i}]", f"repeats step {n['idx']} of run {n['run_id']}")
        keys.add((n["run_id"], n["idx"]))
    for h, data in doc.blobs.items():
        if not blob_ok(h, data):
            _fail(f"blobs[{h[:12]}…]", "does not match its hash (altered or corrupt)")

    referenced: dict = {}
    for n in nodes:
        place = f"step {n['idx']} ({n['node']}) of run {n['run_id']}"
        for col in ("inputs", "outputs"):
            for h in json.loads(n[col] or "{}").values():
                referenced.setdefault(h, place)
        if n["doc"]:
            referenced.setdefault(n["doc"], place)
            if n["doc"] in doc.blobs:
                for h in doc_refs(_doc(doc.blobs, n["doc"])):
                    referenced.setdefault(h, place)
    for s in doc.states:
        place = f"saved state {s.app_id}@{s.sequence_id}"
        for h in s.inline_refs.values():
            referenced.setdefault(h, place)
        if s.doc_hash:
            referenced.setdefault(s.doc_hash, place)
            if s.doc_hash in doc.blobs:
                for h in doc_refs(_doc(doc.blobs, s.doc_hash)):
                    referenced.setdefault(h, place)
    cache = [c.model_dump() for c in doc.cache]
    return Checked(
        run_id=doc.run_id, runs=_parents_first(runs), nodes=nodes, states=list(doc.states),
        blobs=dict(doc.blobs), cache=cache, edges={g: list(rows) for g, rows in doc.edges.items()},
        referenced=referenced,
    )
