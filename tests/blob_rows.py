"""Blob rows for tests that write the blobs table directly: the insert, a value's (hash, bytes)
as Rewind stores it, and how many copies of a hash the table holds."""

from __future__ import annotations

from rewind.store import serde
from rewind.keys import sha256_hex

BLOB_INSERT = "INSERT INTO blobs (hash, data, size, created_at) VALUES (?, ?, ?, ?)"


def blob(value) -> tuple:
    data = serde.encode(value, "value")
    return sha256_hex(data), data


def blob_row(value) -> tuple:
    h, data = blob(value)
    return (h, data, len(data), 1.0)


def count_blob(store, h) -> int:
    return store.query("SELECT COUNT(*) FROM blobs WHERE hash = ?", (h,))[0][0]
