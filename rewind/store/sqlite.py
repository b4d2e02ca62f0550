"""The SQLite backend: one file, WAL, synchronous=NORMAL, a busy timeout, Burr's SQLitePersister.

A file the process may not write (a read-only file or folder) opens read-only by itself
(`store.read_only`, with the reason): nothing is written on open, reads work, writes refuse
with a clear error. In a read-only folder a WAL database whose -shm file is absent cannot be
shared, so it is opened as immutable (the folder guarantees nobody else writes it either).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from typing import Iterator, Optional
from urllib.parse import quote

from burr.core.persistence import SQLitePersister

from ..errors import InvalidRequest, StoreError
from .burr_state import BlobRefPersisterMixin
from .cache import ADD_HITS_SQL
from .checkpointer import VALVE_PAGES, WalCheckpointer
from .schema import BURR_TABLE, SEARCH_COLUMNS
from .sql import SQLITE_FAILURES, invalid_unicode
from .sqlstore import SQLStore

BUSY_TIMEOUT_MS = 30_000
SEARCH_TABLE = "runs_search"  # FTS5 over the runs' SEARCH_COLUMNS (schema version 5)
SEARCH_MARK = "runs_search_mark"  # the rowid the index holds every run through (version 7)
# New runs are indexed this many at a time, in one statement (schema version 7): an FTS5 insert
# writes a segment per transaction, ~60 us a run one by one; a search scans the runs not yet
# indexed (fewer than this, by rowid) beside the index
SEARCH_BATCH = 256
TRIGRAM = 3  # a search shorter than this has no trigram: it scans (LIKE over every run)
MAX_TRIGRAMS = 16  # of a longer search, the trigrams asked of the index (spread over it)
# Past this many rows holding the trigrams, a search scans instead: its matches are common, so
# the newest-first scan fills a page soon, where fetching every candidate by rowid would not
# (100k runs: "synthetic" in every summary, 392 ms through the index, 35 ms scanning)
MAX_CANDIDATES = 2_000
PLAN_TTL_S = 30.0  # how long a search's index-or-scan choice is kept (it decides speed only)
logger = logging.getLogger("rewind")


class BlobRefSQLitePersister(BlobRefPersisterMixin, SQLitePersister):
    """Burr's SQLitePersister on the store's connection, writing blob references."""

    def __init__(self, store: "SQLiteStore", connection):
        super().__init__(db_path=store.path, table_name=BURR_TABLE, connection=connection)
        self.rewind_store = store

    def __del__(self):
        pass  # the store owns and closes the connection

    def _stored(self, partition_key, app_id, sequence_id=None, **kwargs):
        if sequence_id is None or kwargs:  # "the newest" changes as states are added
            return super()._stored(partition_key, app_id, sequence_id, **kwargs)
        return self.rewind_store._remembered(
            ("state", partition_key, app_id, sequence_id),
            lambda: super(BlobRefSQLitePersister, self)._stored(partition_key, app_id, sequence_id))


def _no_space(path: str) -> bool:
    try:
        return os.statvfs(os.path.dirname(path) or ".").f_bavail == 0
    except OSError:
        return False


def _not_writable(path: str) -> Optional[str]:
    """Why this process cannot write the database at `path` (None if it can)."""
    folder = os.path.dirname(path) or "."
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"the file {path} is not writable"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    return None


_UNCHECKED, _CHECKED = object(), object()  # `_Conn.snapshot`: data_version not yet asked, asked

# Writes that change no row a connection remembers (`_remembered`): new step, state, blob and
# run rows (INSERTs that fail or do nothing on a conflict; one that updates instead changes a
# row), and the hit counter, which changes no cache entry (only `cache_stat`). Anything else
# this connection writes makes it forget.
_ADDS_ROWS = ("INSERT INTO nodes ", "INSERT INTO burr_state ", "INSERT INTO runs ",
              "INSERT INTO blobs ", ADD_HITS_SQL[0])
_ROWS_KNOWN = 4_096  # reads a connection remembers


class SQLiteStore(SQLStore):
    write_errors = (sqlite3.OperationalError,)
    failure_rules = SQLITE_FAILURES
    backend_errors = (sqlite3.Error,)  # what the driver raises: turned into StoreError at the API

    def __init__(self, path: str, read_only: Optional[bool] = None, create: bool = True):
        """`read_only=None` opens read-only when this process may not write the file; False
        refuses a file it may not write (a URL's mode=rw|rwc); `create=False` refuses a file
        that does not exist (mode=rw)."""
        self.path = os.path.abspath(path) if path != ":memory:" else path
        parent = os.path.dirname(self.path)
        if parent and not os.path.isdir(parent):
            raise StoreError(f"cannot open {path}: folder {parent} does not exist")
        if os.path.isdir(self.path):
            raise StoreError(f"cannot open {path}: it is a folder, not a database file; name a "
                             f"file in it (for example {os.path.join(path, 'rewind.db')})")
        reason = ""
        if self.path != ":memory:":
            if not create and not os.path.exists(self.path):
                raise InvalidRequest(f"cannot open {self.path} with mode=rw: there is no such "
                                     "file (mode=rwc creates it)")
            why = _not_writable(self.path)
            if read_only is None and why:
                read_only, reason = True, why
            elif read_only:
                reason = why or "asked to open it read-only"
            elif why:
                raise InvalidRequest(f"cannot open {self.path} read-write as asked: {why} "
                                     "(mode=ro opens it read-only)")
            if read_only and not os.path.exists(self.path):
                raise StoreError(f"cannot open {self.path} read-only: there is no such file")
        self._immutable = False
        self.checkpointer = None if read_only or self.path == ":memory:" else (
            WalCheckpointer(self.path, BUSY_TIMEOUT_MS))
        super().__init__(self.path, read_only=bool(read_only), read_only_reason=reason)

    # connections ---------------------------------------------------------------------------
    def _connect(self):
        try:
            conn = self._open_read_only() if self.read_only else self._open()
        except sqlite3.DatabaseError as e:
            cause, remedy = self._failure_of(e) or (None, None)
            if cause and not str(e).startswith("file is not"):  # not the file: the disk, a lock
                raise StoreError(f"cannot open {self.path}: {cause}; {remedy}") from e
            raise StoreError(f"cannot open {self.path} as a Rewind database: {e}") from e
        return _Conn(conn)

    def _failure_of(self, error: BaseException):
        found = super()._failure_of(error)
        if found and found[0].startswith("a disk I/O error") and _no_space(self.path):
            # a full disk shows as an I/O error where SQLite maps its shared memory (-shm)
            return "the disk holding the database is full (disk I/O error)", "free some space"
        return found

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal" and _new_or_ours(conn):
            conn.execute("PRAGMA journal_mode = WAL")  # written once, when the file is new
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = OFF")
        if self.checkpointer is not None:  # checkpoints run on its thread (checkpointer)
            conn.execute(f"PRAGMA wal_autocheckpoint = {VALVE_PAGES}")
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

    def _note_write(self, sql: str) -> None:
        sql = sql.lstrip()
        head = sql[:6].upper()
        if head == "SELECT" or head == "PRAGMA":
            return
        conn = self.connection
        if head == "DELETE":  # this connection may remove blobs it knew
            conn.seen_version = None
        if conn.known and (not sql.startswith(_ADDS_ROWS) or " DO UPDATE " in sql):
            conn.known.clear()  # this connection may have changed a row it remembers

    def forget_reads(self) -> None:
        """This connection wrote something its remembered reads may not survive (an import's
        state row beside one at the same sequence id)."""
        self.connection.known.clear()

    @contextlib.contextmanager
    def snapshot_reads(self) -> Iterator[None]:
        conn = self.connection
        outer = conn.snapshot
        if outer is None:
            conn.snapshot = _UNCHECKED
        try:
            yield
        finally:
            if outer is None:
                conn.snapshot = None

    def end_snapshot(self) -> None:
        self.connection.snapshot = None

    def _remembered(self, key: tuple, read):
        """`read()`, or what it returned before on this connection while no other connection
        has committed since (`PRAGMA data_version`) and this one only added rows (`_note_write`):
        a fork reads the run, states and cache entries its parent's last fork read. Inside
        `snapshot_reads` the version is asked once: the operation reads as of that moment."""
        conn = self.connection
        if conn.depth:  # inside a transaction: what it wrote so far counts
            return read()
        known = conn.known
        if conn.snapshot is not _CHECKED:
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            if version != conn.known_version:
                known.clear()
                conn.known_version = version
            if conn.snapshot is _UNCHECKED:
                conn.snapshot = _CHECKED
        if key in known:
            return known[key]
        got = read()
        if got is not None:  # never an absence: a row this connection adds would end it
            if len(known) >= _ROWS_KNOWN:
                known.clear()
            known[key] = got
        return got

    def execute(self, sql: str, params=()):
        self._note_write(sql)
        return super().execute(sql, params)

    def executemany(self, sql: str, rows) -> None:
        self._note_write(sql)
        try:
            self.connection.cursor().executemany(sql, [tuple(r) for r in rows])
        except UnicodeEncodeError as e:
            raise invalid_unicode(e) from None

    others_seen_once = True

    def others_wrote(self) -> bool:
        # PRAGMA data_version changes when, and only when, another connection commits
        conn = self.connection
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        seen, conn.seen_version = conn.seen_version, version
        return version != seen

    def cache_prefetch(self, keys) -> dict:
        """`cache_get_many`, remembered (`_remembered`). (A key it found no entry for is
        remembered as such: every write of a cache entry makes the connection forget.)"""
        keys = tuple(dict.fromkeys(tuple(k) for k in keys if k[1]))
        got = self._remembered(("cache", keys), lambda: self.cache_get_many(keys))
        return {k: dict(v) for k, v in got.items()}

    def _read_run_row(self, run_id: str):
        row = self._remembered(("run", run_id), lambda: super(SQLiteStore, self)._read_run_row(run_id))
        return dict(row) if row is not None else None

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
        self.require_writable()
        conn.execute("BEGIN IMMEDIATE")  # the write lock up front: no upgrade deadlock
        conn.depth = 1
        try:
            yield
            conn.depth = 0
            conn.execute("COMMIT")
        except BaseException:
            conn.depth = 0
            # On a full disk or an I/O error SQLite may have rolled the transaction back
            # itself: a ROLLBACK then fails ("no transaction is active") and would hide the
            # error that says why. A COMMIT that failed may leave it open: roll it back.
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
        if self.checkpointer is not None:
            self.checkpointer.note_commit()

    @contextlib.contextmanager
    def schema_lock(self) -> Iterator[None]:
        # BEGIN IMMEDIATE holds the only write lock: one migrator at a time
        with self.transaction():
            yield

    def _table_exists(self, table: str) -> bool:
        return bool(self.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)))

    def _columns(self, table: str) -> list:
        return [r[1] for r in self.query(f"PRAGMA table_info({table})")]

    def _table_names(self) -> list:
        return [r[0] for r in self.query(_TABLE_NAMES)]

    # the search index (schema version 5) ---------------------------------------------------
    def _create_search_index(self) -> None:
        """An FTS5 trigram index over the runs' search columns, external content (the text
        stays in `runs` only), kept by triggers, built from the runs already there. It keeps
        which rows hold a trigram and nothing more (detail=none: ~150 B a run instead of ~600
        with positions), so it answers "rows holding all these trigrams", a superset of the
        rows holding the substring; its case folding (Unicode) is wider than LIKE's (ASCII)
        too: the LIKE in the query decides. An SQLite without FTS5 keeps scanning. Rows are
        matched by rowid, which VACUUM keeps; anything that renumbers the runs' rowids must call
        `rebuild_search_index` after (a bare FTS5 'rebuild' would index the runs waiting for
        their batch, schema version 7, and the batch would index them again)."""
        cols = ", ".join(SEARCH_COLUMNS)
        new = ", ".join(f"NEW.{c}" for c in SEARCH_COLUMNS)
        old = ", ".join(f"OLD.{c}" for c in SEARCH_COLUMNS)
        try:
            self.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {SEARCH_TABLE} USING fts5({cols}, "
                         "content='runs', content_rowid='rowid', tokenize='trigram', "
                         "detail=none, columnsize=0)")
        except sqlite3.OperationalError as e:  # no fts5 module, or too old for trigram (< 3.34)
            logger.warning("%s: no search index (%s); searches scan every run", self.url, e)
            return
        t = SEARCH_TABLE
        for name, event, body in (
            ("insert", "INSERT", f"INSERT INTO {t}(rowid, {cols}) VALUES (NEW.rowid, {new});"),
            ("delete", "DELETE", f"INSERT INTO {t}({t}, rowid, {cols}) VALUES ('delete', OLD.rowid, {old});"),
            # heartbeats and status changes leave the index alone
            ("update", f"UPDATE OF {cols}",
             f"INSERT INTO {t}({t}, rowid, {cols}) VALUES ('delete', OLD.rowid, {old}); "
             f"INSERT INTO {t}(rowid, {cols}) VALUES (NEW.rowid, {new});"),
        ):
            self.execute(f"CREATE TRIGGER IF NOT EXISTS {t}_{name} AFTER {event} ON runs BEGIN {body} END")
        self.execute(f"INSERT INTO {t}({t}) VALUES ('rebuild')")

    def _batch_search_index(self) -> None:
        """New runs join the search index SEARCH_BATCH at a time (schema version 7), all by
        triggers, so every writer keeps it: `runs_search_mark` holds the rowid the index holds
        every run through. A run inserted past it waits for the batch (searches scan those by
        rowid); the insert that puts SEARCH_BATCH runs past it indexes them all and moves it.
        An insert at or below it (a rowid reused after the newest run was deleted) is indexed
        at once; updates and deletes touch the index only for runs it holds."""
        if not self._has_search_index():
            return  # no FTS5 here: searches scan
        cols = ", ".join(SEARCH_COLUMNS)
        new = ", ".join(f"NEW.{c}" for c in SEARCH_COLUMNS)
        old = ", ".join(f"OLD.{c}" for c in SEARCH_COLUMNS)
        t, mark = SEARCH_TABLE, f"(SELECT indexed_through FROM {SEARCH_MARK})"
        self.execute(f"CREATE TABLE IF NOT EXISTS {SEARCH_MARK} (indexed_through INTEGER NOT NULL)")
        self.execute(f"DELETE FROM {SEARCH_MARK}")
        # version 5 indexed every run there: the mark starts at the newest
        self.execute(f"INSERT INTO {SEARCH_MARK} SELECT COALESCE(MAX(rowid), 0) FROM runs")
        for name in ("insert", "delete", "update", "batch"):
            self.execute(f"DROP TRIGGER IF EXISTS {t}_{name}")
        for name, event, when, body in (
            # one trigger for both cases of an insert, so neither sees the mark the other moved
            ("insert", "INSERT", f"NEW.rowid <= {mark} OR NEW.rowid - {mark} >= {SEARCH_BATCH}",
             f"INSERT INTO {t}(rowid, {cols}) SELECT NEW.rowid, {new} WHERE NEW.rowid <= {mark}; "
             f"INSERT INTO {t}(rowid, {cols}) SELECT rowid, {cols} FROM runs "
             f"WHERE NEW.rowid > {mark} AND rowid > {mark}; "
             f"UPDATE {SEARCH_MARK} SET indexed_through = (SELECT MAX(rowid) FROM runs) "
             f"WHERE NEW.rowid > indexed_through;"),
            ("delete", "DELETE", f"OLD.rowid <= {mark}",
             f"INSERT INTO {t}({t}, rowid, {cols}) VALUES ('delete', OLD.rowid, {old});"),
            # heartbeats and status changes leave the index alone
            ("update", f"UPDATE OF {cols}", f"OLD.rowid <= {mark}",
             f"INSERT INTO {t}({t}, rowid, {cols}) VALUES ('delete', OLD.rowid, {old}); "
             f"INSERT INTO {t}(rowid, {cols}) VALUES (NEW.rowid, {new});"),
        ):
            self.execute(f"CREATE TRIGGER {t}_{name} AFTER {event} ON runs WHEN {when} "
                         f"BEGIN {body} END")

    def index_pending_runs(self) -> None:
        """Index the runs still waiting for their batch now (FTS5's integrity-check compares
        the index with every run)."""
        if self._has_search_index() and self._table_exists(SEARCH_MARK):
            with self.transaction():
                for statement in _INDEX_PENDING.split(";"):
                    if statement.strip():
                        self.execute(statement)

    def rebuild_search_index(self) -> None:
        """Rebuild the search index from the runs and move the mark to the newest (one
        transaction): the repair after anything that renumbered the runs' rowids."""
        if self._has_search_index() and self._table_exists(SEARCH_MARK):
            with self.transaction():
                self.execute(f"INSERT INTO {SEARCH_TABLE}({SEARCH_TABLE}) VALUES ('rebuild')")
                self.execute(f"UPDATE {SEARCH_MARK} SET indexed_through = "
                             "(SELECT COALESCE(MAX(rowid), 0) FROM runs)")

    def _search_prefilter(self, text: str):
        # rows holding every trigram of the search (at most MAX_TRIGRAMS of them, spread from
        # its first to its last: fewer only widens the superset); each a quoted string, so
        # nothing in it is query syntax but the doubled quote
        if len(text) < TRIGRAM or not self._has_search_index():
            return None
        grams = list(dict.fromkeys(text[i:i + TRIGRAM] for i in range(len(text) - TRIGRAM + 1)))
        if len(grams) > MAX_TRIGRAMS:
            step = (len(grams) - 1) / (MAX_TRIGRAMS - 1)
            grams = [grams[round(k * step)] for k in range(MAX_TRIGRAMS)]
        query = " AND ".join('"' + g.replace('"', '""') + '"' for g in grams)
        probe = f"SELECT rowid FROM {SEARCH_TABLE} WHERE {SEARCH_TABLE} MATCH ?"
        if not self._selective(probe, query):
            return None
        # the runs the index holds that have the trigrams, and the newest not indexed yet
        # (one IN list: with an OR the planner walks runs in created_at order instead)
        return (f"rowid IN ({probe} UNION ALL SELECT rowid FROM runs WHERE rowid > "
                f"(SELECT indexed_through FROM {SEARCH_MARK}))", [query])

    def _selective(self, probe: str, query: str) -> bool:
        # kept a while per search: a page and its count ask the same, and a stale answer only
        # picks the slower plan (the LIKE decides the rows either way)
        plans = self.__dict__.setdefault("_search_plans", {})
        now = time.monotonic()
        hit = plans.get(query)
        if hit is None or now - hit[0] > PLAN_TTL_S:
            if len(plans) > 256:
                plans.clear()
            n = len(self.query(f"{probe} LIMIT ?", [query, MAX_CANDIDATES + 1]))
            hit = plans[query] = (now, n <= MAX_CANDIDATES)
        return hit[1]

    def _has_search_index(self) -> bool:
        # asked once per store: the table exists and this SQLite has the module to read it
        if getattr(self, "_search_index", None) is None:
            try:
                self.query(f"SELECT rowid FROM {SEARCH_TABLE} LIMIT 0")
                self._search_index = True
            except sqlite3.OperationalError:
                self._search_index = False
        return self._search_index

    def checkpoint_wal(self, mode: str = "TRUNCATE") -> tuple:
        """Copy the write-ahead log into the database file now (the background checkpoint held
        off meanwhile); SQLite's (busy, log pages, checkpointed pages)."""
        if self.checkpointer is None:
            return tuple(self.connection.execute(f"PRAGMA wal_checkpoint({mode})").fetchone())
        return self.checkpointer.checkpoint(self.connection, mode)

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
        super().close()

    def db_size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += os.path.getsize(self.path + suffix)
        return total


_COLS = ", ".join(SEARCH_COLUMNS)
# index every run past the mark, then move the mark to the newest run
_INDEX_PENDING = (
    f"INSERT INTO {SEARCH_TABLE}(rowid, {_COLS}) SELECT rowid, {_COLS} FROM runs WHERE rowid > "
    f"(SELECT indexed_through FROM {SEARCH_MARK}); "
    f"UPDATE {SEARCH_MARK} SET indexed_through = (SELECT COALESCE(MAX(rowid), 0) FROM runs);")


def _new_or_ours(conn: sqlite3.Connection) -> bool:
    """Whether the file may be switched to WAL: a journal mode is written into the file, and
    another application's file is refused by the schema check, unchanged (migrations)."""
    names = {r[0] for r in conn.execute(_TABLE_NAMES)}
    return not names or "schema_version" in names


# the file's own tables (not SQLite's sqlite_sequence, sqlite_stat1): the connection's check
# before WAL and the schema's check for another application's file read the same list
_TABLE_NAMES = ("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                "ORDER BY name")


class _Conn:
    """A sqlite3 connection that knows its transaction depth (sqlite3.Connection has slots)."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn
        self.depth = 0
        self.seen_version = None  # PRAGMA data_version at this connection's last write
        self.known: dict = {}  # what reads returned (SQLiteStore._remembered)
        self.known_version = None  # PRAGMA data_version when `known` was read
        self.snapshot = None  # inside snapshot_reads: _UNCHECKED, then _CHECKED

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def commit(self):
        # Burr's persister commits after each save; inside our transaction that is ours to do.
        if not self.depth:
            self._conn.commit()
