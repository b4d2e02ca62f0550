"""Storage: one interface (`base.Store`), two backends (SQLite by default, PostgreSQL for teams).

Every table and every SQL statement of Rewind lives in this package; nothing in it imports the
engine, the API or the UI. One concept per module:

    base        the abstract interface, as small abstract classes (BlobStore, RunStore, ...)
    schema      tables and columns, spelled once (DDL, column tuples, row decoding, import rules)
    migrations  numbered migrations and SCHEMA_VERSION; run once, under the schema lock
    rows        row conventions: pointers, inherited rows, default reasons, docs and refs
    liveness    who owns a running run (host, pid, heartbeat lease)
    sql         connections per thread, statements, chunked IN lists
    blobs       content-addressed values: verified on read, repaired on write; docs
    runs        run rows, listing, recovery of runs whose process died
    steps       step rows; inherited steps as pointers
    graphs      pipeline graphs (edges)
    cache       node cache, tool cache, nondeterminism alarms
    burr_state  Burr's persister, subclassed so saved states refer to blobs
    sqlstore    SQLStore: the concept modules composed, opened and migrated
    sqlite      the SQLite backend (WAL; read-only files open read-only)
    postgres    the PostgreSQL backend (psycopg2; advisory-locked migrations)
    pg_admin    test databases on a PostgreSQL server; URLs without passwords

`open_store(url)` picks the backend. The names below are what the rest of Rewind imports.
"""

from __future__ import annotations

import os
import re
from typing import Optional

from ..errors import InvalidRequest, StoreError
from .base import (
    BlobStore, CacheStore, GraphStore, LiveContext, MaintenanceStore, RunStore, StateStore,
    StepStore, Store,
)
from .blobs import BLOB_MEMORY_BYTES, DOC_MEMORY
from .burr_state import BlobRefPersisterMixin
from .liveness import HEARTBEAT_LEASE_S, HOST, owner_is_gone, process_alive, process_started, this_process
from .migrations import SCHEMA_VERSION
from .rows import (
    DOC_KEY, PARTITION_KEY, PRIOR_STEP_KEY, REFS_KEY, SEQUENCE_ID_KEY, STEP_DOC_FIELDS,
    STEP_DOC_KEY, blob_ok, default_reason, inherit_row, is_pointer, make_doc, pointer_row,
    refs_json, row_state_app,
)
from .schema import (
    BURR_TABLE, CACHE_COLUMNS, NODE_COLUMNS, RUN_COLUMNS, STATE_COLUMNS, TABLES,
)
from .sql import invalid_unicode
from .sqlstore import SQLStore

__all__ = [
    "open_store", "Store", "SQLStore", "BlobStore", "RunStore", "StepStore", "GraphStore",
    "CacheStore", "StateStore", "MaintenanceStore", "LiveContext", "BlobRefPersisterMixin", "SCHEMA_VERSION",
    "PARTITION_KEY", "BURR_TABLE", "REFS_KEY", "DOC_KEY", "STEP_DOC_KEY", "PRIOR_STEP_KEY",
    "SEQUENCE_ID_KEY", "STEP_DOC_FIELDS", "RUN_COLUMNS", "NODE_COLUMNS", "CACHE_COLUMNS",
    "STATE_COLUMNS", "TABLES", "HOST", "this_process", "HEARTBEAT_LEASE_S", "DOC_MEMORY",
    "BLOB_MEMORY_BYTES", "process_started", "process_alive", "owner_is_gone", "default_reason",
    "is_pointer", "pointer_row", "inherit_row", "row_state_app", "refs_json", "make_doc",
    "blob_ok", "invalid_unicode",
]


# two letters at least: C://x is a Windows drive, not a scheme
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")


def open_store(url: Optional[str] = None, read_only: Optional[bool] = None) -> SQLStore:
    """Open the store at `url`: a path, `sqlite:///path`, or `postgresql://…`.

    With no url: `REWIND_DB` from the environment, else `./rewind.db`. `read_only=None` opens a
    SQLite file read-only when this process may not write it (`store.read_only` says so);
    `sqlite:///path?mode=ro` or `read_only=True` asks for it.
    """
    source = "url"
    if url is None:
        url, source = os.environ.get("REWIND_DB"), "REWIND_DB"
        if url is None:
            url = "rewind.db"
    url = os.fspath(url)
    if not url.strip():
        # an empty value (an unset shell variable) must not quietly mean ./rewind.db
        what = "REWIND_DB is set but" if source == "REWIND_DB" else "the database URL is"
        raise InvalidRequest(f"{what} empty: give a path, sqlite:///path or postgresql://…",
                             field=source)
    scheme = _URL_SCHEME.match(url)
    if scheme and scheme.group(1) not in ("postgresql", "postgres", "sqlite"):
        # else it would become a relative file path ("folder mysql:/x does not exist")
        prefix = "REWIND_DB: " if source == "REWIND_DB" else ""
        raise InvalidRequest(f"{prefix}unsupported database URL scheme {scheme.group(1)!r} (use a "
                             "SQLite file path or postgresql://...)", field=source)
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        return PostgresStore(url, read_only=read_only)
    from .sqlite import SQLiteStore

    path = url[len("sqlite:///"):] if url.startswith("sqlite:///") else url
    if path.startswith("sqlite://"):
        raise StoreError(f"{url!r} is not a SQLite URL; write sqlite:///path/to/file.db")
    if url.startswith("sqlite:///") and path.endswith("?mode=ro"):
        path, read_only = path[: -len("?mode=ro")], True
    return SQLiteStore(path, read_only=read_only)
