"""The PostgreSQL backend: the shared schema and SQL on psycopg2, Burr's PostgreSQLPersister.

    rw = Rewind("postgresql://user@host:5432/rewind")

Same tables and behaviour as the SQLite backend; for several Rewind instances (or processes,
or hosts) sharing one database. One connection per thread (the base class keeps them), in
autocommit mode so a read never leaves a transaction open; `transaction()` issues BEGIN/COMMIT
itself and nests with savepoints. Inside a transaction, writes whose result nobody reads (an
INSERT without RETURNING, `execute_write`) are held and sent in one round trip with the next
statement that returns something, or with the COMMIT (BEGIN rides along with the first). A
migration holds `pg_advisory_xact_lock` for its transaction; opening a database whose schema
is current runs no DDL and locks nothing, so it never waits on (or deadlocks with) writers.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from typing import Any, Iterator, Optional, Sequence

from ..errors import InvalidRequest, StoreError
from ..keys import sha256_hex
from ..redaction import redact_url
from .blobs import blob_insert
from .burr_state import BlobRefPersisterMixin
from .pg_admin import CONNECT_TIMEOUT_S
from .rows import PARTITION_KEY
from .schema import BURR_TABLE, SEARCH_COLUMNS
from .sql import POSTGRES_FAILURES, chunks, invalid_unicode
from .sqlstore import SQLStore

try:
    import psycopg2
    import psycopg2.errors
    import psycopg2.extensions
    from burr.integrations.persisters.b_psycopg2 import PostgreSQLPersister
except ImportError as e:  # pragma: no cover - both are dependencies of the package
    raise StoreError(
        f"PostgreSQL support needs psycopg2 (pip install psycopg2-binary): {e}"
    ) from e

# any 64-bit number, fixed: every Rewind process agrees on it
SCHEMA_LOCK_KEY = 0x52657769_6E640001 & 0x7FFFFFFFFFFFFFFF
# the tables gc locks against writers while it decides what nothing refers to
GC_TABLES = ("blobs", "nodes", "cache", "tool_cache", BURR_TABLE, "runs")
GC_LOCK_WAIT_S = 120.0  # how long gc waits for a moment when no writer holds its tables
logger = logging.getLogger("rewind")
# the search index (schema version 5): trigrams of the search columns joined by a space
SEARCH_INDEX = "runs_search"
SEARCH_TEXT = " || ' ' || ".join(f"COALESCE({c}, '')" for c in SEARCH_COLUMNS)


class _Conn(psycopg2.extensions.connection):
    """A psycopg2 connection that knows its transaction depth (for nesting) and holds the
    statements of its transaction not sent yet (see `PostgresStore.execute_write`)."""

    depth = 0
    held: list = []

    def cursor(self, *args, **kwargs):
        # anyone else's statement (Burr's persister) sees the writes held so far
        if self.held:
            _send(self, [])
        return super().cursor(*args, **kwargs)

    def raw_cursor(self):
        return super().cursor()


class _Held:
    """What `execute` returns for a write it held: nothing to read."""

    rowcount = -1

    def fetchall(self):  # pragma: no cover - a held write is never read
        raise RuntimeError("a held write has no result")


_HELD = _Held()


def _send(conn: "_Conn", tail: list):
    """Send the held statements and `tail` (mogrified bytes) in one round trip; the cursor
    holds the last statement's result."""
    parts, conn.held = conn.held + tail, []
    cur = conn.raw_cursor()
    if parts:
        try:
            cur.execute(b";\n".join(parts))  # one statement a line (tests split them)
        except psycopg2.DataError as e:
            raise _refused(e) from None
    return cur


def _holds(sql: str) -> bool:
    head = sql.lstrip()[:6].upper()
    return head == "INSERT" and "RETURNING" not in sql.upper()


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


def _refused(e: Exception) -> InvalidRequest:
    if isinstance(e, UnicodeEncodeError):
        return invalid_unicode(e)
    # a value PostgreSQL cannot hold (e.g. \u0000 or a lone surrogate escape in JSONB); the
    # statement failed, so the caller's transaction rolls back
    first = (getattr(e, "pgerror", None) or str(e)).strip().splitlines()[0]
    return InvalidRequest(f"PostgreSQL refused a value: {first}")


class PostgresStore(SQLStore):
    placeholder = "%s"
    types = {"float": "DOUBLE PRECISION", "bigint": "BIGINT", "blob": "BYTEA"}
    write_errors = (psycopg2.OperationalError,)
    backend_errors = (psycopg2.Error,)  # what the driver raises: turned into StoreError at the API
    failure_rules = POSTGRES_FAILURES

    def __init__(self, url: str, read_only: Optional[bool] = None):
        self.dsn = url
        super().__init__(redact_url(url), read_only=bool(read_only),
                         read_only_reason="asked to open it read-only" if read_only else "")

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
        conn.held = []
        with conn.cursor() as cur:
            cur.execute("SET standard_conforming_strings = on")
            cur.execute("SET client_encoding = 'UTF8'")
            if self.read_only:
                cur.execute("SET default_transaction_read_only = on")
        return conn

    def _make_persister(self, connection):
        return BlobRefPostgresPersister(self, connection)

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

    def execute(self, sql: str, params: Sequence = (), hold: Optional[bool] = None):
        params = tuple(_clean_param(p) for p in params)
        conn = self.connection
        cur = conn.raw_cursor()
        try:
            if not conn.depth:
                cur.execute(self._sql(sql), params)
                return cur
            text = cur.mogrify(self._sql(sql), params)
            if hold if hold is not None else _holds(sql):
                conn.held.append(text)
                return _HELD
            return _send(conn, [text])
        except (UnicodeEncodeError, psycopg2.DataError) as e:
            raise _refused(e) from None

    def execute_write(self, sql: str, params: Sequence = ()) -> None:
        self.execute(sql, params, hold=True)

    def executemany(self, sql: str, rows: Sequence) -> None:
        rows = list(rows)
        conn = self.connection
        if conn.depth and _holds(sql):
            for r in rows:
                self.execute(sql, r)
            return
        if len(rows) < 2:
            return super().executemany(sql, rows)
        from psycopg2.extras import execute_batch

        # what is held (BEGIN first) goes before: the batch belongs inside the transaction,
        # after the writes it follows
        cur = _send(conn, []) if conn.depth else conn.raw_cursor()
        try:
            execute_batch(cur, self._sql(sql), [tuple(_clean_param(p) for p in r) for r in rows])
        except (UnicodeEncodeError, psycopg2.DataError) as e:
            raise _refused(e) from None

    def _insert_blob_rows(self, chunk: list, blobs: dict, now: float) -> list:
        # writes here are held to travel with the next statement, and a held INSERT has no row
        # count: RETURNING names the rows it inserted
        inserted = {r[0] for r in self.query(*blob_insert(chunk, blobs, now, " RETURNING hash"))}
        return [h for h in chunk if h not in inserted]

    def _differing(self, hashes: list, blobs: dict) -> list:
        # by digest: the stored bytes are hashed where they are, only hex digests travel
        differ: list = []
        for chunk in chunks(hashes, 100):
            values = ", ".join(["(?, ?)"] * len(chunk))
            differ += [r[0] for r in self.query(
                f"WITH v(hash, digest) AS (VALUES {values}) SELECT b.hash FROM blobs b "
                "JOIN v ON b.hash = v.hash WHERE encode(sha256(b.data), 'hex') <> v.digest",
                [x for h in chunk for x in (h, sha256_hex(blobs[h]))],
            )]
        return differ

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        conn = self.connection
        if conn.depth:
            # a savepoint's statements are sent by its end, so an error in them rolls back
            # to it (not the whole transaction)
            name = f"rw_sp{conn.depth}"
            _send(conn, [f"SAVEPOINT {name}".encode()])
            conn.depth += 1
            try:
                yield
                _send(conn, [f"RELEASE SAVEPOINT {name}".encode()])
            except BaseException:
                conn.held = []
                with contextlib.suppress(psycopg2.Error):
                    conn.raw_cursor().execute(f"ROLLBACK TO SAVEPOINT {name}")
                raise
            finally:
                conn.depth -= 1
            return
        self.require_writable()
        conn.held = [b"BEGIN"]  # sent with the transaction's first statement
        conn.depth = 1
        try:
            yield
            conn.depth = 0
            if conn.held != [b"BEGIN"]:  # a transaction that wrote nothing sends nothing
                done = _send(conn, [b"COMMIT"])
                if done.statusmessage == "ROLLBACK":
                    # PostgreSQL answers COMMIT of a transaction a failed statement aborted
                    # with ROLLBACK and no error: a caller that caught that statement's error
                    # (around a savepoint, say) must not take its writes for stored
                    raise StoreError(
                        f"{self.url}: the transaction was rolled back, not committed: a statement "
                        "in it failed earlier (its error was caught); nothing of it was written")
        except BaseException:
            conn.depth = 0
            begun, conn.held = conn.held[:1] != [b"BEGIN"], []
            with contextlib.suppress(psycopg2.Error):
                if begun and not conn.closed:
                    conn.raw_cursor().execute("ROLLBACK")
            raise
        finally:
            conn.held = []

    # schema --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def schema_lock(self) -> Iterator[None]:
        # CREATE TABLE IF NOT EXISTS is not safe against itself in PostgreSQL (two sessions can
        # both pass the check and one fails on pg_type): one migrator per database at a time.
        # The lock is the transaction's: it is released by COMMIT or ROLLBACK, never leaked.
        with self.transaction():
            self.execute("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK_KEY,))
            yield

    def _table_exists(self, table: str) -> bool:
        return self.query("SELECT to_regclass(?)", (table,))[0][0] is not None

    def _columns(self, table: str) -> list:
        return [r[0] for r in self.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
            "AND table_schema = current_schema()", (table,))]

    def _table_names(self) -> list:
        return [r[0] for r in self.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "ORDER BY table_name")]

    def _create_search_index(self) -> None:
        """A pg_trgm GIN index on the runs' search columns joined (schema version 5): one index
        scan per search instead of three. CREATE EXTENSION may be refused (a role that may not
        create it, a server without contrib): searches then scan, as before, and the migration
        goes on. GIN queues new entries in a pending list every search reads linearly until a
        flush (4 MB by default: a search took 20 ms at 100k runs after a burst of writes, 0.3 ms
        vacuumed); 64 kB bounds that near 1 ms, for +0.6% per fork (measured, interleaved)."""
        try:
            with self.transaction():  # a savepoint: a refusal must not abort the migration
                self.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
                self.execute(f"CREATE INDEX IF NOT EXISTS {SEARCH_INDEX} ON runs USING gin "
                             f"(({SEARCH_TEXT}) gin_trgm_ops) WITH (gin_pending_list_limit = 64)")
        except psycopg2.Error as e:
            first = (getattr(e, "pgerror", None) or str(e)).strip().splitlines()[0]
            logger.warning(
                "%s: no search index (pg_trgm: %s); searches scan every run. To index them, as a "
                "role that may: CREATE EXTENSION pg_trgm; CREATE INDEX %s ON runs USING gin ((%s) "
                "gin_trgm_ops)", self.url, first, SEARCH_INDEX, SEARCH_TEXT)

    def _batch_search_index(self) -> None:
        """Schema version 7 batches SQLite's index inserts; GIN's pending list (above) already
        batches PostgreSQL's."""

    def _search_prefilter(self, text: str):
        # the joined columns hold every substring any one of them holds (and a few more, across
        # a seam): the index narrows, the LIKE on each column decides. A search shorter than a
        # trigram gives the index nothing to look up: it scans.
        if len(text) < 3 or not self._has_search_index():
            return None
        return f"({SEARCH_TEXT}) LIKE ? ESCAPE '\\'", [self._like(text)]

    def _has_search_index(self) -> bool:
        if getattr(self, "_search_index", None) is None:  # asked once per store
            self._search_index = self.query("SELECT to_regclass(?)", (SEARCH_INDEX,))[0][0] is not None
        return self._search_index

    def lock_for_upload(self) -> None:
        # the lock an INSERT takes anyway, taken before the upload whatever statements came
        # before it: it conflicts with gc's EXCLUSIVE, not with other writers
        self.execute("LOCK TABLE blobs IN ROW EXCLUSIVE MODE")

    def lock_for_gc(self) -> None:
        # Nothing may reference a blob between gc's scan and its delete; readers go on. Writers
        # take these tables in their own order (a run row, then blobs): gc waiting for one while
        # holding another would deadlock with them, so a try gives up after a moment, lets go
        # of what it took (its savepoint) and tries again until the tables are free together.
        deadline = time.monotonic() + GC_LOCK_WAIT_S
        while True:
            try:
                with self.transaction():
                    self.execute("SET LOCAL lock_timeout = '100ms'")
                    self.execute(f"LOCK TABLE {', '.join(GC_TABLES)} IN EXCLUSIVE MODE")
                break
            except psycopg2.errors.LockNotAvailable:
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"{self.url}: gc could not lock its tables within {GC_LOCK_WAIT_S:.0f} s "
                        "because runs were being written all the time; run it again when fewer "
                        "are") from None
                time.sleep(random.uniform(0.01, 0.1))  # writers' commits take milliseconds
        self.execute("SET LOCAL lock_timeout = DEFAULT")

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
