"""Numbered schema migrations, run once per database under the backend's schema lock.

    1  the first layout: runs, nodes, edges, cache, tool_cache, blobs, alarms, burr_state
    2  nodes.doc: a step row's content-addressed doc (databases of version 1 may have it
       already: it was once added on every open)
    3  cache.meta and cache.shape_hash (+ index): what a hit needs beside the values, and the
       last visit with the same inputs, to name what changed in a fresh run's miss;
       runs.owner (+ index): whose run it is
    4  cache_stat: the cache and blob totals `cache_stats` reads, kept by triggers (no scan of
       the cache or the blobs at any size); an index on cache.cached_at (the oldest entry,
       purges by age)
    5  the run search index: substrings of id, summary and pipeline by trigrams (SQLite: an
       FTS5 `trigram` table kept by triggers, built from the runs there; PostgreSQL: pg_trgm
       GIN indexes, or none, logged, where CREATE EXTENSION is refused); searches return what
       they did before, only faster
    6  one index on cache.cached_at, not two: step 4 added `cache_age` beside the layout's
       `cache_cached_at`, and every write to the cache paid for both
    7  SQLite's search index takes new runs in batches (`runs_search_mark`: the rowid it holds
       every run through; a search scans the few newer runs beside it): one FTS5 insert per
       run was ~60 us of every fork. PostgreSQL: no change
    8  cache hits are counted in `cache_stat` only, one statement per commit (the steps the
       cache has served, ever), not per entry: a fork's commit updated a row of every entry
       it was served from and fired a trigger for each (~7% of a fork). The entries' counts,
       already in the total, are zeroed; the trigger that followed them is dropped. And the
       runs' parent and owner indexes hold only runs that have one (a first run, a
       single-user run: one index entry and page fewer each)
    9  runs.turns_json: per call that drove a run (`run`, each `resume`), its first step and
       halt conditions, so that a fork replays each later turn as that call (engine.turns).
       A run of an older version has none: its forks stop at its step count, as before
   10  blobs.location: a large value's bytes may live in an object store (store.objects); its
       row keeps the hash, the size and where, with empty `data`. NULL for every older row

A database with tables but no `schema_version` is another application's: it is refused
with a StoreError and left as it was (on SQLite not even its journal mode is set).

Opening a database whose version is current reads one row and runs no DDL, takes no lock.
Otherwise the opener takes the schema lock (`pg_advisory_xact_lock` on PostgreSQL, BEGIN
IMMEDIATE on SQLite), reads the version again (another process may have migrated meanwhile)
and applies the missing steps in that one transaction. A migration adds the columns the
schema marks `since` its version; a fresh database gets the current tables in step 1.
To change the layout: add the column to `schema` with `since=N+1` (or write a function) and
append a `Migration(N+1, ...)` here.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from ..errors import StoreError
from . import schema


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    what: str
    apply: Callable  # apply(store): inside the schema transaction


def _create_tables(store) -> None:
    for table in schema.OWN_TABLES:
        for ddl in table.ddl(store.types):
            store.execute(ddl)
    store._make_persister(store.connection).initialize()  # Burr's own DDL for burr_state


def _add_columns_since(version: int) -> Callable:
    def apply(store) -> None:
        for table in schema.OWN_TABLES:
            new = table.columns_since(version)
            if not new:
                continue
            have = set(store._columns(table.name))
            for col in new:
                if col.name not in have:
                    store.execute(f"ALTER TABLE {table.name} ADD COLUMN {col.ddl(store.types)}")
    return apply


def _cache_meta(store) -> None:
    _add_columns_since(3)(store)
    store.execute("CREATE INDEX IF NOT EXISTS cache_shape ON cache (node, shape_hash)")
    store.execute("CREATE INDEX IF NOT EXISTS runs_owner ON runs (owner, created_at)")


_STAT_COLS = ("entries", "hits", "tool_entries", "tool_hits", "blobs", "blob_bytes")
# (table, the stat columns a row counts in, the column summed into the second)
_STAT_SOURCES = (("cache", "entries", "hits", "hits"), ("tool_cache", "tool_entries", "tool_hits", "hits"),
                 ("blobs", "blobs", "blob_bytes", "size"))


def _cache_stat(store) -> None:
    store.execute("CREATE INDEX IF NOT EXISTS cache_cached_at ON cache (cached_at)")
    cols = ", ".join(f"{c} BIGINT NOT NULL DEFAULT 0" for c in _STAT_COLS)
    # SQLite has one writer at a time: one row. PostgreSQL: a row per statement, appended by
    # statement triggers (no row two writers both update, so no lock order to get wrong),
    # folded into one by the reader (store.cache_stats).
    key = "id INTEGER PRIMARY KEY" if store.types.get("blob") != "BYTEA" else "id BIGSERIAL PRIMARY KEY"
    store.execute(f"CREATE TABLE IF NOT EXISTS cache_stat ({key}, {cols})")
    store.execute(
        f"INSERT INTO cache_stat ({', '.join(_STAT_COLS)}) SELECT "
        "(SELECT COUNT(*) FROM cache), (SELECT COALESCE(SUM(hits), 0) FROM cache), "
        "(SELECT COUNT(*) FROM tool_cache), (SELECT COALESCE(SUM(hits), 0) FROM tool_cache), "
        "(SELECT COUNT(*) FROM blobs), (SELECT COALESCE(SUM(size), 0) FROM blobs)")
    if store.types.get("blob") == "BYTEA":
        _pg_stat_triggers(store)
    else:
        _sqlite_stat_triggers(store)


def _sqlite_stat_triggers(store) -> None:
    for table, n, total, col in _STAT_SOURCES:
        for event, sets in (
            ("INSERT", f"{n} = {n} + 1, {total} = {total} + COALESCE(NEW.{col}, 0)"),
            ("DELETE", f"{n} = {n} - 1, {total} = {total} - COALESCE(OLD.{col}, 0)"),
            (f"UPDATE OF {col}", f"{total} = {total} + COALESCE(NEW.{col}, 0) - COALESCE(OLD.{col}, 0)"),
        ):
            name = f"{table}_stat_{event.split()[0].lower()}"
            store.execute(
                f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON {table} "
                f"BEGIN UPDATE cache_stat SET {sets} WHERE id = (SELECT MIN(id) FROM cache_stat); END")


def _pg_stat_triggers(store) -> None:
    for table, n, total, col in _STAT_SOURCES:
        for event, select in (
            ("INSERT", f"COUNT(*), COALESCE(SUM({col}), 0) FROM new_rows"),
            ("DELETE", f"-COUNT(*), -COALESCE(SUM({col}), 0) FROM old_rows"),
            ("UPDATE", f"0, (SELECT COALESCE(SUM({col}), 0) FROM new_rows) - "
                       f"(SELECT COALESCE(SUM({col}), 0) FROM old_rows) "
                       "WHERE EXISTS (SELECT 1 FROM new_rows)"),
        ):
            fn = f"rewind_{table}_stat_{event.lower()}"
            where = "" if event == "UPDATE" else " HAVING COUNT(*) > 0"  # nothing changed
            store.execute(
                f"CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN "
                f"INSERT INTO cache_stat ({n}, {total}) SELECT {select}{where}; RETURN NULL; END $f$")
            tables = {"INSERT": "NEW TABLE AS new_rows", "DELETE": "OLD TABLE AS old_rows",
                      "UPDATE": "OLD TABLE AS old_rows NEW TABLE AS new_rows"}[event]
            store.execute(f"DROP TRIGGER IF EXISTS {fn} ON {table}")
            store.execute(f"CREATE TRIGGER {fn} AFTER {event} ON {table} REFERENCING {tables} "
                          f"FOR EACH STATEMENT EXECUTE FUNCTION {fn}()")


def _one_age_index(store) -> None:
    store.execute("CREATE INDEX IF NOT EXISTS cache_cached_at ON cache (cached_at)")
    store.execute("DROP INDEX IF EXISTS cache_age")


def _version_8(store) -> None:
    if store.types.get("blob") == "BYTEA":
        store.execute("DROP TRIGGER IF EXISTS rewind_cache_stat_update ON cache")
    else:
        store.execute("DROP TRIGGER IF EXISTS cache_stat_update")
    # counted in the total already; zeroed so that purging an entry no longer takes them out
    store.execute("UPDATE cache SET hits = 0 WHERE hits <> 0")
    for name in ("runs_parent", "runs_owner"):  # partial now: most runs write neither
        store.execute(f"DROP INDEX IF EXISTS {name}")
        store.execute(schema.RUNS.index_ddl(name))


MIGRATIONS = (
    Migration(1, "the first layout", _create_tables),
    Migration(2, "nodes.doc", _add_columns_since(2)),
    Migration(3, "cache.meta, cache.shape_hash, runs.owner", _cache_meta),
    Migration(4, "cache_stat (kept by triggers), cache.cached_at index", _cache_stat),
    Migration(5, "the run search index (trigrams)", lambda store: store._create_search_index()),
    Migration(6, "one cache.cached_at index", _one_age_index),
    Migration(7, "the search index takes new runs in batches",
              lambda store: store._batch_search_index()),
    Migration(8, "cache hits counted once per commit, in cache_stat; partial runs_parent, runs_owner", _version_8),
    Migration(9, "runs.turns_json: the calls that drove a run", _add_columns_since(9)),
    Migration(10, "blobs.location: large values in an object store", _add_columns_since(10)),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def current_version(store) -> Optional[int]:
    """The database's schema version; None for a database with no Rewind schema yet."""
    if not store._table_exists("schema_version"):
        return None
    rows = store.query("SELECT version FROM schema_version")
    return max(int(r[0]) for r in rows) if rows else None


def _check_not_newer(store, version: Optional[int]) -> None:
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(
            f"{store.url} has schema version {version}, newer than this Rewind "
            f"({SCHEMA_VERSION}); upgrade Rewind to open it"
        )


def _check_not_foreign(store, version: Optional[int]) -> None:
    # Every Rewind database has had schema_version since its first layout: tables without it
    # are another application's, and neither its `runs` nor its file is ours to change.
    if version is not None:
        return
    tables = store._table_names()
    if tables and "schema_version" not in tables:  # there now: another opener just made it
        shown = ", ".join(tables[:6]) + (f" and {len(tables) - 6} more" if len(tables) > 6 else "")
        raise StoreError(
            f"{store.url} is not a Rewind database: it holds tables of another application "
            f"({shown}) and no Rewind schema_version. Nothing in it was changed; point Rewind "
            f"at a new file or an empty database")


def ensure_schema(store) -> int:
    """Bring the database to SCHEMA_VERSION; returns the number of migrations applied."""
    version = current_version(store)
    _check_not_newer(store, version)
    _check_not_foreign(store, version)
    if version == SCHEMA_VERSION:
        return 0
    if store.read_only:
        state = "has no Rewind schema" if version is None else f"has schema version {version}"
        raise StoreError(
            f"{store.url} {state} and is open read-only ({store.read_only_reason}); open it "
            f"once from a process that may write it, to migrate it to version {SCHEMA_VERSION}"
        )
    with store.schema_lock():
        version = current_version(store)  # another process may have migrated meanwhile
        _check_not_newer(store, version)
        _check_not_foreign(store, version)
        start = version or 0
        todo = [m for m in MIGRATIONS if m.version > start]
        for m in todo:
            m.apply(store)
        if todo:
            store.execute("DELETE FROM schema_version")
            store.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
    return len(todo)
