"""Replay performance, as functional properties (no timings): the value memory evicts the least
recently used, a commit re-sends no blob this store already wrote, hit counters are one UPDATE
per commit, loaded values keep the hash this process computed, cache_stats reads the
maintained statistic, on both backends."""

from __future__ import annotations

import os
import sys

import pytest

import rewind
from rewind.keys import canonical as hashing
from rewind.store import blobs as blob_mod

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import workload as W  # noqa: E402


def _statements(store, fn):
    """SQL statements `fn()` sends (SQLite trace callback; PostgreSQL counting cursor)."""
    seen: list = []
    conn = store.connection
    raw = getattr(conn, "_conn", conn)
    if hasattr(raw, "set_trace_callback"):
        raw.set_trace_callback(seen.append)
        try:
            fn()
        finally:
            raw.set_trace_callback(None)
        return seen
    import psycopg2.extensions

    class Counting(psycopg2.extensions.cursor):
        def execute(self, q, *a, **k):
            # statements held and sent together arrive in one execute, one a line
            seen.extend((q if isinstance(q, str) else q.decode()).split(";\n"))
            return super().execute(q, *a, **k)

    old = raw.cursor_factory
    raw.cursor_factory = Counting
    try:
        fn()
    finally:
        raw.cursor_factory = old
    return seen


def test_value_memory_evicts_the_least_recently_used(tmp_path, monkeypatch):
    monkeypatch.setattr(blob_mod, "BLOB_MEMORY_BYTES", 4000)
    rw = rewind.Rewind(str(tmp_path / "lru.db"))
    store = rw.store
    vals = {f"k{i}": [i, "x" * 900] for i in range(5)}  # mutable: kept as bytes (906 B)
    data = {k: rewind.store.serde.encode(v, k) for k, v in vals.items()}
    refs = {k: rewind.store.serde.blob_ref(d) for k, d in data.items()}
    with store.transaction():
        store.put_blobs({refs[k]: data[k] for k in vals})
    store.forget_blobs()
    for i in range(4):  # four in memory, k0 the oldest
        store.get_blobs([refs[f"k{i}"]])
    store.get_blobs([refs["k0"]])  # k0 used again: k1 is now the least recently used
    store.get_blobs([refs["k4"]])  # a fifth does not fit: one goes
    memory = store._verified
    assert refs["k1"] not in memory
    assert all(refs[k] in memory for k in ("k0", "k2", "k3", "k4"))
    assert list(memory)[-3:] == [refs["k3"], refs["k0"], refs["k4"]]
    assert store._verified_bytes <= 4000
    rw.close()


def test_a_no_edit_fork_sends_no_blob_bytes_and_one_hit_update(db_url):
    rw = rewind.Rewind(db_url)
    p = W.make_pipeline("perf_fork")
    root = rw.run(p, {"topic": W.topic(1234)}, use_cache=False)
    rw.fork(root.id, at=W.FORK_AT)
    sql = _statements(rw.store, lambda: rw.fork(root.id, at=W.FORK_AT))
    upper = [s.lstrip().upper() for s in sql]
    assert not [s for s in upper if s.startswith("INSERT INTO BLOBS")], sql
    assert not [s for s in upper if "JOIN V ON" in s or "DIGEST" in s], sql  # no byte compare
    # (SQLite's trace repeats a statement for each trigger it fires: count distinct ones)
    # the hits: one statement adding all six to the cache's total, no entry touched
    assert not [s for s in upper if s.startswith("UPDATE CACHE ")], sql
    hits = [s for s in upper if "CACHE_STAT" in s and "HITS" in s and "SELECT COALESCE" not in s]
    assert len(hits) == 1 and ("HITS + 6 " in hits[0] or "VALUES (6)" in hits[0]), hits
    presence = sorted({s for s in upper if s.startswith("SELECT HASH FROM BLOBS")})
    # one check that the blobs referred to are still there; on SQLite only when another
    # connection committed since this one last wrote (PRAGMA data_version): nobody did here
    from rewind.store.sqlite import SQLiteStore

    assert len(presence) == (0 if isinstance(rw.store, SQLiteStore) else 1), sql
    fork = rw.fork(root.id, at=W.FORK_AT)
    assert [s.status for s in fork.steps] == ["inherited"] * 2 + ["cached"] * 6
    assert rw.cache_stats()["hits"] == 3 * 6
    rw.close()


def test_a_blob_purged_meanwhile_is_written_again(db_url):
    rw = rewind.Rewind(db_url)
    p = W.make_pipeline("perf_purge")
    root = rw.run(p, {"topic": W.topic(4321)}, use_cache=False)
    ref = root.steps[4].output_refs[W.FIELDS[W.NODES[4]]]
    with rw.store.transaction():  # a concurrent gc, as far as this process can tell
        rw.store.execute("DELETE FROM blobs WHERE hash = ?", (ref,))
    fork = rw.fork(root.id, at=W.FORK_AT)
    assert fork.steps[4].status == "cached"
    assert rw.store.existing_blobs([ref]) == {ref}
    fresh = rewind.Rewind(db_url)
    assert fresh.get_run(fork.id).steps[4].outputs[W.FIELDS[W.NODES[4]]].startswith(W.NODES[4] + ":")
    fresh.close()
    rw.close()


def test_per_step_hashing_does_not_walk_the_state(tmp_path, monkeypatch):
    """A cached fork hashes nothing it already knows: loaded values keep this process's hash,
    however many fields the state carries."""
    rw = rewind.Rewind(str(tmp_path / "h.db"))
    p = W.make_pipeline("perf_hash")
    state = {"topic": W.topic(99), **{f"extra{i}": f"value {i}" * 50 for i in range(100)}}
    root = rw.run(p, state, use_cache=False)
    calls = {"n": 0}
    real = hashing.canonical_hash

    def counting(*a, **k):
        calls["n"] += 1
        return real(*a, **k)

    import rewind.engine.keys as keys

    monkeypatch.setattr(keys, "canonical_hash", counting)
    fork = rw.fork(root.id, at=W.FORK_AT)
    assert [s.status for s in fork.steps][2:] == ["cached"] * 6
    assert calls["n"] == 0, calls
    rw.close()


def test_cache_stats_is_the_maintained_statistic(db_url):
    rw = rewind.Rewind(db_url)
    p = W.make_pipeline("perf_stats")
    root = rw.run(p, {"topic": W.topic(777)})
    rw.fork(root.id, at=W.FORK_AT)
    s = rw.store
    got = rw.cache_stats()
    served = s.query("SELECT COUNT(*) FROM nodes WHERE status = 'cached'")[0][0]
    assert got["entries"] == s.query("SELECT COUNT(*) FROM cache")[0][0]
    assert got["hits"] == served == 6  # the steps the cache served
    assert got["blobs"] == s.query("SELECT COUNT(*) FROM blobs")[0][0]
    assert got["blob_bytes"] == s.query("SELECT COALESCE(SUM(size), 0) FROM blobs")[0][0]
    assert rw.purge_cache(0) >= 8
    got = rw.cache_stats()
    assert got["entries"] == s.query("SELECT COUNT(*) FROM cache")[0][0]
    assert got["hits"] == served  # served is served, purged or not
    sql = _statements(s, rw.cache_stats)
    assert not [q for q in sql if "FROM BLOBS" in q.upper() or "COUNT(*) FROM CACHE" in q.upper()]
    rw.close()
