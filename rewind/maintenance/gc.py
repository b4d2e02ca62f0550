"""Garbage collection: purge old cache entries and old runs, then blobs nothing kept refers to.

    rw.gc(older_than_days=30)

GC never breaks the lineage of what it keeps: a fork whose parent is purged keeps every row and
blob its own steps refer to (its inherited pointer rows become full rows first, resolved while
the parent is still there), so it still renders, diffs and forks at any of its steps;
`rw.lineage` names the purged parent as missing. A run still `running` is never purged. With
`verify`, blobs whose bytes no longer match their hash are dropped too (the next execution
stores the value again). With large values in an object store (store.objectrefs), objects no
row refers to are removed too, once older than `REWIND_BLOB_GRACE_S` (an hour): a younger one
may belong to a commit in flight (uploaded, its row not committed yet). The decisions are
here; every statement is the store's.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from typing import Any

from ..errors import InvalidRequest
from ..store.objects import place_of
from ..store.rows import (
    PARTITION_KEY, doc_refs, is_pointer, parse_refs, row_state_app, state_doc_hash,
    state_inline_refs,
)

DAY_S = 86400
OBJECT_GRACE_S = 3600.0  # no commit is in flight that long: its uploads are older only if lost


def older_than(value: Any) -> float:
    try:
        days = float(value)
    except (TypeError, ValueError):
        raise InvalidRequest(f"older_than_days must be a number of days, not {value!r}") from None
    if math.isnan(days) or days < 0:
        raise InvalidRequest(f"older_than_days must be >= 0, not {value!r}")
    return days


def _read_docs(store, hashes: set) -> dict:
    """{hash: parsed doc} straight from the stored bytes (no verification): what a doc refers
    to must be kept even if the doc itself is later found corrupt."""
    import json

    out = {}
    for h, data in store.raw_blobs(hashes).items():
        try:
            out[h] = json.loads(data)
        except ValueError:
            continue
    return out


def gc(rw, older_than_days: float, dry_run: bool = False, verify: bool = True) -> dict:
    """Purge cache and tool-cache entries older than `older_than_days`, runs created before
    then (their steps and saved states), then blobs nothing kept refers to. `dry_run` counts
    without changing anything.

    Returns {cache_entries, tool_entries, runs, blobs, bytes, corrupt_blobs}.
    """
    store = rw.store
    cutoff = time.time() - older_than(older_than_days) * DAY_S
    grace = _grace_s()  # refused before anything is changed
    corrupt = store.corrupt_blobs() if verify else {}
    with contextlib.nullcontext() if dry_run else store.transaction():
        if not dry_run:
            store.lock_for_gc()
        n_cache, n_tools = store.count_cache_older(cutoff)
        purged, surviving, parents = set(), set(), {}
        for run_id, created_at, status, parent_id in store.run_ages():
            parents[run_id] = parent_id
            (purged if created_at < cutoff and status != "running" else surviving).add(run_id)
        # A surviving fork whose parent goes keeps its inherited steps as full rows.
        materialized: dict = {}
        for run_id in sorted(r for r in store.runs_with_pointers()
                             if r in surviving and parents.get(r) in purged):
            raw = store.raw_node_rows(run_id)
            full = store.get_node_rows(run_id, parents[run_id])
            materialized[run_id] = [f for r, f in zip(raw, full) if is_pointer(r)]

        keep, kept_states, docs = _kept_references(store, purged, materialized, cutoff)
        drop_states: list = []
        for pk, app_id, seq, position, state in store.state_references():
            # a saved state stays while its run does, or while a surviving step points at it
            if (pk == PARTITION_KEY and app_id not in surviving
                    and (app_id, int(seq)) not in kept_states):
                drop_states.append((pk, app_id, seq, position))
                continue
            keep.update(state_inline_refs(state).values())
            h = state_doc_hash(state)
            if h:
                docs.add(h)
        keep.update(docs)
        for doc in _read_docs(store, docs).values():
            keep.update(doc_refs(doc))
        orphans = {h: int(size or 0) for h, size in store.blob_sizes() if h not in keep or h in corrupt}
        locations = {loc for loc in store.blob_locations(sorted(orphans)).values() if loc}

        if not dry_run:
            store.delete_cache_older(cutoff)
            for run_id, rows in materialized.items():
                store.replace_pointers(run_id, rows)
            store.delete_runs(purged)
            kept_apps = {k[0] for k in kept_states}
            store.delete_states_of_apps({d[1] for d in drop_states if d[1] not in kept_apps})
            for pk, app_id, seq, position in drop_states:
                if app_id in kept_apps:  # the others went with their whole app above
                    store.delete_state(pk, app_id, seq, position)
            store.delete_blobs(orphans)
            if orphans:
                store.forget_blobs()
    report = {
        "cache_entries": n_cache, "tool_entries": n_tools, "runs": len(purged),
        "blobs": len(orphans), "bytes": sum(orphans.values()), "corrupt_blobs": len(corrupt),
    }
    locations |= store.object_locations()
    # one sweep per place (a bucket and prefix, through whichever endpoint the rows name);
    # the configured store's endpoint wins
    places = {place_of(loc): loc for loc in sorted(locations)}
    if store.objects:
        places[store.objects.place] = store.objects.location
    if places:
        report.update(_sweep_objects(store, set(places.values()), grace, dry_run))
    return report


def _grace_s() -> float:
    raw = os.environ.get("REWIND_BLOB_GRACE_S", "").strip()
    try:
        grace = float(raw) if raw else OBJECT_GRACE_S
    except ValueError:
        grace = -1.0
    if not grace >= 0:
        raise InvalidRequest(f"REWIND_BLOB_GRACE_S must be a number of seconds >= 0, not {raw!r}",
                             field="REWIND_BLOB_GRACE_S")
    return grace


def _sweep_objects(store, locations: set, grace: float, dry_run: bool) -> dict:
    """After the rows went (committed): remove the objects of `locations` no row refers to
    and older than the grace period. Returns {objects, object_bytes}."""
    cutoff = time.time() - grace
    count = size = 0
    for location in sorted(locations):
        old = store.old_objects(location, cutoff)  # listed outside any transaction: it may be long
        if not old:
            continue
        # A writer uploads inside its transaction, under `lock_for_upload`: holding gc's lock,
        # every commit that refers to one of these has finished (and is seen) or has not
        # uploaded yet (and will upload again, the row being gone), never in between.
        with contextlib.nullcontext() if dry_run else store.transaction():
            if not dry_run:
                store.lock_for_gc()
            stray = store.stray_objects(location, old)
            if not dry_run:
                store.delete_objects(location, stray)
        count, size = count + len(stray), size + sum(stray.values())
    return {"objects": count, "object_bytes": size}


def _kept_references(store, purged: set, materialized: dict, cutoff: float) -> tuple:
    """(blob hashes, (app_id, sequence_id) saved states, docs) the surviving steps and fresh
    cache entries refer to."""
    keep: set = set()
    kept_states: set = set()
    docs: set = set()
    for run_id, app_id, seq, inputs, outputs, doc in store.step_references():
        if run_id in purged:
            continue
        keep.update(parse_refs(inputs).values())
        keep.update(parse_refs(outputs).values())
        if doc:
            docs.add(doc)
        app_id = app_id or run_id  # NULL: the row's own run
        if seq is not None:
            kept_states.add((app_id, int(seq)))
    for rows in materialized.values():
        for n in rows:
            keep.update(parse_refs(n["inputs"]).values())
            keep.update(parse_refs(n["outputs"]).values())
            if n["doc"]:
                docs.add(n["doc"])
            if n["sequence_id"] is not None:
                kept_states.add((row_state_app(n), int(n["sequence_id"])))
    for kind, value in store.kept_cache_references(cutoff):
        if kind == "outputs":
            keep.update(parse_refs(value).values())
        else:
            keep.add(value)
    return keep, kept_states, docs
