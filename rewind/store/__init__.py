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
import stat
from typing import Optional

from ..errors import InvalidRequest
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
    "blob_ok", "invalid_unicode", "sqlite_url",
]


# two letters at least: C://x is a Windows drive, not a scheme
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")


def open_store(url: Optional[str] = None, read_only: Optional[bool] = None) -> SQLStore:
    """Open the store at `url`: a path, `sqlite:///path`, or `postgresql://…`.

    With no url: `REWIND_DB` from the environment, else `./rewind.db`. `read_only=None` opens a
    SQLite file read-only when this process may not write it (`store.read_only` says so);
    `sqlite:///path?mode=ro` or `read_only=True` asks for it (`sqlite_url` reads the URL). A
    bad URL, or a path that is no regular file (a device, a FIFO), is an `InvalidRequest`.
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
        raise InvalidRequest(f"{_prefix(source)}unsupported database URL scheme "
                             f"{scheme.group(1)!r} (use a SQLite file path or postgresql://...)",
                             field=source)
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        return PostgresStore(url, read_only=read_only)
    from .sqlite import SQLiteStore

    path, create = url, True
    if scheme and scheme.group(1) == "sqlite":
        path, mode = sqlite_url(url, source)
        if mode is not None:
            wanted = mode == "ro"
            if read_only is not None and bool(read_only) != wanted:
                raise InvalidRequest(f"{_prefix(source)}the URL asks for mode={mode} but the "
                                     f"store was opened with read_only={read_only}", field=source)
            read_only, create = wanted, mode == "rwc"
    try:
        if path != ":memory:":
            _check_regular(path)
        return SQLiteStore(path, read_only=read_only, create=create)
    except InvalidRequest as e:  # the path: named as where it came from (the CLI's --db)
        if e.field is not None:
            raise
        raise InvalidRequest(f"{_prefix(source)}{e}", field=source) from None


_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def _check_regular(path: str) -> None:
    """Refuse a path that exists and is no regular file (followed through symlinks): SQLite
    would answer /dev/null with "disk I/O error" and block on a FIFO."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # absent (created later) or unreadable: opening it says why
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # a folder: SQLiteStore says so
        kind = next((k for test, k in _KINDS if test(mode)), "not a file")
        raise InvalidRequest(f"cannot open {path}: it is not a regular file ({kind}); name a "
                             "SQLite database file")


def _prefix(source: str) -> str:
    return "REWIND_DB: " if source == "REWIND_DB" else ""


_SQLITE_MODES = {"ro": "read-only", "rw": "read-write, the file must exist",
                 "rwc": "read-write, created if absent (the default)"}


def sqlite_url(url: str, source: str = "url") -> tuple:
    """(path, mode or None) of a `sqlite://` URL, read as SQLAlchemy reads it: `sqlite:///rel.db`
    is relative, `sqlite:////abs.db` absolute, `sqlite://` (or `sqlite:///:memory:`) in memory;
    the path is taken as written (no percent-decoding). The one option is `mode=ro|rw|rwc`
    (SQLite's URI modes); any other is refused by name, as is a host, user or password."""
    prefix = _prefix(source)
    rest = url[len("sqlite://"):]
    authority = re.match(r"[^/?]*", rest).group(0)
    if authority:
        # what is before the path would silently become part of a file name; never repeat a
        # user part (it may hold a password)
        what = "a user or password" if "@" in authority else f"a host ({authority!r})"
        raise InvalidRequest(
            f"{prefix}a SQLite URL names no host, user or password, but this one has {what}; "
            "write sqlite:///relative/path.db or sqlite:////absolute/path.db", field=source)
    rest = rest[len(authority):]
    path, _, query = rest.partition("?")
    path = path[1:] if path.startswith("/") else path
    mode = None
    if "?" in rest:
        seen: set = set()
        for part in query.split("&"):
            name, eq, value = part.partition("=")
            if name != "mode":
                raise InvalidRequest(
                    f"{prefix}unknown option {name!r} in the SQLite URL {url!r}; the only option "
                    "is mode=ro|rw|rwc", field=source)
            if name in seen:
                raise InvalidRequest(f"{prefix}option 'mode' is given twice in {url!r}",
                                     field=source)
            seen.add(name)
            if not eq or value not in _SQLITE_MODES:
                modes = "; ".join(f"{k}: {v}" for k, v in _SQLITE_MODES.items())
                raise InvalidRequest(f"{prefix}option mode={value!r} in {url!r} is not one of "
                                     f"ro, rw, rwc ({modes})", field=source)
            mode = value
    return (path or ":memory:"), mode
