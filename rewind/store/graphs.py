"""Pipeline graphs (`edges`): each graph stored once under its content id.

A graph is its node names in order (rows with no `dst`) followed by its transitions
(src, dst, condition); runs refer to it by `graph_id`.
"""

from __future__ import annotations

from typing import Sequence

from .base import GraphStore
from .sql import SQLBase

_INSERT = ("INSERT INTO edges (graph_id, ord, src, dst, condition) VALUES (?, ?, ?, ?, ?) "
           "ON CONFLICT (graph_id, ord) DO NOTHING")


class SQLGraphs(SQLBase, GraphStore):
    def has_graph(self, graph_id: str) -> bool:
        return bool(self.query("SELECT 1 FROM edges WHERE graph_id = ? LIMIT 1", (graph_id,)))

    def put_graph(self, graph_id: str, nodes: Sequence[str], edges: Sequence[tuple]) -> None:
        # A read-only handle can record no run, so it needs no graph: registering a pipeline
        # on it (the dashboard does) must not fail.
        if self.read_only or self.has_graph(graph_id):
            return
        rows = [(n, None, None) for n in nodes] + list(edges)
        with self.transaction():
            self.put_graph_rows(graph_id, [(i, src, dst, cond) for i, (src, dst, cond) in enumerate(rows)])

    def put_graph_rows(self, graph_id: str, rows: Sequence[tuple]) -> None:
        """Store a graph as (ord, src, dst, condition) rows (an import carries them so)."""
        self.executemany(_INSERT, [(graph_id, *r) for r in rows])

    def graph_rows(self, graph_id: str) -> list:
        """(ord, src, dst, condition) rows of a stored graph, in order."""
        return [tuple(r) for r in self.query(
            "SELECT ord, src, dst, condition FROM edges WHERE graph_id = ? ORDER BY ord", (graph_id,))]

    def get_graph(self, graph_id: str) -> tuple:
        """(node names in order, [(src, dst, condition)]) of a stored pipeline graph."""
        rows = self.graph_rows(graph_id)
        nodes = [r[1] for r in rows if r[2] is None]
        edges = [(r[1], r[2], r[3]) for r in rows if r[2] is not None]
        return nodes, edges
