"""Blobs: content-addressed values, stored once, verified on every read, repaired on write.

`blobs` maps a content hash (the canonical hash of a value, or the raw sha256 of a doc) to
the value's serde bytes. A read checks the bytes against the hash (`IntegrityError` if they no
longer match). A write of a hash already present compares the stored bytes with the new ones
in SQL (by digest on PostgreSQL; nothing comes back unless they differ) and overwrites stored bytes that no longer
match their hash, so re-running the same inputs repairs a corrupt value. Verified blobs and
parsed docs are kept in memory (a content-addressed value never changes). Large values may
live in an object store, their rows holding only a reference (`objectrefs`).
"""

from __future__ import annotations

import collections
import time
from typing import Any, Iterable, Optional, Sequence

from . import serde
from ..errors import IntegrityError, InvalidRequest, NotFound, StoreError
from .base import BlobStore
from .objectrefs import SQLObjectRefs
from .rows import blob_ok, make_doc
from .sql import SQLBase, chunks, marks

DOC_MEMORY = 50_000  # parsed docs (state refs maps, step docs) kept in memory per store
BLOB_MEMORY_BYTES = 32 << 20  # verified blobs kept in memory per store (least recently used out)
KNOWN_MAX = 1_000_000  # hashes known to be stored (checked for presence, never re-sent)
REF_HASHES_MAX = 200_000  # blob address -> canonical hash of its value
_IMMUTABLE = (str, int, float, bool, type(None))
_COMPARE_CHUNK = 100  # (hash, bytes) pairs per comparison statement


def blob_insert(chunk: list, blobs: dict, now: float, returning: str = "") -> tuple:
    """(sql, params) inserting the blobs of `chunk` that are not stored yet."""
    values = ", ".join(["(?, ?, ?, ?)"] * len(chunk))
    return (f"INSERT INTO blobs (hash, data, size, created_at) VALUES {values} "
            f"ON CONFLICT (hash) DO NOTHING{returning}",
            [x for h in chunk for x in (h, blobs[h], len(blobs[h]), now)])


class SQLBlobs(SQLObjectRefs, SQLBase, BlobStore):
    def _init_blob_memory(self) -> None:
        # Blobs this process read and verified or wrote and committed, least recently used
        # first, up to BLOB_MEMORY_BYTES: a hot blob (a cached output every fork replays) is
        # served from memory. Immutable values are kept decoded (shared safely), others as
        # bytes (decoded per read, so no caller sees another's mutation).
        self._verified: collections.OrderedDict = collections.OrderedDict()
        self._verified_bytes = 0
        # Hashes whose bytes this store wrote or verified: a later write of one only checks
        # that it is still there (a concurrent gc may have purged it), it never re-sends or
        # re-compares the bytes.
        self._known: set = set()
        # blob address -> canonical hash of the value it holds, as this process computed it
        # (so a value loaded again, at a fork's start or from a hit, is not hashed again)
        self._ref_hashes: dict = {}
        self._docs: collections.OrderedDict = collections.OrderedDict()
        self._doc_memo: dict = {}
        self._init_objects()

    # writing -------------------------------------------------------------------------------
    def put_blobs(self, blobs: dict, served: Optional[dict] = None) -> None:
        """Store values by content hash (`blobs`: {hash: encoded bytes}); a stored copy whose
        bytes no longer match its hash is overwritten. Hashes this store wrote or verified
        before, and `served` ({hash: value} read before this transaction), are only checked
        for presence, all in one statement; the missing ones are written again."""
        known = [h for h in blobs if h in self._known]
        if served:
            known += [h for h in served if h not in blobs]
        if known and self.others_wrote():
            present = self.existing_blobs(known)
            missing = {h for h in known if h not in present}
            blobs = {h: d for h, d in blobs.items() if h not in self._known or h in missing}
            with self._lock:
                for h in missing:
                    if h not in blobs:
                        blobs[h] = serde.encode(served[h], "value")
                    self._known.discard(h)
                if self.others_seen_once:
                    # the change just seen is now consumed; what it may have purged among the
                    # hashes not checked here would never be checked again: forget them
                    self._known.intersection_update(present)
        else:  # nobody else wrote since: what this store knows is there is still there
            blobs = {h: d for h, d in blobs.items() if h not in self._known}
        self._put_new(blobs)

    def _put_new(self, blobs: dict) -> None:
        if not blobs:
            return
        now = time.time()
        blobs = self._put_large(blobs, now)
        ordered = sorted(blobs)  # one lock order for every writer (PostgreSQL row locks)
        present: list = []
        for chunk in chunks(ordered, _COMPARE_CHUNK):
            present += self._insert_blob_rows(chunk, blobs, now)
        differ = self._differing(present, blobs) if present else []
        if not differ:
            return
        differ = self._repair_references(differ, blobs, now)
        stored = self.raw_blobs(differ)
        for h in differ:
            if h in stored and not blob_ok(h, stored[h]):  # another valid encoding is left be
                self._rewrite_inline(h, blobs[h], now)

    def _rewrite_inline(self, h: str, data: bytes, now: float) -> None:
        """Store `data` in `h`'s row, in the database (the copy there was altered, or its
        object is): a write of the same value repairs it."""
        self.execute("UPDATE blobs SET data = ?, size = ?, created_at = ?, location = NULL "
                     "WHERE hash = ?", (data, len(data), now, h))
        self._forget_blob(h)
        with self._lock:
            self._docs.pop(h, None)

    def _repair_references(self, hashes: list, blobs: dict, now: float) -> list:
        """Of `hashes` (stored rows that differ from `blobs`), the inline ones. A reference row
        (its bytes in an object store) written here again, by a process that sends it inline
        (no object store, or a higher threshold): if its object no longer holds the bytes, or
        cannot be reached, the bytes are kept inline instead, so the write repairs it."""
        refs = {h: loc for h, loc in self.blob_locations(hashes).items() if loc is not None}
        for h, loc in refs.items():
            try:
                holds = self.objects_at(loc).holds(h, blobs[h])
            except (StoreError, InvalidRequest):  # unreachable, or a location that is no URL
                holds = False
            if not holds:
                self._rewrite_inline(h, blobs[h], now)
        return [h for h in hashes if h not in refs]

    def _insert_blob_rows(self, chunk: list, blobs: dict, now: float) -> list:
        """Insert the blobs of `chunk` not stored yet; the hashes that may have been stored
        before (to be compared). The statement's row count says whether all went in: then
        none was there (the common case, with no row sent back); else every one is compared,
        the ones just inserted being equal by construction."""
        cur = self.execute(*blob_insert(chunk, blobs, now))
        return [] if cur.rowcount == len(chunk) else list(chunk)

    def _differing(self, hashes: list, blobs: dict) -> list:
        """Which of these stored blobs hold other bytes than `blobs` (compared in the database:
        equal bytes, the common case, send nothing back)."""
        differ: list = []
        for chunk in chunks(hashes, _COMPARE_CHUNK):
            values = ", ".join(["(?, ?)"] * len(chunk))
            differ += [r[0] for r in self.query(
                f"WITH v(hash, data) AS (VALUES {values}) SELECT b.hash FROM blobs b "
                "JOIN v ON b.hash = v.hash WHERE b.data <> v.data",
                [x for h in chunk for x in (h, blobs[h])],
            )]
        return differ

    # reading -------------------------------------------------------------------------------
    def get_blobs(self, hashes: Iterable[str]) -> dict:
        """Decoded values by hash; each checked against its hash (`IntegrityError` if not)."""
        wanted = [h for h in dict.fromkeys(hashes) if h]
        out = {}
        missing = []
        memory = self._verified
        for h in wanted:
            hit = memory.get(h)
            if hit is None:
                missing.append(h)
            else:
                out[h] = hit[0]
                self._touch(h)
        for chunk in (chunks(missing) if missing else ()):
            for h, data, where in self.query(
                    f"SELECT hash, data, location FROM blobs WHERE hash IN ({marks(len(chunk))})", chunk):
                data = bytes(data) if where is None else self.object_bytes(h, where)
                if where is None and not blob_ok(h, data):  # an object's were checked
                    raise IntegrityError(
                        f"blob {h[:12]}… no longer matches its hash: the database was altered "
                        "outside Rewind; run `python -m rewind gc` to drop it (re-running the "
                        "step that wrote it stores it again)"
                    )
                out[h] = self._remember(h, data)
        for h in missing:
            if h not in out:
                raise NotFound(f"blob {h[:12]}… is missing from {self.url}")
        return {h: serde.decode(out[h]) if isinstance(out[h], bytes) else out[h] for h in wanted}

    def _remember(self, h: str, data: bytes) -> Any:
        """Keep a verified blob (decoded if immutable); returns what `get_blobs` hands out."""
        value = serde.decode(data)
        kept = value if type(value) in _IMMUTABLE else data
        self._keep(h, kept, len(data))
        return kept

    def _touch(self, h: str) -> None:
        """A kept blob was used: least recently used goes first."""
        try:
            self._verified.move_to_end(h)
        except KeyError:  # evicted by another thread meanwhile
            pass

    def _keep(self, h: str, kept: Any, size: int) -> None:
        with self._lock:
            self._note_known(h)
            memory = self._verified
            if h in memory:
                memory.move_to_end(h)
            elif size <= BLOB_MEMORY_BYTES // 4:  # one huge value never flushes all the rest
                memory[h] = (kept, size)
                self._verified_bytes += size
                while self._verified_bytes > BLOB_MEMORY_BYTES and memory:
                    _, (_, old) = memory.popitem(last=False)
                    self._verified_bytes -= old

    def _note_known(self, h: str) -> None:
        if len(self._known) >= KNOWN_MAX:
            self._known.clear()
        self._known.add(h)

    def remember_written(self, blobs: dict, values: Optional[dict] = None) -> None:
        """After a commit that wrote `blobs` ({hash: bytes}): they are stored and right (we
        made the bytes), so reads are served from memory without re-verifying and later
        writes of the same hashes send nothing. `values` ({hash: value}) keeps immutable ones
        decoded."""
        values = values or {}
        memory, known = self._verified, self._known
        for h, data in blobs.items():
            if h in known and h in memory:  # a doc every fork writes again: kept already
                self._touch(h)
                continue
            v = values.get(h, serde)
            self._keep(h, v if v is not serde and type(v) in _IMMUTABLE else data, len(data))

    def note_served(self, hashes: Iterable[str]) -> None:
        """Hashes a commit referred to after checking they are present."""
        with self._lock:
            for h in hashes:
                self._note_known(h)

    # canonical hashes of stored values ------------------------------------------------------
    def learn_ref_hash(self, ref: str, canonical: str) -> None:
        """`ref` (a blob address) holds a value whose canonical hash is `canonical`."""
        memo = self._ref_hashes
        if len(memo) >= REF_HASHES_MAX:
            memo.clear()
        memo[ref] = canonical

    def ref_hash(self, ref: Optional[str]) -> Optional[str]:
        return self._ref_hashes.get(ref) if ref else None

    def existing_blobs(self, hashes: Sequence[str]) -> set:
        """Which of these blob hashes the database holds now (not the in-memory copies)."""
        return {r[0] for r in self.query_in("SELECT hash FROM blobs WHERE hash IN ({marks})", hashes)}

    def forget_blobs(self) -> None:
        """Drop the in-memory blobs (after a gc deleted rows from `blobs`)."""
        with self._lock:
            self._verified.clear()
            self._verified_bytes = 0
            self._known.clear()
            self._docs.clear()

    def values(self, refs: dict) -> dict:
        """Resolve a {field: blob hash} mapping into {field: value}."""
        if not refs:
            return {}
        memory = self._verified
        out = {}
        for k, h in refs.items():  # the usual read (a hit, a fork's start): all kept decoded
            hit = memory.get(h)
            if hit is None or type(hit[0]) is bytes:
                break  # stored, or kept as bytes (decoded per read): get_blobs
            out[k] = hit[0]
        else:
            for h in refs.values():
                self._touch(h)
            return out
        blobs = self.get_blobs(refs.values())
        return {k: blobs[h] for k, h in refs.items()}

    # docs ----------------------------------------------------------------------------------
    def memo_doc(self, key: tuple, build) -> tuple:
        """(hash, bytes) of the doc `build()` returns, remembered under `key` (a tuple that
        determines the doc): a replay makes the same docs its parent made, so it skips their
        encoding and hashing. The bytes are still written each time."""
        memo = self._doc_memo
        got = memo.get(key)
        if got is None:
            got = make_doc(build())
            if len(memo) >= DOC_MEMORY:
                memo.clear()
            memo[key] = got
        return got

    def get_docs(self, hashes: Iterable[str]) -> dict:
        """Parsed content-addressed docs by hash (verified like any blob). The dicts are shared
        between callers: read them, never mutate them."""
        docs = self._docs
        out = {}
        missing = []
        for h in hashes:
            if not h or h in out:
                continue
            d = docs.get(h)
            if d is None:
                missing.append(h)
            else:
                out[h] = d
        if missing:
            got = self.get_blobs(missing)
            with self._lock:
                for h in missing:
                    d = got[h]
                    if not isinstance(d, dict):
                        raise IntegrityError(f"blob {h[:12]}… is not a Rewind document")
                    out[h] = docs[h] = d
                while len(docs) > DOC_MEMORY:
                    docs.popitem(last=False)
        return out

    # maintenance ---------------------------------------------------------------------------
    def raw_blobs(self, hashes: Iterable[str]) -> dict:
        """{hash: stored bytes} as they are (no verification, nothing kept in memory); an
        object store's bytes are fetched, a missing object is left out."""
        out = {}
        for h, d, where in self.query_in("SELECT hash, data, location FROM blobs WHERE hash IN "
                                         "({marks})", sorted(set(hashes))):
            d = bytes(d) if where is None else self.object_bytes(h, where, verify=False)
            if d is not None:
                out[h] = d
        return out

    def corrupt_blobs(self) -> dict:
        """{hash: size} of inline blobs whose bytes no longer match their hash (read in pages;
        an object store's are verified when read)."""
        bad: dict = {}
        last = ""
        while True:
            rows = self.query(
                "SELECT hash, data, size FROM blobs WHERE hash > ? AND location IS NULL "
                "ORDER BY hash LIMIT 200", (last,)
            )
            if not rows:
                return bad
            for h, data, size in rows:
                if not blob_ok(h, data):
                    bad[h] = int(size or 0)
            last = rows[-1][0]

    def blob_sizes(self) -> Iterable[tuple]:
        """(hash, size) of every blob, in pages."""
        return self.scan("SELECT hash, size FROM blobs")

    def delete_blobs(self, hashes: Iterable[str]) -> None:
        self.execute_in("DELETE FROM blobs WHERE hash IN ({marks})", sorted(hashes))

    def blob_totals(self) -> tuple:
        count, size = self.query("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blobs")[0]
        return int(count), int(size)

