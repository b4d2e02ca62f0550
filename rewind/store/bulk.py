"""Bulk table copies between SQLite files, for the benchmark's synthetic stores (bench/synth.py).

`table_rows` reads a whole table as it is stored; `BulkLoader` writes many rows into a store
the product created (its schema), with durability off for the load only, then checkpoints.
No run, step or cache semantics here: rows are copied, not interpreted.
"""

from __future__ import annotations

import sqlite3
from typing import Optional, Sequence

from .schema import insert_sql


def table_rows(path: str, table: str, where: str = "", params: Sequence = ()) -> tuple:
    """(column names, rows as lists) of `table` in the SQLite file at `path`."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cur = conn.execute(f"SELECT * FROM {table} {where}", tuple(params))
        return [d[0] for d in cur.description], [list(r) for r in cur.fetchall()]
    finally:
        conn.close()


class BulkLoader:
    """`with BulkLoader(path) as load: load.insert(table, columns, rows)`: one transaction."""

    def __init__(self, path: str):
        self.path = path
        self.conn: Optional[sqlite3.Connection] = None

    def __enter__(self) -> "BulkLoader":
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = OFF")  # a generated file: rebuilt if lost
        self.conn.execute("PRAGMA cache_size = -400000")
        self.conn.execute("BEGIN")
        return self

    def insert(self, table: str, columns: Sequence[str], rows: list) -> None:
        if rows:
            self.conn.executemany(insert_sql(table, columns), rows)

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
            if not exc_type:
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self.conn.close()
