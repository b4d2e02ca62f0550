"""Run rows: insert, update, read, list with filters and paging, and liveness recovery.

A run whose owner process is gone (see `liveness`) is marked `interrupted` with its totals
summed from its committed steps, whenever a writable store opens; its steps stay readable.
A run of this process whose last commit and the mark after it both failed (a full disk, a lock,
a lost server) is kept in `_UNFINISHED`: every handle of this process on that database reads it
as `interrupted` at once and marks it so as soon as a write goes through.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Iterable, Optional, Sequence

from ..errors import InvalidRequest, NotFound
from .base import RunStore
from .liveness import owner_is_gone
from .schema import RUN_COLUMNS, RUNS, SEARCH_COLUMNS, insert_sql
from .sql import SQLBase

_SELECT = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs"


MIN_PREFIX = 4      # characters of a run id a prefix must have (fewer would name many runs)
SHOWN_MATCHES = 5   # matching ids an ambiguous prefix's error lists

_DEFAULTED = frozenset(c.name for c in RUNS.columns if c.default is not None)

# {database url: {run id: (error, finished_at)}}: runs of this process left `running` in the
# database by a failed commit whose mark failed too. Process-wide, not per handle: another
# handle of this process cannot tell them from live runs (their owner, this process, is alive)
# and no other process will mark them.
_UNFINISHED: dict = {}
_UNFINISHED_LOCK = threading.Lock()


def _forked_child() -> None:
    global _UNFINISHED_LOCK
    _UNFINISHED_LOCK = threading.Lock()  # a lock held by another thread at fork() stays held
    _UNFINISHED.clear()  # the parent's runs: it marks them itself


os.register_at_fork(after_in_child=_forked_child)


class SQLRuns(SQLBase, RunStore):
    def insert_run(self, row: dict) -> None:
        # a NULL where no default would apply is what leaving the column out stores
        cols = [c for c in RUN_COLUMNS if c in row and (row[c] is not None or c in _DEFAULTED)]
        self.execute(insert_sql("runs", cols), [row[c] for c in cols])

    def update_run(self, run_id: str, **fields: Any) -> None:
        unknown = set(fields) - set(RUN_COLUMNS)
        if unknown:
            raise ValueError(f"unknown run columns {sorted(unknown)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*fields.values(), run_id])

    def claim_run(self, run_id: str, from_statuses: Sequence[str], **fields: Any) -> bool:
        """Set `fields` on the run only if its status is one of `from_statuses`, atomically:
        of two processes claiming the same run, exactly one gets True (the run's lease)."""
        unknown = set(fields) - set(RUN_COLUMNS)
        if unknown:
            raise ValueError(f"unknown run columns {sorted(unknown)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        marks = ", ".join("?" * len(from_statuses))
        cur = self.execute(f"UPDATE runs SET {sets} WHERE id = ? AND status IN ({marks})",
                           [*fields.values(), run_id, *[str(s) for s in from_statuses]])
        return cur.rowcount == 1

    def get_run_row(self, run_id: str) -> Optional[dict]:
        return self._as_known(self._read_run_row(run_id))

    def _read_run_row(self, run_id: str) -> Optional[dict]:
        rows = self.query(f"{_SELECT} WHERE id = ?", (run_id,))
        return RUNS.row(rows[0]) if rows else None

    def resolve_run_id(self, prefix: str, owner: Optional[str] = None) -> str:
        """The id of the run `prefix` names, as git takes a commit: the run of that exact id,
        else the one run whose id starts with it (at least `MIN_PREFIX` characters). `owner`
        (None: every run) narrows both to that owner's runs: another owner's run reads exactly
        like a missing one. NotFound when none matches, InvalidRequest naming the matches
        (up to `SHOWN_MATCHES` and how many in all) when several do."""
        if not isinstance(prefix, str) or not prefix:
            raise InvalidRequest(f"a run id must be a non-empty string, not {prefix!r}",
                                 field="run_id")
        shown = repr(prefix[:80] + ("…" if len(prefix) > 80 else ""))
        row = self._read_run_row(prefix)
        if row is not None and (owner is None or row.get("owner") == owner):
            return prefix
        if len(prefix) < MIN_PREFIX:
            raise InvalidRequest(f"no run {shown} in {self.url}; to name a run by a prefix of its "
                                 f"id, give at least {MIN_PREFIX} characters", run_id=prefix)
        # LIKE narrows (an index where the backend has one), substr decides: SQLite's LIKE
        # ignores the case of ASCII letters, and an id is matched exactly as typed
        where = "id LIKE ? ESCAPE '\\' AND substr(id, 1, ?) = ?"
        params: list = [self._escape_like(prefix) + "%", len(prefix), prefix]
        if owner is not None:
            where += " AND owner = ?"
            params.append(owner)
        ids = [r[0] for r in self.query(f"SELECT id FROM runs WHERE {where} ORDER BY id LIMIT ?",
                                        [*params, SHOWN_MATCHES + 1])]
        if len(ids) == 1:
            return ids[0]
        if not ids:
            raise NotFound(f"no run {shown} in {self.url} (no run id starts with it either)",
                           run_id=prefix)
        total = len(ids) if len(ids) <= SHOWN_MATCHES else int(
            self.query(f"SELECT COUNT(*) FROM runs WHERE {where}", params)[0][0])
        listed = ", ".join(ids[:SHOWN_MATCHES]) + (", ..." if total > SHOWN_MATCHES else "")
        raise InvalidRequest(f"{shown} matches {total} runs: {listed}; type more of the id",
                             run_id=prefix)

    def get_run_rows(self, run_ids: Sequence[str]) -> dict:
        ids = list(dict.fromkeys(i for i in run_ids if i))
        return {r[0]: self._as_known(RUNS.row(r))
                for r in self.query_in(f"{_SELECT} WHERE id IN ({{marks}})", ids)}

    @staticmethod
    def _escape_like(text: str) -> str:
        """`text` matched literally by LIKE ... ESCAPE '\\' (its % and _ are no wildcards)."""
        return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")

    @classmethod
    def _like(cls, text: str) -> str:
        return f"%{cls._escape_like(text)}%"

    def _search_prefilter(self, text: str) -> Optional[tuple]:
        """(SQL, params) narrowing a search to a superset of its matches through an index, or
        None: the LIKE below scans. A backend with a search index overrides it (SQLite: FTS5
        trigrams; PostgreSQL: pg_trgm over the joined columns)."""
        return None

    def _run_filters(self, pipeline=None, status=None, parent_id=None, search=None, forks_only=False,
                     owner=None, after=None):
        where, params = [], []
        unfinished = list(self.unfinished()) if status else []
        for column, value in (("pipeline", pipeline), ("status", status), ("parent_id", parent_id),
                              ("owner", owner)):
            if value:
                if column == "status" and unfinished:  # the status this process knows they have
                    where.append("(CASE WHEN status = 'running' AND id IN ("
                                 + ", ".join("?" * len(unfinished))
                                 + ") THEN 'interrupted' ELSE status END) = ?")
                    params += unfinished
                else:
                    where.append(f"{column} = ?")
                params.append(value)
        if forks_only:
            where.append("parent_id IS NOT NULL")
        if search:
            # LIKE stops at a NUL on SQLite (matching everything) and PostgreSQL text cannot
            # hold one: display text stores NUL as U+FFFD, so search for that
            text = str(search).replace("\x00", "\ufffd")
            pre = self._search_prefilter(text)
            if pre is not None:
                where.append(pre[0])
                params += pre[1]
            # the LIKE decides what matches, index or not: an index only narrows the rows it
            # looks at, so results are the same with and without one
            like = self._like(text)
            where.append("(" + " OR ".join(f"{c} LIKE ? ESCAPE '\\'" for c in SEARCH_COLUMNS) + ")")
            params += [like] * len(SEARCH_COLUMNS)
        if after is not None:
            # keyset paging: the rows after (created_at, id) in ORDER BY created_at DESC, id DESC;
            # written so the created_at index bounds the range (a row-value OR would scan)
            created, run_id = after
            where.append("created_at <= ? AND (created_at < ? OR id < ?)")
            params += [created, created, run_id]
        return (" WHERE " + " AND ".join(where)) if where else "", params

    def list_run_rows(self, limit: int = 50, offset: int = 0, **filters: Any) -> list:
        """A page of runs, newest first; `after=(created_at, id)` of the previous page's last
        run starts the page right after it (keyset: no rows skipped over), `offset` skips."""
        clause, params = self._run_filters(**filters)
        rows = self.query(f"{_SELECT}{clause} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
                          [*params, int(limit), int(offset)])
        return [self._as_known(RUNS.row(r)) for r in rows]

    def run_cursor(self, run_id: str) -> Optional[tuple]:
        """(created_at, id, owner) of a run, the key keyset paging continues after; None if absent."""
        rows = self.query("SELECT created_at, id, owner FROM runs WHERE id = ?", (run_id,))
        return tuple(rows[0]) if rows else None

    def count_runs(self, **filters: Any) -> int:
        clause, params = self._run_filters(**filters)
        return int(self.query(f"SELECT COUNT(*) FROM runs{clause}", params)[0][0])

    def pipelines(self, owner: Optional[str] = None) -> list:
        if owner is not None:
            return [r[0] for r in self.query(
                "SELECT DISTINCT pipeline FROM runs WHERE owner = ? ORDER BY pipeline", (owner,))]
        return [r[0] for r in self.query("SELECT DISTINCT pipeline FROM runs ORDER BY pipeline")]

    def children(self, run_id: str, owner: Optional[str] = None) -> list:
        if owner is not None:
            rows = self.query(f"{_SELECT} WHERE parent_id = ? AND owner = ? ORDER BY created_at",
                              (run_id, owner))
        else:
            rows = self.query(f"{_SELECT} WHERE parent_id = ? ORDER BY created_at", (run_id,))
        return [self._as_known(RUNS.row(r)) for r in rows]

    # liveness ------------------------------------------------------------------------------
    def recover_interrupted(self) -> list:
        """Mark runs whose owner process is gone as `interrupted`; return their ids."""
        now = time.time()
        rows = self.query(
            "SELECT id, owner_host, owner_pid, owner_started, heartbeat_at FROM runs "
            "WHERE status = 'running'"
        )
        dead = [run_id for run_id, host, pid, started, beat in rows
                if owner_is_gone(host, pid, started, beat, now)]
        if self.read_only:
            return dead  # reported, not written: a read-only handle shows them as they are
        for run_id in dead:
            with self.transaction():
                self.mark_interrupted(run_id, "the process running it died", only_running=True)
        return dead

    def note_unfinished(self, run_id: str, error: str, finished_at: float) -> None:
        """A run of this process whose last commit, and the mark after it, failed (a full disk,
        a lock, the server gone): from now on every handle of this process on the database
        reads it as `interrupted` (`_as_known`), and `finish_unfinished` marks it so once a
        write goes through, as no other process will (its owner, this process, is alive)."""
        with _UNFINISHED_LOCK:
            _UNFINISHED.setdefault(self.url, {})[run_id] = (error, finished_at)

    def unfinished(self) -> dict:
        """{run id: (error, finished_at)} of this database's runs `note_unfinished` kept."""
        return dict(_UNFINISHED.get(self.url) or {})

    def forget_unfinished(self, run_id: str) -> Optional[tuple]:
        """Stop treating a kept run as interrupted (it is being resumed); what was kept."""
        with _UNFINISHED_LOCK:
            return (_UNFINISHED.get(self.url) or {}).pop(run_id, None)

    def _as_known(self, row: Optional[dict]) -> Optional[dict]:
        # a run this process knows is interrupted, though the database could not be told yet
        if row is None or row.get("status") != "running":
            return row
        kept = (_UNFINISHED.get(self.url) or {}).get(row["id"])
        if kept is None:
            return row
        return {**row, "status": "interrupted", "error": row.get("error") or kept[0],
                "finished_at": kept[1]}

    def finish_unfinished(self) -> list:
        """Mark the runs `note_unfinished` kept as `interrupted`; the ids marked. Cheap when
        there are none (every call of the API asks)."""
        done: list = []
        while _UNFINISHED.get(self.url):
            with _UNFINISHED_LOCK:
                pending = _UNFINISHED.get(self.url) or {}
                if not pending:
                    break
                run_id, (error, finished_at) = next(iter(pending.items()))
            try:
                with self.transaction():
                    self.mark_interrupted(run_id, error, finished_at, only_running=True)
            except Exception:  # still failing: the next call, or the heartbeat, tries again
                self.reset_connection()
                break
            with _UNFINISHED_LOCK:
                (_UNFINISHED.get(self.url) or {}).pop(run_id, None)
            done.append(run_id)
        return done

    def mark_interrupted(self, run_id: str, error: str, finished_at: Optional[float] = None,
                         only_running: bool = False) -> None:
        """Mark a run `interrupted` (resumable) with its totals counted from the steps it has
        stored: what a crash or a failed last commit left is what the run shows."""
        totals = self.query(
            "SELECT COUNT(*), COALESCE(SUM(tokens), 0), COALESCE(SUM(tokens_saved), 0), "
            "COALESCE(SUM(latency_ms), 0) FROM nodes WHERE run_id = ?",
            (run_id,),
        )[0]
        self.execute(
            "UPDATE runs SET status = 'interrupted', step_count = ?, total_tokens = ?, "
            "tokens_saved = ?, latency_ms = ?, "
            "finished_at = COALESCE(?, heartbeat_at, created_at), "
            # a dead owner's run keeps an error it had; a failed last commit says why
            + ("error = COALESCE(error, ?) WHERE id = ? AND status = 'running'" if only_running
               else "error = ? WHERE id = ?"),
            (int(totals[0]), int(totals[1]), int(totals[2]), float(totals[3]), finished_at,
             error, run_id),
        )

    # maintenance ---------------------------------------------------------------------------
    def run_ages(self) -> Iterable[tuple]:
        """(id, created_at, status, parent_id) of every run, in pages."""
        return self.scan("SELECT id, created_at, status, parent_id FROM runs")

    def delete_runs(self, run_ids: Iterable[str]) -> None:
        """Delete runs and their step rows (their saved states and blobs are gc's to judge)."""
        ids = sorted(run_ids)
        self.execute_in("DELETE FROM nodes WHERE run_id IN ({marks})", ids)
        self.execute_in("DELETE FROM runs WHERE id IN ({marks})", ids)
