"""The write buffer's batched statements mean what one statement per row meant: cache entries
put many at a time (a key that keeps its first output, one that is replaced, a key twice in one
commit) and blobs inserted many at a time (all new, some stored before, one stored corrupt)."""

from __future__ import annotations

import time

import pytest

import rewind
from rewind.keys import canonical_hash
from rewind.store.rows import blob_ok


def _entry(node: str, key: str, output: str, **extra) -> dict:
    return {"node": node, "input_hash": key, "output_hash": output, "outputs": "{}",
            "cached_at": time.time(), "hits": 0, "source_run": "r", **extra}


@pytest.fixture
def store(store_url):
    rw = rewind.Rewind(store_url)
    yield rw.store
    rw.close()


def _outputs(store, *keys) -> dict:
    return {k: (store.cache_get(*k) or {}).get("output_hash") for k in keys}


def test_cache_entries_put_at_once_keep_or_replace_as_each_asks(store):
    with store.transaction():
        store.cache_put_many([(_entry("a", "k1", "old1"), False), (_entry("a", "k2", "old2"), False)])
    with store.transaction():
        store.cache_put_many([
            (_entry("a", "k1", "new1"), True),    # keeps its first output
            (_entry("a", "k2", "new2"), False),   # replaced
            (_entry("b", "k1", "b1"), True),      # a new key, whichever it asks
            (_entry("b", "k2", "b2"), False),
        ])
    assert _outputs(store, ("a", "k1"), ("a", "k2"), ("b", "k1"), ("b", "k2")) == {
        ("a", "k1"): "old1", ("a", "k2"): "new2", ("b", "k1"): "b1", ("b", "k2"): "b2"}
    assert store.cache_stats()["entries"] == 4


@pytest.mark.parametrize("first_keeps, second_keeps, expected", [
    (False, False, "second"),  # the later replace wins, as with one statement each
    (False, True, "first"),    # the later one keeps what the earlier one put
    (True, False, "second"),
    (True, True, "first"),
])
def test_a_key_twice_in_one_batch_ends_as_two_statements_in_order_would(
        store, first_keeps, second_keeps, expected):
    with store.transaction():
        store.cache_put_many([(_entry("n", "k", "first"), first_keeps),
                              (_entry("n", "k", "second"), second_keeps)])
    assert store.cache_get("n", "k")["output_hash"] == expected
    assert store.cache_stats()["entries"] == 1


def test_more_entries_than_one_statement_holds(store):
    entries = [(_entry("n", f"k{i}", f"o{i}"), i % 2 == 0) for i in range(137)]
    with store.transaction():
        store.cache_put_many(entries)
    got = store.cache_get_many([("n", f"k{i}") for i in range(137)])
    assert {k[1]: e["output_hash"] for k, e in got.items()} == {f"k{i}": f"o{i}" for i in range(137)}


def test_blobs_inserted_at_once_with_some_stored_before_and_one_corrupt(store):
    values = {f"v{i}": f"value {i}" * 50 for i in range(6)}
    blobs = {canonical_hash(v): rewind.store.serde.encode(v) for v in values.values()}
    hashes = sorted(blobs)
    with store.transaction():  # three stored before, one of them then corrupted in place
        store._put_new({h: blobs[h] for h in hashes[:3]})
    with store.transaction():
        store.execute("UPDATE blobs SET data = ? WHERE hash = ?", (b'"tampered"', hashes[0]))
    before = store.cache_stats()["blobs"]
    with store.transaction():
        store._put_new(dict(blobs))
    raw = store.raw_blobs(hashes)
    assert all(blob_ok(h, raw[h]) for h in hashes)  # the corrupt copy was overwritten
    assert bytes(raw[hashes[0]]) == blobs[hashes[0]]
    assert store.cache_stats()["blobs"] == before + 3  # only the three new ones were counted
