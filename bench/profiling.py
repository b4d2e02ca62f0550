"""Where a cached replay spends its time: a cProfile by module, and the SQL one fork issues."""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys

from bench.workload import FORK_AT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- profile of the cached replay ------------------------------------------------------------

def _bucket(filename: str, funcname: str) -> str:
    if "sqlite3" in funcname or filename.endswith("sqlite3/__init__.py"):
        return "sqlite3 (C calls)"
    if "/rewind/" in filename:
        return "rewind/" + os.path.basename(filename)
    if "/burr/" in filename:
        return "burr"
    if "/json/" in filename or "json" in funcname:
        return "json"
    if filename.endswith("inspect.py"):
        return "inspect"
    if "sha256" in funcname or "hashlib" in funcname:
        return "hashlib"
    return "other"


def profile_replay(replay: dict, n: int, top: int = 25) -> dict:
    rw, root = replay["rw"], replay["root"]
    for _ in range(5):
        rw.fork(root.id, at=FORK_AT)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        rw.fork(root.id, at=FORK_AT)
    pr.disable()
    st = pstats.Stats(pr)
    total = st.total_tt
    buckets: dict = {}
    for (filename, _line, funcname), (_cc, _nc, tt, _ct, _callers) in st.stats.items():
        b = _bucket(filename, funcname)
        buckets[b] = buckets.get(b, 0.0) + tt
    buf = io.StringIO()
    st2 = pstats.Stats(pr, stream=buf)
    st2.sort_stats("tottime").print_stats(top)
    by_tt = buf.getvalue()
    buf = io.StringIO()
    st3 = pstats.Stats(pr, stream=buf)
    st3.sort_stats("cumulative").print_stats(r"rewind/", top)
    by_cum = buf.getvalue()

    def clean(text: str) -> str:
        lines = [ln.replace(ROOT + "/", "").replace(os.path.dirname(os.__file__) + "/", "")
                 for ln in text.splitlines()]
        site = [p for p in sys.path if p.endswith("site-packages")]
        out = []
        for ln in lines:
            for s in site:
                ln = ln.replace(s + "/", "")
            out.append(ln.rstrip())
        keep = [ln for ln in out if ln.strip()]
        start = next((i for i, ln in enumerate(keep) if ln.strip().startswith("ncalls")), 0)
        return "\n".join(keep[start:])

    return {
        "forks": n, "profiled_us_per_fork": total / n * 1e6,
        "self_time_share": {k: round(v / total * 100, 1) for k, v in
                            sorted(buckets.items(), key=lambda kv: -kv[1])},
        "top_tottime": clean(by_tt), "top_cumulative_rewind": clean(by_cum),
    }


def sql_per_fork(replay: dict) -> dict:
    """SQL statements and transactions one no-edit fork issues (counted with a trace callback)."""
    rw, root = replay["rw"], replay["root"]
    conn = rw.store.connection._conn
    seen: list = []
    conn.set_trace_callback(seen.append)
    try:
        rw.fork(root.id, at=FORK_AT)
    finally:
        conn.set_trace_callback(None)
    kinds: dict = {}
    for s in seen:
        k = s.strip().split()[0].upper()
        kinds[k] = kinds.get(k, 0) + 1
    return {"statements": len(seen), "by_kind": kinds,
            "transactions": sum(1 for s in seen if s.strip().upper().startswith("BEGIN"))}
