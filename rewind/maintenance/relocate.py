"""Moving stored values between the database and an object store (`rewind blobs migrate`).

    migrate_blobs(rw, "s3://bucket/prefix")   # values over the threshold leave the database
    migrate_blobs(rw, "inline")               # every value back into the database

Rows are moved in pages, each page in one transaction: a value is read and checked against
its hash, uploaded to the target before its row changes, and the copy it leaves (an object
elsewhere) is deleted only after the row's change committed. Interrupted, it is resumed by
running it again; a value that no longer matches its hash stops it (`IntegrityError`) with the
pages before it moved. The statements are the store's.
"""

from __future__ import annotations

from ..errors import IntegrityError
from ..store.objects import is_inline, open_objects, place_of
from ..store.rows import blob_ok

PAGE = 50


def migrate_blobs(rw, to: str) -> dict:
    """Move every stored value to where `to` says ('inline', s3://..., file:///...): values
    larger than the store's threshold to an object store, all of them for 'inline'.
    Returns {moved, bytes, kept, to}."""
    store = rw.store
    store.require_writable()
    to = str(to or "").strip()
    target = None if is_inline(to) else open_objects(to, "--to")
    moved = size = kept = 0
    after = ""
    while True:
        page = store.blob_page(after, PAGE)
        if not page:
            break
        after = page[-1][0]
        old = []
        with store.transaction():
            for h, n, where in page:
                want = target.location if target is not None and n > store.inline_max else None
                if where == want:
                    kept += 1
                    continue
                if where and want and place_of(where) == place_of(want) \
                        and target.size(h) == n:  # there already: a new endpoint only
                    store.set_blob_location(h, b"", want)
                    kept += 1
                    continue
                data = store.raw_blobs([h]).get(h)
                if data is None or not blob_ok(h, data):
                    raise IntegrityError(
                        f"blob {h[:12]}… ({'in ' + where if where else 'inline'}) is missing or "
                        "no longer matches its hash: nothing of it was moved; run `rewind gc` "
                        "to drop it, then migrate again")
                if target is not None and want is not None:
                    target.put(h, data)  # before the row names it
                store.set_blob_location(h, data, want)
                if where is not None and not (want and place_of(where) == place_of(want)):
                    old.append((where, h))  # never at the target's own place: that is the copy
                moved, size = moved + 1, size + n
        for where, h in old:  # committed: the old copies are garbage now
            store.delete_objects(where, [h])
    store.forget_blobs()
    return {"moved": moved, "bytes": size, "kept": kept, "to": target.location if target else "inline"}
