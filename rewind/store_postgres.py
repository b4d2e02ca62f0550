"""The PostgreSQL backend: the shared schema and SQL on psycopg2, Burr's PostgreSQLPersister.

    rw = Rewind("postgresql://user@host:5432/rewind")

Same tables and behaviour as the SQLite backend; for several Rewind instances (or processes,
or hosts) sharing one database. One connection per thread (the base class keeps them), in
autocommit mode so a read never leaves a transaction open; `transaction()` issues BEGIN/COMMIT
itself and nests with savepoints. Schema creation holds an advisory lock, so processes opening
a fresh database at once do not race on CREATE TABLE.

`create_test_database(base_url)` / `drop_database(url)` give tests a fresh database each.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from typing import Any, Iterator, Optional, Sequence
from urllib.parse import urlsplit, urlunsplit

from .errors import InvalidRequest, StoreError
from .store import BURR_TABLE, PARTITION_KEY, BlobRefPersisterMixin, SQLStore

try:
    import psycopg2
    import psycopg2.extensions
    from burr.integrations.persisters.b_psycopg2 import PostgreSQLPersister
except ImportError as e:  # pragma: no cover - both are dependencies of the package
    raise StoreError(
        f"PostgreSQL support needs psycopg2 (pip install psycopg2-binary): {e}"
    ) from e

# any 64-bit number, fixed: every Rewind process agrees on it
SCHEMA_LOCK_KEY = 0x52657769_6E640001 & 0x7FFFFFFFFFFFFFFF
CONNECT_TIMEOUT_S = 10


class _Conn(psycopg2.extensions.connection):
    """A psycopg2 connection that knows its transaction depth (for nesting)."""

    depth = 0


class BlobRefPostgresPersister(BlobRefPersisterMixin, PostgreSQLPersister):
    """Burr's PostgreSQLPersister on the store's connection, writing blob references."""

    def __init__(self, store: "PostgresStore", connection):
        super().__init__(connection, table_name=BURR_TABLE)
        self.rewind_store = store

    def load(self, partition_key, app_id, sequence_id=None, **kwargs):
        return super().load(
            partition_key if partition_key is not None else PARTITION_KEY, app_id, sequence_id,
            **kwargs,
        )

    def save(self, partition_key, app_id, sequence_id, position, state, status, **kwargs):
        return super().save(
            partition_key if partition_key is not None else PARTITION_KEY, app_id, sequence_id,
            position, state, status, **kwargs,
        )

    def cleanup(self):
        pass  # the store owns and closes the connection

    def __exit__(self, exc_type, exc_value, traceback):
        return False

    def __del__(self):
        pass  # the store owns and closes the connection


def _redact(url: str) -> str:
    """The url without its password, for messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://…"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresStore(SQLStore):
    placeholder = "%s"
    types = {"float": "DOUBLE PRECISION", "bigint": "BIGINT", "blob": "BYTEA"}

    def __init__(self, url: str):
        self.dsn = url
        super().__init__(_redact(url))

    # connections ---------------------------------------------------------------------------
    def _connect(self):
        try:
            conn = psycopg2.connect(
                self.dsn, connection_factory=_Conn, connect_timeout=CONNECT_TIMEOUT_S,
                application_name="rewind",
            )
        except psycopg2.Error as e:
            raise StoreError(f"cannot connect to {self.url}: {str(e).strip()}") from e
        conn.autocommit = True
        conn.depth = 0
        with conn.cursor() as cur:
            cur.execute("SET standard_conforming_strings = on")
            cur.execute("SET client_encoding = 'UTF8'")
        return conn

    def _make_persister(self, connection):
        return BlobRefPostgresPersister(self, connection)

    def _add_column_if_missing(self, table: str, column: str, ddl_type: str) -> None:
        self.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {ddl_type}")

    def executemany(self, sql: str, rows: Sequence) -> None:
        rows = list(rows)
        if len(rows) < 2:
            return super().executemany(sql, rows)
        from psycopg2.extras import execute_batch

        cur = self.connection.cursor()
        try:
            execute_batch(cur, self._sql(sql), [tuple(_clean_param(p) for p in r) for r in rows])
        except UnicodeEncodeError as e:
            raise InvalidRequest(
                f"a value is not valid Unicode text ({e.reason} at position {e.start}); "
                "lone surrogates cannot be stored or searched for"
            ) from None
        except psycopg2.DataError as e:
            first = (e.pgerror or str(e)).strip().splitlines()[0]
            raise InvalidRequest(f"PostgreSQL refused a value: {first}") from None

    def _slot(self):
        # The base class keeps one connection per thread and closes those of ended threads;
        # here a connection the server closed (a restart, an idle timeout) is replaced too.
        slot = getattr(self._local, "slot", None)
        if slot is not None and slot["conn"].closed and not slot["conn"].depth:
            with self._lock:
                self._all_connections = [s for s in self._all_connections if s is not slot]
            self._local.slot = None
        return super()._slot()

    # SQL -----------------------------------------------------------------------------------
    def _sql(self, sql: str) -> str:
        # psycopg2 formats with %: a literal % in shared SQL must be doubled
        return sql.replace("%", "%%").replace("?", "%s")

    def execute(self, sql: str, params: Sequence = ()):
        params = tuple(_clean_param(p) for p in params)
        cur = self.connection.cursor()
        try:
            cur.execute(self._sql(sql), params)
        except UnicodeEncodeError as e:
            raise InvalidRequest(
                f"a value is not valid Unicode text ({e.reason} at position {e.start}); "
                "lone surrogates cannot be stored or searched for"
            ) from None
        except psycopg2.DataError as e:
            # a value PostgreSQL cannot hold (e.g. \u0000 or a lone surrogate escape in JSONB);
            # the statement failed, so the caller's transaction rolls back
            first = (e.pgerror or str(e)).strip().splitlines()[0]
            raise InvalidRequest(f"PostgreSQL refused a value: {first}") from None
        return cur

    def _end_read(self) -> None:
        pass  # autocommit: a read outside `transaction()` never leaves a transaction open

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        conn = self.connection
        cur = conn.cursor()
        if conn.depth:
            name = f"rw_sp{conn.depth}"
            cur.execute(f"SAVEPOINT {name}")
            conn.depth += 1
            try:
                yield
            except BaseException:
                conn.depth -= 1
                with contextlib.suppress(psycopg2.Error):
                    cur.execute(f"ROLLBACK TO SAVEPOINT {name}")
                raise
            conn.depth -= 1
            cur.execute(f"RELEASE SAVEPOINT {name}")
            return
        cur.execute("BEGIN")
        conn.depth = 1
        try:
            yield
        except BaseException:
            conn.depth = 0
            with contextlib.suppress(psycopg2.Error):
                if not conn.closed:
                    cur.execute("ROLLBACK")
            raise
        conn.depth = 0
        cur.execute("COMMIT")

    def _create_schema(self) -> None:
        # CREATE TABLE IF NOT EXISTS is not safe against itself in PostgreSQL (two sessions can
        # both pass the check and one fails on pg_type): serialize schema creation per database.
        cur = self.connection.cursor()
        cur.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK_KEY,))
        try:
            super()._create_schema()
        finally:
            cur.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK_KEY,))

    # blobs ---------------------------------------------------------------------------------
    def put_blobs(self, blobs: dict) -> None:
        # Sorted: two transactions inserting the same new blobs in different orders would each
        # wait on the other's uncommitted row (a deadlock PostgreSQL resolves by failing one).
        super().put_blobs({h: blobs[h] for h in sorted(blobs)})

    def db_size_bytes(self) -> Optional[int]:
        try:
            return int(self.query("SELECT pg_database_size(current_database())")[0][0])
        except psycopg2.Error:
            return None


def _clean_param(p: Any) -> Any:
    # PostgreSQL TEXT cannot hold NUL; values live in BYTEA blobs, so a NUL can only reach a
    # text column through display text (a run summary, an error message) or a search term.
    if isinstance(p, str) and "\x00" in p:
        return p.replace("\x00", "\ufffd")
    if isinstance(p, memoryview):
        return bytes(p)
    return p


# test databases ------------------------------------------------------------------------------
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _with_dbname(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/") or "postgres"


def _admin_connect(url: str):
    """An autocommit connection to the server of `url`, on a database other than the target."""
    last: Optional[Exception] = None
    for db in ("postgres", "template1", _dbname(url)):
        try:
            conn = psycopg2.connect(_with_dbname(url, db), connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg2.Error as e:
            last = e
            continue
        conn.autocommit = True
        return conn
    raise StoreError(f"cannot connect to the server of {_redact(url)}: {last}")


def create_test_database(base_url: str, prefix: str = "rewind_t") -> str:
    """Create a uniquely named, empty database on the server of `base_url`; return its URL."""
    if not base_url.startswith(("postgresql://", "postgres://")):
        raise InvalidRequest(f"{base_url!r} is not a postgresql:// URL")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}".lower()
    if not _DB_NAME.match(name):
        raise InvalidRequest(f"database name {name!r} is not a plain identifier")
    conn = _admin_connect(base_url)
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING \'UTF8\'')
    except psycopg2.Error as e:
        raise StoreError(f"cannot create database {name} on {_redact(base_url)}: {e}") from e
    finally:
        conn.close()
    return _with_dbname(base_url, name)


def drop_database(url: str) -> None:
    """Drop the database of `url` (made by `create_test_database`), closing its sessions."""
    name = _dbname(url)
    if not _DB_NAME.match(name):
        raise InvalidRequest(f"refusing to drop {name!r}: not a plain identifier")
    if name in ("postgres", "template0", "template1"):
        raise InvalidRequest(f"refusing to drop the system database {name!r}")
    conn = _admin_connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg2.Error as e:
        raise StoreError(f"cannot drop database {name}: {e}") from e
    finally:
        conn.close()
