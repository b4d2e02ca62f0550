"""Reference rows: the `blobs` rows of large values whose bytes live in an object store.

With an object store configured (`REWIND_BLOBS`, `Rewind(url, blobs=...)`), a value whose
encoding is larger than `REWIND_BLOB_INLINE_MAX` (256 KB by default) is uploaded under its
content hash first, then its row is written with the hash, the size and the store's location
and no bytes, inside the caller's transaction: an upload for a transaction that rolls back is
an object no row names (gc removes it once it is older than its grace period), never a row
naming nothing. Smaller values, and values already stored inline, stay inline.

A reference row's object is fetched only when its value is read (and then kept in the store's
bounded memory of verified blobs); the bytes are checked against the hash. A missing object,
or one whose bytes no longer match (it is deleted then: it is garbage under that name), is an
`IntegrityError`, never served; the next write of the same value uploads it again, which is
how re-running the step that made it repairs it.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterable, Optional, Sequence

from ..errors import IntegrityError, InvalidRequest, StoreError
from . import objects
from .rows import blob_ok
from .sql import SQLBase, chunks


class SQLObjectRefs(SQLBase):
    def _init_objects(self) -> None:
        self.inline_max = objects.inline_max()
        self.objects: Optional[objects.ObjectStore] = None
        self.use_objects(os.environ.get("REWIND_BLOBS"), "REWIND_BLOBS")

    def use_objects(self, url: Optional[str], source: str = "blobs") -> None:
        """From now on, large values of this store go to the object store at `url`; None, ''
        or 'inline' keeps every value in the database (what is already elsewhere still reads)."""
        self.objects = None if objects.is_inline(url) else objects.open_objects(str(url).strip(), source)

    def objects_at(self, location: str) -> objects.ObjectStore:
        """The store a row's `location` names: the configured one if it is that location (or
        the row names no server and it is the same place: a folder through a symlink, a row
        recorded before rows held endpoints); else the location's own (its endpoint: the row
        says where its object was written)."""
        mine = self.objects
        if mine is not None and (mine.location == location or (
                "?" not in location and mine.place == objects.place_of(location))):
            return mine
        return objects.open_objects(location, "blobs.location")

    def stand_in(self, location: str) -> Optional[objects.ObjectStore]:
        """The configured store where it is `location`'s place through another endpoint (a
        moved MinIO): asked when the row's own server is unreachable or lacks the object."""
        mine = self.objects
        if mine is not None and mine.location != location \
                and mine.place == objects.place_of(location):
            return mine
        return None

    # writing -------------------------------------------------------------------------------
    def _put_large(self, blobs: dict, now: float) -> dict:
        """Upload the large values of `blobs` and write their reference rows; returns the
        blobs left to store inline (the small ones, and those stored inline already)."""
        target = self.objects
        big = {h for h, d in blobs.items() if len(d) > self.inline_max} if target else set()
        if not big:
            return blobs
        self.lock_for_upload()  # a gc sweep deciding which objects are garbage waits, or is waited for
        rows = self.blob_locations(big)
        new = []
        for h in sorted(big):
            if h not in rows:
                target.put(h, blobs[h])  # the bytes first: a row never names nothing
                new.append(h)
            elif rows[h] is not None:  # a reference row: its object must still hold it
                there = self.objects_at(rows[h])
                try:
                    held = there.holds(h, blobs[h])
                except (StoreError, InvalidRequest):
                    if there is target:
                        raise  # the configured store is down: nothing is written
                    held = False  # a store the row names that is gone: re-pointed below
                if not held:  # missing, altered in place, or in a dead store: repaired
                    target.put(h, blobs[h])
                    if rows[h] != target.location:
                        self.execute("UPDATE blobs SET location = ? WHERE hash = ?",
                                     (target.location, h))
        for chunk in chunks(new, 100):
            values = ", ".join(["(?, ?, ?, ?, ?)"] * len(chunk))
            self.execute(f"INSERT INTO blobs (hash, data, size, created_at, location) VALUES "
                         f"{values} ON CONFLICT (hash) DO NOTHING",
                         [x for h in chunk for x in (h, b"", len(blobs[h]), now, target.location)])
        return {h: d for h, d in blobs.items() if h not in big or rows.get(h, "") is None}

    # reading -------------------------------------------------------------------------------
    def object_bytes(self, h: str, location: str, verify: bool = True) -> Optional[bytes]:
        """The bytes of `h` from the object store at `location`. Verified: a missing object
        or one that no longer matches its hash is an IntegrityError (the latter is deleted).
        Unverified (export, gc): None when missing."""
        there = self.objects_at(location)
        try:
            data = there.get(h)
        except (objects.ObjectMissing, StoreError) as e:
            other = self.stand_in(location)
            data = None
            if other is not None:
                with contextlib.suppress(objects.ObjectMissing, StoreError):
                    data, there = other.get(h), other
            if data is None and isinstance(e, StoreError):
                raise
        if data is None:
            if not verify:
                return None
            self._forget_blob(h)
            raise IntegrityError(
                f"blob {h[:12]}… is missing from the object store {location}: it is never "
                "served; re-running the step that wrote it stores it again") from None
        if verify and not blob_ok(h, data):
            with contextlib.suppress(StoreError):
                there.delete([h])  # garbage under that name; the next write stores it again
            self._forget_blob(h)
            raise IntegrityError(
                f"blob {h[:12]}… in the object store {location} no longer matches its hash: "
                "it was removed there and is never served; re-running the step that wrote it "
                "stores it again")
        return data

    def _forget_blob(self, h: str) -> None:
        with self._lock:
            self._known.discard(h)
            kept = self._verified.pop(h, None)
            if kept is not None:
                self._verified_bytes -= kept[1]

    # maintenance ---------------------------------------------------------------------------
    def blob_locations(self, hashes: Sequence[str]) -> dict:
        """{hash: location, or None for bytes kept inline} of the rows among `hashes`."""
        return {h: loc for h, (_, loc) in self.blob_info(hashes).items()}

    def field_blob_info(self, refs: dict) -> dict:
        """{field: (size of its value as stored, location or None)} of `refs` ({field: blob
        hash}, None for a deleted field): what a plan or a page knows of a value unloaded."""
        refs = {k: h for k, h in refs.items() if isinstance(h, str)}
        info = self.blob_info(sorted(set(refs.values()))) if refs else {}
        return {k: info[h] for k, h in refs.items() if h in info}

    def blob_info(self, hashes: Sequence[str]) -> dict:
        """{hash: (size of its encoding, location or None)} of the rows among `hashes`: what a
        plan needs to know of a value without fetching it."""
        return {h: (int(size or 0), loc) for h, size, loc in self.query_in(
            "SELECT hash, size, location FROM blobs WHERE hash IN ({marks})", list(hashes))}

    def object_locations(self) -> set:
        """Every object store some row of this database refers to."""
        return {r[0] for r in self.query("SELECT DISTINCT location FROM blobs "
                                         "WHERE location IS NOT NULL")}

    def blob_page(self, after: str, limit: int = 100) -> list:
        """(hash, size, location) of the rows after `after`, in hash order."""
        return [(h, int(s or 0), loc) for h, s, loc in self.query(
            "SELECT hash, size, location FROM blobs WHERE hash > ? ORDER BY hash LIMIT ?",
            (after, limit))]

    def set_blob_location(self, h: str, data: bytes, location: Optional[str]) -> None:
        """Keep `h` inline (`data`, location None) or as a reference (empty data)."""
        self.execute("UPDATE blobs SET data = ?, location = ? WHERE hash = ?",
                     (data if location is None else b"", location, h))

    def old_objects(self, location: str, older_than: float) -> dict:
        """{hash: size} of the objects at `location` modified before `older_than` (epoch s)."""
        return {h: size for h, size, mtime in self.objects_at(location).listing()
                if mtime < older_than}

    def stray_objects(self, location: str, old: dict) -> dict:
        """Of `old` ({hash: size} at `location`), those no row of this database refers to
        there. Asked inside gc's locked transaction, so no commit in flight can be missed."""
        rows = self.blob_locations(sorted(old)) if old else {}
        here = objects.place_of(location)
        return {h: size for h, size in old.items()
                if objects.place_of(rows.get(h) or "") != here}

    def delete_objects(self, location: str, hashes: Iterable[str]) -> None:
        hashes = list(hashes)
        if hashes:
            self.objects_at(location).delete(hashes)
