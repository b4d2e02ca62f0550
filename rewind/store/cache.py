"""The caches: node cache (node, input_hash) -> outputs, tool cache (tool, args_hash) -> result,
and the alarms raised when one input hash gave two different outputs.

An entry's `outputs` is a refs map ({field: blob hash}); the values are blobs. Expiry by TTL is
the engine's decision (it knows the node's policy); purging by age is here.
"""

from __future__ import annotations

import math
import time
from typing import Any, Iterable, Optional, Sequence

from . import serde
from ..errors import IntegrityError, InvalidRequest, NotFound
from ..keys import canonical_hash
from .base import CacheStore
from .schema import ALARM_COLUMNS, CACHE, CACHE_COLUMNS
from .sql import SQLBase, chunks

_SELECT = f"SELECT {', '.join(CACHE_COLUMNS)} FROM cache"
_KEYS_PER_QUERY = 200
_ROWS_PER_INSERT = 50  # cache rows per INSERT (15 parameters each)
_STAT_COLS = ("entries", "hits", "tool_entries", "tool_hits", "blobs", "blob_bytes")
_STAT_FOLD = 500  # cache_stat rows read before they are folded into one
# the hit counter's statement: it changes no cache entry
ADD_HITS_SQL = ("UPDATE cache_stat SET hits = hits + ? WHERE id = (SELECT MIN(id) FROM cache_stat)",
                "INSERT INTO cache_stat (hits) VALUES (?)")  # SQLite (one row), PostgreSQL (a row a statement)


# what a new entry for an existing key replaces: all but its key and its hit count
_REPLACE = "DO UPDATE SET " + ", ".join(
    f"{c} = excluded.{c}" for c in CACHE_COLUMNS if c not in ("node", "input_hash", "hits"))


class SQLCache(SQLBase, CacheStore):
    # node cache ----------------------------------------------------------------------------
    def cache_get(self, node: str, input_hash: str) -> Optional[dict]:
        rows = self.query(f"{_SELECT} WHERE node = ? AND input_hash = ?", (node, input_hash))
        return CACHE.row(rows[0]) if rows else None

    def cache_get_many(self, keys: Sequence[tuple]) -> dict:
        """{(node, input_hash): entry} for the keys that have a cache entry (one query)."""
        keys = list(dict.fromkeys(tuple(k) for k in keys if k[1]))
        out: dict = {}
        for i in range(0, len(keys), _KEYS_PER_QUERY):
            chunk = keys[i : i + _KEYS_PER_QUERY]
            where = " OR ".join(["(node = ? AND input_hash = ?)"] * len(chunk))
            for r in self.query(f"{_SELECT} WHERE {where}", [x for k in chunk for x in k]):
                entry = CACHE.row(r)
                out[(entry["node"], entry["input_hash"])] = entry
        return out

    def cache_prefetch(self, keys: Sequence[tuple]) -> dict:
        """`cache_get_many` for a fork about to serve hits; a backend may answer from what it
        read before, while nobody has changed a cache entry since."""
        return self.cache_get_many(keys)

    def latest_cache_entry_like(self, node: str, shape_hash: str) -> Optional[dict]:
        """The newest entry of `node` whose key, all but the code, is `shape_hash`."""
        rows = self.query(f"{_SELECT} WHERE node = ? AND shape_hash = ? ORDER BY cached_at DESC "
                          "LIMIT 1", (node, shape_hash))
        return CACHE.row(rows[0]) if rows else None

    def cache_get_and_like(self, node: str, input_hash: str, shape_hash: str) -> tuple:
        """(`cache_get`, `latest_cache_entry_like`) in one query."""
        rows = self.query(
            f"SELECT 0, * FROM ({_SELECT} WHERE node = ? AND input_hash = ?) AS e UNION ALL "
            f"SELECT 1, * FROM ({_SELECT} WHERE node = ? AND shape_hash = ? "
            "ORDER BY cached_at DESC LIMIT 1) AS l",
            (node, input_hash, node, shape_hash))
        got = {r[0]: CACHE.row(r[1:]) for r in rows}
        return got.get(0), got.get(1)

    def cache_put(self, row: dict, keep_existing: bool = False) -> None:
        """Insert a cache entry; replace an existing one unless `keep_existing` (a
        deterministic entry keeps its first output)."""
        self.cache_put_many([(row, keep_existing)])

    def cache_put_many(self, entries: Sequence[tuple]) -> None:
        """`cache_put` of each (row, keep_existing), in order: one statement for the entries
        that keep an existing one and one for those that replace it, unless a key comes twice
        (then the order between them matters, and each goes alone)."""
        keys = [(row["node"], row["input_hash"]) for row, _ in entries]
        if len(set(keys)) < len(keys):
            for entry in entries:
                self._insert_cache_rows([entry[0]], entry[1])
            return
        for keep in (True, False):
            for rows in chunks([row for row, k in entries if bool(k) is keep], _ROWS_PER_INSERT):
                self._insert_cache_rows(rows, keep)

    def _insert_cache_rows(self, rows: list, keep_existing: bool) -> None:
        cols = CACHE_COLUMNS
        conflict = "DO NOTHING" if keep_existing else _REPLACE
        values = ", ".join([f"({', '.join('?' * len(cols))})"] * len(rows))
        self.execute(
            f"INSERT INTO cache ({', '.join(cols)}) VALUES {values} "
            f"ON CONFLICT (node, input_hash) {conflict}",
            [row.get(c, 0 if c == "hits" else None) for row in rows for c in cols],
        )

    def cache_hits(self, keys: list) -> None:
        """Count one hit per key in `keys` (repeats count again) into the cache's total: one
        statement per commit, however many steps it holds (schema version 8: hits are the
        store's count of steps served from the cache, not a column of each entry)."""
        if keys:
            self.execute_write(ADD_HITS_SQL[self.types.get("blob") == "BYTEA"], (len(keys),))

    def cache_stats(self) -> dict:
        """Totals of the caches and blobs, from `cache_stat` (kept by triggers, migration 4):
        no scan of the cache or the blobs, however many there are."""
        sums = ", ".join(f"COALESCE(SUM({c}), 0)" for c in _STAT_COLS)
        row = self.query(f"SELECT COUNT(*), {sums} FROM cache_stat")[0]
        entries, hits, tools, tool_hits, blob_count, blob_bytes = (int(x) for x in row[1:])
        if row[0] > _STAT_FOLD and not self.read_only:
            self._fold_stats()
        oldest = self.query("SELECT MIN(cached_at) FROM cache")[0][0]
        return {
            "entries": int(entries), "hits": int(hits), "oldest": oldest,
            "tool_entries": int(tools), "tool_hits": int(tool_hits),
            "blobs": blob_count, "blob_bytes": blob_bytes,
        }

    def _fold_stats(self) -> None:
        """Fold the per-statement rows of `cache_stat` (PostgreSQL appends one per writing
        statement) into one; rows appended meanwhile by others are left for the next fold."""
        cols = ", ".join(_STAT_COLS)
        sums = ", ".join(f"COALESCE(SUM({c}), 0)" for c in _STAT_COLS)
        with self.transaction():
            self.execute(f"WITH d AS (DELETE FROM cache_stat RETURNING {cols}) "
                         f"INSERT INTO cache_stat ({cols}) SELECT {sums} FROM d")

    # tool cache ----------------------------------------------------------------------------
    def tool_cache_get(self, tool: str, args_hash: str, ttl: Optional[float], now: float):
        rows = self.query(
            "SELECT result_hash, cached_at FROM tool_cache WHERE tool = ? AND args_hash = ?",
            (tool, args_hash),
        )
        if not rows or (ttl is not None and now - rows[0][1] >= ttl):
            return None
        try:
            value = self.get_blobs([rows[0][0]])[rows[0][0]]
        except (IntegrityError, NotFound):
            return None
        if not self.read_only:
            with self.transaction():
                self.execute(
                    "UPDATE tool_cache SET hits = hits + 1 WHERE tool = ? AND args_hash = ?",
                    (tool, args_hash),
                )
        return (value,)

    def tool_cache_put(self, tool: str, args_hash: str, result: Any, now: float) -> None:
        data = serde.encode(result, tool)
        h = canonical_hash(result, tool)
        with self.transaction():
            self.put_blobs({h: data})
            self.execute(
                "INSERT INTO tool_cache (tool, args_hash, result_hash, cached_at, hits) "
                "VALUES (?, ?, ?, ?, 0) ON CONFLICT (tool, args_hash) DO UPDATE SET "
                "result_hash = excluded.result_hash, cached_at = excluded.cached_at",
                (tool, args_hash, h, now),
            )

    # alarms --------------------------------------------------------------------------------
    def add_alarm(self, node: str, input_hash: str, hash_a: str, hash_b: str, run_id: str) -> None:
        self.execute(
            "INSERT INTO alarms (node, input_hash, output_hash_a, output_hash_b, run_id, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (node, input_hash, output_hash_b) DO NOTHING",
            (node, input_hash, hash_a, hash_b, run_id, time.time()),
        )

    def alarms(self, node: Optional[str] = None) -> list:
        sql = f"SELECT {', '.join(ALARM_COLUMNS)} FROM alarms"
        params: list = []
        if node:
            sql += " WHERE node = ?"
            params.append(node)
        return [dict(zip(ALARM_COLUMNS, r)) for r in self.query(sql + " ORDER BY created_at", params)]

    # age -----------------------------------------------------------------------------------
    def count_cache_older(self, cutoff: float) -> tuple:
        """(node-cache entries, tool-cache entries) cached before `cutoff` (epoch seconds)."""
        n = int(self.query("SELECT COUNT(*) FROM cache WHERE cached_at < ?", (cutoff,))[0][0])
        t = int(self.query("SELECT COUNT(*) FROM tool_cache WHERE cached_at < ?", (cutoff,))[0][0])
        return n, t

    def delete_cache_older(self, cutoff: float) -> None:
        self.execute("DELETE FROM cache WHERE cached_at < ?", (cutoff,))
        self.execute("DELETE FROM tool_cache WHERE cached_at < ?", (cutoff,))

    def purge_cache(self, older_than_s: float, dry_run: bool = False) -> int:
        try:
            older_than_s = float(older_than_s)
        except (TypeError, ValueError):
            raise InvalidRequest(f"older_than must be a number of seconds, not {older_than_s!r}") from None
        if math.isnan(older_than_s) or older_than_s < 0:
            # NaN compares false everywhere: on PostgreSQL `cached_at < NaN` is true for all rows
            raise InvalidRequest(f"older_than must be >= 0 seconds, not {older_than_s!r}")
        cutoff = time.time() - older_than_s
        n = sum(self.count_cache_older(cutoff))
        if not dry_run:
            with self.transaction():
                self.delete_cache_older(cutoff)
        return n

    def kept_cache_references(self, cutoff: float) -> Iterable[tuple]:
        """('outputs', refs json) of node-cache entries and ('tool', result hash) of tool-cache
        entries cached at or after `cutoff`, in pages: the blobs the caches keep."""
        for (outputs,) in self.scan("SELECT outputs FROM cache WHERE cached_at >= ?", (cutoff,)):
            yield "outputs", outputs
        for (h,) in self.scan("SELECT result_hash FROM tool_cache WHERE cached_at >= ?", (cutoff,)):
            yield "tool", h
