"""The SQLite backend: one file, WAL, synchronous=NORMAL, a busy timeout, Burr's SQLitePersister.

A file the process may not write (a read-only file or folder) opens read-only by itself
(`store.read_only`, with the reason): nothing is written on open, reads work, writes refuse
with a clear error. In a read-only folder a WAL database whose -shm file is absent cannot be
shared, so it is opened as immutable (the folder guarantees nobody else writes it either).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Iterator, Optional
from urllib.parse import quote

from burr.core.persistence import SQLitePersister

from ..errors import StoreError
from .burr_state import BlobRefPersisterMixin
from .schema import BURR_TABLE
from .sql import invalid_unicode
from .sqlstore import SQLStore

BUSY_TIMEOUT_MS = 30_000


class BlobRefSQLitePersister(BlobRefPersisterMixin, SQLitePersister):
    """Burr's SQLitePersister on the store's connection, writing blob references."""

    def __init__(self, store: "SQLiteStore", connection):
        super().__init__(db_path=store.path, table_name=BURR_TABLE, connection=connection)
        self.rewind_store = store

    def __del__(self):
        pass  # the store owns and closes the connection


def _not_writable(path: str) -> Optional[str]:
    """Why this process cannot write the database at `path` (None if it can)."""
    folder = os.path.dirname(path) or "."
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"the file {path} is not writable"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    return None


class SQLiteStore(SQLStore):
    write_errors = (sqlite3.OperationalError,)
    backend_errors = (sqlite3.Error,)  # what the driver raises: turned into StoreError at the API

    def __init__(self, path: str, read_only: Optional[bool] = None):
        self.path = os.path.abspath(path) if path != ":memory:" else path
        parent = os.path.dirname(self.path)
        if parent and not os.path.isdir(parent):
            raise StoreError(f"cannot open {path}: folder {parent} does not exist")
        reason = ""
        if self.path != ":memory:":
            why = _not_writable(self.path)
            if read_only is None and why:
                read_only, reason = True, why
            elif read_only:
                reason = why or "asked to open it read-only"
            if read_only and not os.path.exists(self.path):
                raise StoreError(f"cannot open {self.path} read-only: there is no such file")
        self._immutable = False
        super().__init__(self.path, read_only=bool(read_only), read_only_reason=reason)

    # connections ---------------------------------------------------------------------------
    def _connect(self):
        try:
            conn = self._open_read_only() if self.read_only else self._open()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open {self.path} as a Rewind database: {e}") from e
        return _Conn(conn)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode = WAL")  # written once, when the file is new
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = OFF")
        return conn

    def _open_read_only(self) -> sqlite3.Connection:
        for immutable in ((True,) if self._immutable else (False, True)):
            uri = f"file:{quote(self.path)}?mode=ro" + ("&immutable=1" if immutable else "")
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False)
            try:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError:
                conn.close()
                if immutable:
                    raise
                continue  # a WAL file with no -shm in a read-only folder
            self._immutable = immutable
            return conn
        raise AssertionError("unreachable")

    def execute(self, sql: str, params=()):
        if sql.lstrip()[:6].upper() == "DELETE":  # this connection may remove blobs it knew
            self.connection.seen_version = None
        return super().execute(sql, params)

    def executemany(self, sql: str, rows) -> None:
        if sql.lstrip()[:6].upper() == "DELETE":
            self.connection.seen_version = None
        try:
            self.connection.cursor().executemany(sql, [tuple(r) for r in rows])
        except UnicodeEncodeError as e:
            raise invalid_unicode(e) from None

    def others_wrote(self) -> bool:
        # PRAGMA data_version changes when, and only when, another connection commits
        conn = self.connection
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        seen, conn.seen_version = conn.seen_version, version
        return version != seen

    def _make_persister(self, connection):
        return BlobRefSQLitePersister(self, connection)

    # transactions --------------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        conn = self.connection
        if conn.depth:
            conn.depth += 1
            try:
                yield
            finally:
                conn.depth -= 1
            return
        self._refuse_write()
        conn.execute("BEGIN IMMEDIATE")  # the write lock up front: no upgrade deadlock
        conn.depth = 1
        try:
            yield
        except BaseException:
            conn.depth = 0
            conn.execute("ROLLBACK")
            raise
        conn.depth = 0
        conn.execute("COMMIT")

    @contextlib.contextmanager
    def schema_lock(self) -> Iterator[None]:
        # BEGIN IMMEDIATE holds the only write lock: one migrator at a time
        with self.transaction():
            yield

    def _table_exists(self, table: str) -> bool:
        return bool(self.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)))

    def _columns(self, table: str) -> list:
        return [r[1] for r in self.query(f"PRAGMA table_info({table})")]

    def db_size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += os.path.getsize(self.path + suffix)
        return total


class _Conn:
    """A sqlite3 connection that knows its transaction depth (sqlite3.Connection has slots)."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self.depth = 0
        self.seen_version = None  # PRAGMA data_version at this connection's last write

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def commit(self):
        # Burr's persister commits after each save; inside our transaction that is ours to do.
        if not self.depth:
            self._conn.commit()
