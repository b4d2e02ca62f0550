"""Figure 1F: the floor under recording. A first run's SQLite time (every statement Rewind sends,
timed inside the driver) plus Burr's own eight steps with no persister, against Burr with its
SQLitePersister: the ratio no amount of Rewind Python could beat with this schema and one
durable commit per executed step."""

from __future__ import annotations

import collections
import time

from burr.core import ApplicationBuilder

from bench import workload as W
from bench.measure import Figures, fmt, median


def _timed(fn, spent: list, sql, args):
    t0 = time.perf_counter()
    try:
        return fn(sql, args)
    finally:
        spent.append((_kind(sql), time.perf_counter() - t0))


class _TimedCursor:
    def __init__(self, cursor, spent: list):
        self._cursor, self._spent = cursor, spent

    def execute(self, sql, params=()):
        return _timed(self._cursor.execute, self._spent, sql, params)

    def executemany(self, sql, rows):
        return _timed(self._cursor.executemany, self._spent, sql, rows)

    def __getattr__(self, name):
        return getattr(self._cursor, name)


class _TimedConnection:
    """The store's sqlite3 connection, every statement timed (BEGIN and COMMIT included)."""

    def __init__(self, conn, spent: list):
        self._conn, self._spent = conn, spent

    def cursor(self, *a, **k):
        return _TimedCursor(self._conn.cursor(*a, **k), self._spent)

    def execute(self, sql, params=()):
        return _timed(self._conn.execute, self._spent, sql, params)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _kind(sql: str) -> str:
    words = sql.split()
    head = words[0].upper() if words else "?"
    if head in ("INSERT", "UPDATE") and len(words) > 2:
        return f"{head} {words[2] if head == 'INSERT' else words[1]}"
    return "SELECT" if head in ("SELECT", "WITH") else head


def _bare_burr(graph, state: dict) -> None:
    app = (ApplicationBuilder().with_graph(graph).with_entrypoint(W.NODES[0])
           .with_state(**state).build())
    app.run(halt_after=[W.NODES[-1]])


def bench_floor(fig: Figures, cfg: dict, tmp: str) -> None:
    pipeline, rw, burr = W.recording_pair(tmp, "floor")
    try:
        for i in range(3):
            _bare_burr(pipeline.graph, {"topic": W.topic(800_000 + i)})
        conn = rw.store.connection
        spent: list = []
        raw, conn._conn = conn._conn, _TimedConnection(conn._conn, spent)
        sql_ms, run_ms, burr_ms, bare_ms, per_kind = [], [], [], [], collections.defaultdict(list)
        try:
            for i in range(cfg["overhead_pairs"]):
                state = {"topic": W.topic(700_000 + i)}
                del spent[:]
                t0 = time.perf_counter()
                rw.run(pipeline, state)
                run_ms.append((time.perf_counter() - t0) * 1e3)
                sql_ms.append(sum(s for _, s in spent) * 1e3)
                kinds = collections.Counter()
                for k, s in spent:
                    kinds[k] += s
                for k in set(per_kind) | set(kinds):
                    per_kind[k].append(kinds.get(k, 0.0) * 1e3)
                t0 = time.perf_counter()
                burr.run(f"floor{i}", state)
                burr_ms.append((time.perf_counter() - t0) * 1e3)
                t0 = time.perf_counter()
                _bare_burr(pipeline.graph, state)
                bare_ms.append((time.perf_counter() - t0) * 1e3)
        finally:
            conn._conn = raw
        m_sql, m_bare, m_burr, m_run = median(sql_ms), median(bare_ms), median(burr_ms), median(run_ms)
        floor = (m_sql + m_bare) / m_burr
        kinds = {k: median(v) for k, v in sorted(per_kind.items(), key=lambda kv: -median(kv[1]))}
        fig.details["recording_floor"] = {
            "rewind_sql_ms": m_sql, "bare_burr_ms": m_bare, "burr_persister_ms": m_burr,
            "rewind_run_ms": m_run, "floor_ratio": floor, "sql_ms_by_kind": kinds,
            "statements_per_run": len(spent),
        }
        fig.add("floor_sql_ms", "1F. SQLite time inside Rewind's first run (every statement)", m_sql,
                "ms", display=f"{fmt(m_sql)} ms (" + ", ".join(
                    f"{k} {fmt(v * 1e3)} us" for k, v in list(kinds.items())[:4]) + ")")
        fig.add("floor_bare_burr_ms", "1F. Burr alone: the same 8 steps, no persister", m_bare, "ms")
        fig.add("floor_ratio", "1F. floor: (Burr alone + Rewind's SQL) / Burr + SQLitePersister",
                floor, "x", display=f"{fmt(floor)} x ({fmt(m_bare)} + {fmt(m_sql)} / {fmt(m_burr)} ms)")
        fig.add("floor_python_ms", "1F. Rewind's own Python per first run (run - SQL - Burr alone)",
                m_run - m_sql - m_bare, "ms")
    finally:
        rw.close()
        burr.close()
