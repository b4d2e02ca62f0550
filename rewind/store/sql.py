"""The SQL core every backend shares: one connection per thread, statements, transactions.

Statements are written with `?` placeholders and portable SQL; a backend supplies its
connection (`_connect`), its placeholder translation (`_sql`), its transaction
(`transaction`), its schema lock (`schema_lock`) and its catalog queries (`_table_exists`,
`_columns`). The concept modules (blobs, runs, steps, graphs, cache, burr_state) hold the
statements of their tables on top of this class.
"""

from __future__ import annotations

import abc
import contextlib
import threading
from typing import Any, Iterable, Iterator, Optional, Sequence

from ..errors import InvalidRequest, ObjectStoreError, ReadOnlyError, StoreError
from .liveness import current_pid

CHUNK = 500  # ids per IN (...) list



def invalid_unicode(e: UnicodeEncodeError) -> InvalidRequest:
    return InvalidRequest(
        f"a value is not valid Unicode text ({e.reason} at position {e.start}); "
        "lone surrogates cannot be stored or searched for"
    )


_WAIT = "wait until the other writer is done"
# (codes, texts, cause, what to do): a code is the start of SQLite's result code name or of a
# PostgreSQL SQLSTATE, a text a piece of the driver's message (errors raised with no code)
SQLITE_FAILURES = (
    (("SQLITE_FULL",), ("database or disk is full",), "the disk holding the database is full",
     "free some space"),
    (("SQLITE_BUSY", "SQLITE_LOCKED"), ("database is locked", "database table is locked"),
     "the database is locked by another writer", _WAIT),
    (("SQLITE_IOERR",), ("disk I/O error",), "a disk I/O error", "check the disk"),
    (("SQLITE_READONLY",), ("readonly database",), "the database file is read-only",
     "make it writable"),
    (("SQLITE_CORRUPT", "SQLITE_NOTADB"), ("malformed",), "the database file is damaged",
     "restore it from a backup"),
)
POSTGRES_FAILURES = (
    (("53100",), ("no space left on device", "could not extend file"),
     "the disk of the database server is full", "free some space on the server"),
    (("55P03", "40P01"), ("lock timeout", "deadlock detected"),
     "the database is locked by another transaction", _WAIT),
    (("57P01", "57P02", "57P03", "08"),
     ("server closed the connection", "terminating connection", "connection already closed",
      "connection to server", "could not connect", "ssl connection has been closed",
      "no connection to the server", "could not receive data", "could not send data"),
     "the connection to the database server was lost", "check that the server is up"),
)


def _chain(error: BaseException) -> list:
    """`error` and the errors it was raised from (or while handling), outermost first."""
    out: list = []
    while error is not None and error not in out and len(out) < 16:
        out.append(error)
        error = error.__cause__ or error.__context__
    return out


def chunks(items: Sequence, n: int = CHUNK) -> Iterable[list]:
    items = list(items)
    for i in range(0, len(items), n):
        yield items[i : i + n]


def marks(n: int) -> str:
    return ",".join("?" * n)


class SQLBase(abc.ABC):
    """Connections, statements and transactions; no table knowledge."""

    placeholder = "?"
    types = {"float": "REAL", "bigint": "INTEGER", "blob": "BLOB"}
    read_only = False
    read_only_reason = ""

    def _init_connections(self) -> None:
        self._local = threading.local()
        self._all_connections: list = []
        self._lock = threading.Lock()

    # connections ---------------------------------------------------------------------------
    @abc.abstractmethod
    def _connect(self): ...

    @abc.abstractmethod
    def _make_persister(self, connection): ...

    def _slot(self):
        slot = getattr(self._local, "slot", None)
        if slot is None or slot["pid"] != current_pid():  # a connection is its process's
            connection = self._connect()
            slot = {"pid": current_pid(), "conn": connection, "persister": None,
                    "thread": threading.current_thread()}
            self._local.slot = slot
            with self._lock:
                # A server that runs each request on a new thread (Streamlit: one per rerun)
                # would otherwise keep one open connection per finished thread.
                dead = [s for s in self._all_connections
                        if s.get("pid") == current_pid() and not s["thread"].is_alive()]
                self._all_connections = [s for s in self._all_connections if s not in dead]
                self._all_connections.append(slot)
            for s in dead:
                s["persister"] = None
                with contextlib.suppress(Exception):
                    s["conn"].close()
        return slot

    @property
    def connection(self):
        return self._slot()["conn"]

    def persister(self):
        """This thread's Burr persister; it lives as long as its connection (Burr closes the
        connection in the persister's `__del__`)."""
        slot = self._slot()
        if slot["persister"] is None:
            slot["persister"] = self._make_persister(slot["conn"])
            # the schema (Burr's table included) is current once the store is open
            slot["persister"]._initialized = True
        return slot["persister"]

    def reset_connection(self) -> None:
        """Drop this thread's connection (after a failed commit or a lost server): the next
        statement opens a fresh one."""
        slot = getattr(self._local, "slot", None)
        self._local = threading.local()
        if slot is None:
            return
        with self._lock:
            self._all_connections = [s for s in self._all_connections if s is not slot]
        slot["persister"] = None
        with contextlib.suppress(Exception):
            slot["conn"].close()

    def close(self) -> None:
        """Close this process's connections. A connection inherited across fork() belongs to
        the parent: closing it here would end the parent's session (PostgreSQL's Terminate)."""
        pid = current_pid()
        with self._lock:
            mine = [s for s in self._all_connections if s.get("pid") == pid]
            self._all_connections = [s for s in self._all_connections if s.get("pid") != pid]
        for slot in mine:
            slot["persister"] = None
            with contextlib.suppress(Exception):
                slot["conn"].close()
        self._local = threading.local()

    # statements ----------------------------------------------------------------------------
    def _sql(self, sql: str) -> str:
        return sql

    def execute(self, sql: str, params: Sequence = ()):
        cur = self.connection.cursor()
        try:
            cur.execute(self._sql(sql), tuple(params))
        except UnicodeEncodeError as e:
            raise invalid_unicode(e) from None
        return cur

    def execute_write(self, sql: str, params: Sequence = ()) -> None:
        """A write whose result nobody reads (no rows, no rowcount): a backend with round trips
        may hold it and send it with the transaction's next statement or its COMMIT."""
        self.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence) -> None:
        """One statement over many parameter rows (backends may batch it)."""
        for params in rows:
            self.execute(sql, params)

    backend_errors: tuple = ()

    def query(self, sql: str, params: Sequence = ()) -> list:
        try:
            rows = self.execute(sql, params).fetchall()
        except Exception as e:
            # a read outside a transaction survives a lost connection (a server restart):
            # once, on a fresh one; inside a transaction the commit's retry owns it
            if not isinstance(e, self.backend_errors) or getattr(self.connection, "depth", 0):
                raise
            self.reset_connection()
            rows = self.execute(sql, params).fetchall()
        self._end_read()
        return rows

    def scan(self, sql: str, params: Sequence = (), size: int = 1000) -> Iterator[tuple]:
        """Rows of a large result in pages (gc reads whole tables this way)."""
        cur = self.execute(sql, params)
        while True:
            rows = cur.fetchmany(size)
            if not rows:
                break
            yield from rows
        self._end_read()

    def query_in(self, sql: str, ids: Iterable, params_before: Sequence = ()) -> list:
        """`sql` with one `{marks}` IN-list, run over `ids` in chunks; the rows of all chunks."""
        out: list = []
        for chunk in chunks(list(ids)):
            out.extend(self.query(sql.format(marks=marks(len(chunk))), [*params_before, *chunk]))
        return out

    def execute_in(self, sql: str, ids: Iterable, params_before: Sequence = ()) -> None:
        for chunk in chunks(list(ids)):
            self.execute(sql.format(marks=marks(len(chunk))), [*params_before, *chunk])

    def forget_reads(self) -> None:
        """Drop what this connection remembers of earlier reads (backends that remember any)."""

    @contextlib.contextmanager
    def snapshot_reads(self) -> Iterator[None]:
        """The reads of one operation's setup (a fork's run rows, start state and cache
        entries): a backend that remembers reads may ask once, at the first, whether another
        connection wrote since, and answer the rest as of that moment."""
        yield

    def end_snapshot(self) -> None:
        """The operation's setup is over (its execution starts): reads ask again each time."""

    def _end_read(self) -> None:
        """Backends whose reads open a transaction end it here."""

    @abc.abstractmethod
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]: ...

    # True where `others_wrote` reports each change of another connection once (SQLite's
    # data_version), False where it always says True
    others_seen_once = False

    def others_wrote(self) -> bool:
        """Inside a write transaction: may another connection have committed (a gc that purged
        blobs, say) since this connection last asked? Backends that cannot tell say True."""
        return True

    def require_writable(self, what: str = "") -> None:
        """Refuse, in one `ReadOnlyError` line, what would write to a store open read-only."""
        if self.read_only:
            raise ReadOnlyError(
                f"{self.url} is open read-only ({self.read_only_reason or 'as asked'}): "
                f"{'cannot ' + what if what else 'nothing can be written'}; open it from a "
                "process that may write the file"
            )

    # schema support ------------------------------------------------------------------------
    @abc.abstractmethod
    @contextlib.contextmanager
    def schema_lock(self) -> Iterator[None]:
        """A transaction that holds the database's schema lock: one migrator at a time."""

    @abc.abstractmethod
    def _table_exists(self, table: str) -> bool: ...

    @abc.abstractmethod
    def _columns(self, table: str) -> list: ...

    @abc.abstractmethod
    def _table_names(self) -> list:
        """The tables of the database (its current schema on PostgreSQL), Rewind's or not."""

    # failures in words ---------------------------------------------------------------------
    def describe_failure(self, error: BaseException) -> tuple:
        """(cause, what to do) of a write that failed, in words: ("the disk holding the
        database is full", "free some space"). Read from the driver error in `error`'s chain
        (a CommitError's, a StoreError's); its own first line when no rule of the backend
        knows it."""
        chain = _chain(error)
        for e in chain:
            if isinstance(e, ObjectStoreError):  # the database is fine: the object store is not
                first, _, remedy = str(e).rpartition("; ")
                return first, remedy or "check that the object store is reachable"
            known = self._failure_of(e)
            if known is not None:
                return known
        inner = next((e for e in chain if isinstance(e, self.backend_errors)), error)
        first = (str(inner).strip().splitlines() or [""])[0]
        return f"{type(inner).__name__}: {first}", "check that it is reachable and writable"

    failure_rules: tuple = ()  # SQLITE_FAILURES, POSTGRES_FAILURES

    def _failure_of(self, error: BaseException) -> Optional[tuple]:
        """(cause, what to do) of one driver error `failure_rules` recognize, else None."""
        if not isinstance(error, self.backend_errors):
            return None
        found = [c for c in (getattr(error, "sqlite_errorname", None),
                             getattr(error, "pgcode", None)) if c]
        text = str(error).strip()
        for codes, texts, cause, remedy in self.failure_rules:
            if any(c.startswith(codes) for c in found) or (
                    not found and any(t.lower() in text.lower() for t in texts)):
                first = (text.splitlines() or [""])[0].strip()
                return (f"{cause} ({first})" if first else cause), remedy
        return None

    def lock_for_gc(self) -> None:
        """Inside a transaction: keep writers from adding references until it commits (a
        backend whose transactions already hold the only write lock needs nothing more)."""

    def lock_for_upload(self) -> None:
        """Inside a writer's transaction, before it uploads objects it will refer to: wait
        for a gc holding `lock_for_gc` (so its sweep never deletes one of them), and keep the
        next one waiting until this commits. Nothing more where a transaction already holds
        the only write lock."""

    def db_size_bytes(self):
        return None
