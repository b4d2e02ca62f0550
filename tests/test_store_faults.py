"""Storage under faults and forgery, on both backends.

- A blob whose stored bytes no longer match its hash is overwritten by the next correct write:
  re-running the same inputs repairs it (the value reads again, the run completes).
- Imported cache entries are not trusted: a forged entry (for inputs this database computes
  later, or with outputs its step never wrote, or made by other code) is never served; a
  `cached_at` from the future is clamped to the import time, so the entry expires and gc
  removes it; an import never replaces a local entry.
"""

from __future__ import annotations

import base64
import copy
import json
import time

import pytest

from rewind import Rewind
from rewind.store import serde
from rewind.keys import canonical_hash

from test_maintenance import CALLS, PIPELINE

YEAR_2100 = 4102444800.0


def _corrupt(store, h: str, data: bytes = b'{"text":"TAMPERED","words":1}') -> None:
    with store.transaction():
        store.execute("UPDATE blobs SET data = ? WHERE hash = ?", (data, h))


def test_a_corrupt_blob_is_repaired_by_running_the_same_inputs(db_url):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    run = rw.run(PIPELINE, {"topic": "repair me"})
    draft_blob = run.step("draft").output_refs["draft"]
    topic_blob = run.step("plan").input_refs["topic"]
    _corrupt(rw.store, draft_blob)
    _corrupt(rw.store, topic_blob, b"\x00\xff not json")
    rw.close()

    fresh = Rewind(db_url, pipelines=[PIPELINE])
    CALLS.clear()
    again = fresh.run(PIPELINE, {"topic": "repair me"})  # the same inputs, a new run
    assert again.status == "completed", again.error
    assert again.step("draft").status == "executed"  # the corrupt cache entry was a miss
    assert "draft" in CALLS and "plan" not in CALLS
    # both values are readable again, from a handle with nothing in memory
    reader = Rewind(db_url, pipelines=[PIPELINE])
    for rid in (run.id, again.id):
        got = reader.get_run(rid)
        assert got.step("plan").inputs == {"topic": "repair me"}
        assert got.step("draft").outputs["draft"]["text"] == "PLAN FOR REPAIR ME FROM 3 HITS (T=0.0)"
    assert reader.gc(older_than_days=365)["corrupt_blobs"] == 0
    # and the cache serves it again
    third = reader.run(PIPELINE, {"topic": "repair me"})
    assert third.step("draft").status == "cached" and third.total_tokens == 0
    for h in (fresh, reader):
        h.close()


def test_a_valid_blob_is_not_rewritten(db_url):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    run = rw.run(PIPELINE, {"topic": "stable"})
    h = run.step("draft").output_refs["draft"]
    def stored():
        return [(bytes(d), t) for d, t in rw.store.query("SELECT data, created_at FROM blobs WHERE hash = ?", (h,))]

    before = stored()
    with rw.store.transaction():
        rw.store.put_blobs({h: serde.encode(run.step("draft").outputs["draft"], "draft")})
    assert stored() == before  # same bytes: nothing written
    rw.close()


# --- import --------------------------------------------------------------------------------------
def _export(tmp_path) -> tuple:
    src = Rewind(str(tmp_path / "attacker.db"), pipelines=[PIPELINE])
    run = src.run(PIPELINE, {"topic": "shared"})
    # the key `draft` gets for a plan the victim will compute later (the attacker can compute it)
    probe = src.fork(run.id, at="draft", edit={"plan": "the victim's plan"})
    victim_key = probe.step("draft").input_hash
    doc = json.loads(json.dumps(src.export_run(run.id)))
    src.close()
    return doc, run, victim_key


def _forge(doc: dict, node: str, input_hash: str, outputs: dict, **extra) -> dict:
    doc = copy.deepcopy(doc)
    refs = {}
    for k, v in outputs.items():
        h = canonical_hash(v, k)
        doc["blobs"][h] = base64.b64encode(serde.encode(v, k)).decode()
        refs[k] = h
    doc["cache"].append({
        "node": node, "input_hash": input_hash, "output_hash": canonical_hash(outputs),
        "outputs": json.dumps(refs, sort_keys=True), "prompt_tokens": 0, "completion_tokens": 0,
        "tokens": 60, "latency_ms": 1.0, "cached_at": time.time(), "hits": 0,
        "determinism": "deterministic", "source_run": doc["run_id"], **extra,
    })
    return doc


def test_a_forged_import_entry_is_never_served(db_url, tmp_path):
    doc, run, victim_key = _export(tmp_path)
    evil = {"draft": {"text": "EVIL", "words": 1}}
    real = next(c for c in doc["cache"] if c["node"] == "draft")
    forged = [
        _forge(doc, "draft", victim_key, evil),  # for inputs the victim computes later
        _forge(doc, "polish", canonical_hash("any key"), {"report": "EVIL"}),
    ]
    # the real entry's key with other outputs (its step never wrote them)
    swapped = copy.deepcopy(doc)
    swapped["cache"] = [c for c in swapped["cache"] if c["node"] != "draft"]
    swapped = _forge(swapped, "draft", real["input_hash"], evil)
    forged.append(swapped)

    rw = Rewind(db_url, pipelines=[PIPELINE])
    victim = rw.run(PIPELINE, {"topic": "the victim's own topic"})
    for d in forged:
        assert rw.import_run(d) == [run.id]
    entries = {(r[0], r[1]): r[2] for r in rw.store.query("SELECT node, input_hash, output_hash FROM cache")}
    assert (("draft", victim_key)) not in entries
    assert entries.get(("draft", real["input_hash"])) in (None, real["output_hash"])
    assert canonical_hash(evil) not in entries.values()

    CALLS.clear()
    fork = rw.fork(victim.id, at="draft", edit={"plan": "the victim's plan"})
    assert fork.step("draft").status == "executed" and CALLS[0] == "draft"
    assert fork.step("draft").outputs["draft"]["text"] == "THE VICTIM'S PLAN"
    # the imported run replays only what verifies; nothing evil anywhere
    replay = rw.fork(run.id, at="draft")
    assert replay.step("draft").outputs["draft"]["text"] != "EVIL"
    d = rw.diff(victim.id, fork.id)
    assert d.first_divergence == "draft"
    rw.close()


def test_a_legitimate_imported_entry_verifies_and_is_dated_no_later_than_now(db_url, tmp_path):
    doc, run, _ = _export(tmp_path)
    for c in doc["cache"]:
        c["cached_at"] = YEAR_2100
    rw = Rewind(db_url, pipelines=[PIPELINE])
    before = time.time()
    rw.import_run(doc)
    rows = rw.store.query("SELECT node, cached_at FROM cache")
    assert sorted(r[0] for r in rows) == ["draft", "plan", "polish"]  # every real entry kept
    assert all(before - 1 <= r[1] <= time.time() for r in rows)
    CALLS.clear()
    replay = rw.fork(run.id, at="plan")
    assert replay.total_tokens == 0 and CALLS == []  # served: they verified here
    assert rw.gc(older_than_days=0)["cache_entries"] == 3  # and they age like any entry
    rw.close()


def test_imported_entries_need_the_pipeline_and_never_replace_local_ones(db_url, tmp_path):
    doc, run, _ = _export(tmp_path)
    unregistered = Rewind(db_url)  # no pipeline here: no key can be computed, no entry imported
    assert unregistered.import_run(doc) == [run.id]
    assert unregistered.store.query("SELECT COUNT(*) FROM cache")[0][0] == 0
    assert unregistered.get_run(run.id).step("draft").outputs == run.step("draft").outputs
    unregistered.close()

    rw = Rewind(db_url, pipelines=[PIPELINE])
    local = rw.run(PIPELINE, {"topic": "shared"}, use_cache=False)  # this database's own entries
    own = sorted(map(tuple, rw.store.query("SELECT node, input_hash, source_run FROM cache")))
    other = copy.deepcopy(doc)
    other["runs"][0]["id"] = other["run_id"] = "imported-copy"
    for n in other["nodes"]:
        n["run_id"] = "imported-copy"
    for s in other["states"]:
        s["app_id"] = "imported-copy"
    rw.import_run(other)
    assert sorted(map(tuple, rw.store.query("SELECT node, input_hash, source_run FROM cache"))) == own
    assert all(r[2] == local.id for r in own)
    rw.close()


def test_delete_failed_steps(db_url):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    run = rw.run(PIPELINE, {"topic": "failing"})
    store = rw.store
    with store.transaction():
        store.execute("UPDATE nodes SET status = 'failed' WHERE run_id = ? AND idx >= 2", (run.id,))
        assert store.delete_failed_steps(run.id) == 2
    assert [r["idx"] for r in store.raw_node_rows(run.id)] == [0, 1]
    assert store.delete_failed_steps("no-such-run") == 0
    rw.close()


@pytest.mark.parametrize("bad", [float("nan"), -1.0])
def test_purge_cache_refuses_nan_and_negative_ages(db_url, bad):
    from rewind.errors import InvalidRequest

    rw = Rewind(db_url, pipelines=[PIPELINE])
    rw.run(PIPELINE, {"topic": "kept"})
    with pytest.raises(InvalidRequest):
        rw.store.purge_cache(bad)
    assert rw.store.query("SELECT COUNT(*) FROM cache")[0][0] == 3
    rw.close()
