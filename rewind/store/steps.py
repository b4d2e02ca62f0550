"""Step rows (`nodes`): one per step of a run, inherited steps stored as pointers.

A fork's inherited steps are pointers to its parent's rows (`rows.is_pointer`); reads resolve
them through the parent chain, so a no-edit fork adds no copies. gc materializes pointers
(`replace_pointers`) before it purges the parent they point into.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..errors import NotFound, StoreError
from .base import StepStore
from .rows import inherit_row, is_pointer
from .schema import NODE_COLUMNS, NODES, insert_sql
from .sql import SQLBase

_SELECT = f"SELECT {', '.join(NODE_COLUMNS)} FROM nodes"
_POINTER = "status = 'inherited' AND doc IS NULL AND field_hashes IS NULL AND input_hash IS NULL"
MAX_LINEAGE = 10_000


# Columns an INSERT must always name: those with an SQL default (a NULL given would differ
# from the default it would take if left out)
_DEFAULTED = frozenset(c.name for c in NODES.columns if c.default is not None)


class SQLSteps(SQLBase, StepStore):
    def insert_nodes(self, rows: list) -> None:
        """Insert step rows ({column: value}). Columns no row sets (and no default makes
        non-NULL) are left out of the statement: they are NULL either way, and each column
        named costs every row its binding (a no-edit fork's rows leave 8 of 23 unset)."""
        present = {k for row in rows for k, v in row.items() if v is not None}
        cols = [c for c in NODE_COLUMNS if c in present or c in _DEFAULTED]
        self.executemany(insert_sql("nodes", cols), [tuple(map(row.get, cols)) for row in rows])

    def get_node_rows(self, run_id: str, parent_id: Any = False) -> list:
        """A run's step rows in order, inherited steps resolved (see `rows.is_pointer`); pass
        the run's `parent_id` if known (saves a query when some of its rows are pointers)."""
        return self._resolve_pointers(run_id, self.raw_node_rows(run_id), parent_id)

    def raw_node_rows(self, run_id: str) -> list:
        """A run's step rows as stored (inherited steps may be pointers)."""
        return [NODES.row(r) for r in self.query(f"{_SELECT} WHERE run_id = ? ORDER BY idx", (run_id,))]

    def get_node_rows_for_runs(self, run_ids: Sequence[str]) -> dict:
        out: dict = {rid: [] for rid in run_ids}
        for r in self.query_in(f"{_SELECT} WHERE run_id IN ({{marks}}) ORDER BY run_id, idx", list(run_ids)):
            row = NODES.row(r)
            out[row["run_id"]].append(row)
        return {rid: self._resolve_pointers(rid, rows) for rid, rows in out.items()}

    def _resolve_pointers(self, run_id: str, rows: list, parent_id: Any = False, depth: int = 0) -> list:
        if not any(is_pointer(r) for r in rows):
            return rows
        if parent_id is False:
            run = self.get_run_row(run_id)
            parent_id = run["parent_id"] if run else None
        parent_rows: dict = {}
        if parent_id:
            if depth > MAX_LINEAGE:
                raise StoreError(f"run {run_id}: its parent chain does not end")
            got = self.raw_node_rows(parent_id)
            parent_rows = {r["idx"]: r for r in self._resolve_pointers(parent_id, got, False, depth + 1)}
        out = []
        for r in rows:
            if is_pointer(r):
                p = parent_rows.get(r["idx"])
                if p is None:
                    raise NotFound(
                        f"step {r['idx']} of run {run_id} is inherited from run {parent_id}, "
                        "whose step rows are missing"
                    )
                r = inherit_row(p, run_id, r["idx"])
            out.append(r)
        return out

    def delete_failed_steps(self, run_id: str) -> int:
        """Drop a run's failed step rows: a resume executes the failed step again."""
        cur = self.execute("DELETE FROM nodes WHERE run_id = ? AND status = 'failed'", (run_id,))
        return max(int(cur.rowcount or 0), 0)

    # maintenance ---------------------------------------------------------------------------
    def runs_with_pointers(self) -> set:
        """Ids of runs that have inherited steps stored as pointers."""
        return {r for (r,) in self.scan(f"SELECT DISTINCT run_id FROM nodes WHERE {_POINTER}")}

    def replace_pointers(self, run_id: str, full_rows: list) -> None:
        """Turn a run's pointer rows into these full rows (resolved while the parent exists)."""
        self.execute(f"DELETE FROM nodes WHERE run_id = ? AND {_POINTER}", (run_id,))
        self.insert_nodes(full_rows)

    def step_references(self) -> Iterable[tuple]:
        """(run_id, state_app_id, sequence_id, inputs, outputs, doc) of every step row, in pages:
        what a step refers to (blobs, docs, saved states)."""
        return self.scan("SELECT run_id, state_app_id, sequence_id, inputs, outputs, doc FROM nodes")

    def step_count(self) -> int:
        return int(self.query("SELECT COUNT(*) FROM nodes")[0][0])

