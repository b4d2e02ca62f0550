"""Imported cache entries are not trusted: each is re-verified here, or left out.

An export document's cache entry says "node N on inputs with hash H wrote outputs O". Served
as it is, a forged entry for inputs this database computes later would be a cache hit (and
`diff` would call the node identical). So an entry is imported only when this process can
compute its key itself:

- a step of the document (executed, cached or inherited) was recorded with exactly this node,
  input hash, output hash and outputs, and its run's pipeline is registered here;
- the step's recorded read values and params, hashed by this process's code for the node (its
  code fingerprint included), give the entry's input hash: a key made with other code, other
  inputs, or unrecorded runtime inputs is refused;
- the outputs' values hash to the entry's output hash under the node's policy;
- the node is cacheable (never a side effect).

`cached_at` is clamped to the import time (an entry "from 2100" would never expire), and an
entry never replaces one this database already has. What stays unverifiable is what only
re-executing could show: that the node, run on those inputs, wrote those outputs.
"""

from __future__ import annotations

import json
import logging
from typing import Optional

from ..store import serde
from ..errors import RewindError
from ..store.rows import parse_refs
from .references import Checked

logger = logging.getLogger("rewind")
_PRODUCING = ("executed", "cached", "inherited")


def _step_view(n: dict, blobs: dict) -> dict:
    """A step row with its doc's fields filled in (a column that is set wins, as on read)."""
    doc: dict = {}
    if n.get("doc") and n["doc"] in blobs:
        try:
            doc = json.loads(blobs[n["doc"]])
        except ValueError:
            doc = {}
    out = dict(n)
    for field in ("input_hash", "output_hash"):
        if out.get(field) is None:
            out[field] = doc.get(field)
    for field in ("field_hashes", "params", "inputs", "outputs"):
        value = out.get(field)
        out[field] = json.loads(value) if isinstance(value, str) else (doc.get(field) or {})
    return out


class _Values:
    """Blob values of the document, else of the database (verified there)."""

    def __init__(self, store, blobs: dict):
        self.store, self.blobs = store, blobs

    def __call__(self, refs: dict) -> dict:
        out, absent = {}, {}
        for k, h in refs.items():
            if h in self.blobs:
                out[k] = serde.decode(self.blobs[h])
            else:
                absent[k] = h
        if absent:
            out.update(self.store.values(absent))
        return out


def _refusal(rw, entry: dict, steps: list, runs: dict, values: _Values) -> Optional[str]:
    """Why `entry` cannot be trusted (None: its key and outputs verify here)."""
    from ..keys import policy_of
    from ..analysis.audit import output_hash_of, recomputed_input_hash, sample_spec

    refs = parse_refs(entry["outputs"])
    candidates = [s for s in steps if s["node"] == entry["node"] and s["status"] in _PRODUCING
                  and s["input_hash"] == entry["input_hash"]
                  and s["output_hash"] == entry["output_hash"] and s["outputs"] == refs]
    if not candidates:
        return "no step of the document recorded these inputs and outputs"
    step = candidates[0]
    if any(k.startswith("input:") for k in step["field_hashes"]):
        return "the step ran on runtime inputs, which are not recorded"
    try:
        inner = rw.pipeline(runs[step["run_id"]]["pipeline"]).action(entry["node"])
    except RewindError as e:
        return f"its pipeline cannot be checked here ({e})"
    policy = policy_of(inner)
    if not policy.cacheable:
        return "the node is a side effect, never cached"
    try:
        key, _ = recomputed_input_hash(sample_spec(entry["node"], inner, step["params"]),
                                       values(step["inputs"]))
        if key != entry["input_hash"]:
            return "its key is not the one this database computes for the recorded inputs"
        if output_hash_of(values(refs), policy, entry["node"]) != entry["output_hash"]:
            return "its outputs do not hash to its output hash"
    except RewindError as e:
        return f"its inputs or outputs cannot be read ({e})"
    return None


def trusted_cache_entries(rw, checked: Checked, now: float) -> tuple:
    """(entries to import, {(node, input_hash): why refused}) of the document's cache."""
    steps = [_step_view(n, checked.blobs) for n in checked.nodes]
    runs = {r["id"]: r for r in checked.runs}
    values = _Values(rw.store, checked.blobs)
    kept, refused = [], {}
    for entry in checked.cache:
        why = _refusal(rw, entry, steps, runs, values)
        if why is not None:
            refused[(entry["node"], entry["input_hash"])] = why
            logger.info("import: cache entry of %s (%s…) left out: %s",
                        entry["node"], entry["input_hash"][:12], why)
            continue
        kept.append({**entry, "cached_at": min(float(entry["cached_at"]), now), "hits": 0})
    return kept, refused
