"""The SQLite backend: one file, WAL, synchronous=NORMAL, a busy timeout, Burr's SQLitePersister."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import Iterator

from burr.core.persistence import SQLitePersister

from .errors import StoreError
from .store import BURR_TABLE, BlobRefPersisterMixin, SQLStore, invalid_unicode

BUSY_TIMEOUT_MS = 30_000


class BlobRefSQLitePersister(BlobRefPersisterMixin, SQLitePersister):
    """Burr's SQLitePersister on the store's connection, writing blob references."""

    def __init__(self, store: "SQLiteStore", connection: sqlite3.Connection):
        super().__init__(db_path=store.path, table_name=BURR_TABLE, connection=connection)
        self.rewind_store = store

    def __del__(self):
        pass  # the store owns and closes the connection


class SQLiteStore(SQLStore):
    def __init__(self, path: str):
        self.path = os.path.abspath(path) if path != ":memory:" else path
        parent = os.path.dirname(self.path)
        if parent and not os.path.isdir(parent):
            raise StoreError(f"cannot open {path}: folder {parent} does not exist")
        super().__init__(self.path)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = OFF")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open {self.path} as a Rewind database: {e}") from e
        return _Conn(conn)

    def executemany(self, sql: str, rows) -> None:
        try:
            self.connection.cursor().executemany(sql, [tuple(r) for r in rows])
        except UnicodeEncodeError as e:
            raise invalid_unicode(e) from None

    def _make_persister(self, connection):
        return BlobRefSQLitePersister(self, connection)

    def _add_column_if_missing(self, table: str, column: str, ddl_type: str) -> None:
        cols = [r[1] for r in self.execute(f"PRAGMA table_info({table})").fetchall()]
        if column not in cols:
            self.execute(f"ALTER TABLE {table} ADD COLUMN {column} {ddl_type}")

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
        conn.execute("BEGIN IMMEDIATE")
        conn.depth = 1
        try:
            yield
        except BaseException:
            conn.depth = 0
            conn.execute("ROLLBACK")
            raise
        conn.depth = 0
        conn.execute("COMMIT")

    def db_size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            try:
                total += os.path.getsize(self.path + suffix)
            except OSError:
                pass
        return total


class _Conn:
    """A sqlite3 connection that knows its transaction depth (sqlite3.Connection has slots)."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self.depth = 0

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def commit(self):
        # Burr's persister commits after each save; inside our transaction that is ours to do.
        if not self.depth:
            self._conn.commit()
