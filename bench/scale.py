"""Figures 4 and 5: bytes a fork adds, queries on a large synthetic store, the Runs page's first
render (app.py, whose default page is Runs, under Streamlit's AppTest in a fresh process)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from typing import Optional

import rewind

from bench import synth
from bench import workload as W
from bench.measure import Figures, fmt, median
from bench.workload import FORK_AT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- 4. scale --------------------------------------------------------------------------------

def _dbstat(path: str) -> dict:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT name, SUM(pgsize), SUM(payload) FROM dbstat GROUP BY name"
        ).fetchall()
        tbl = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master").fetchall())
    finally:
        conn.close()
    out: dict = {}
    for name, pgsize, payload in rows:
        t = tbl.get(name, name)
        e = out.setdefault(t, {"bytes": 0, "payload": 0})
        e["bytes"] += pgsize or 0
        e["payload"] += payload or 0
    return out


def _checkpoint_size(path: str, store=None) -> int:
    if store is not None:  # its background checkpoint held off meanwhile
        store.checkpoint_wal("TRUNCATE")
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    wal = os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0
    return pages * size + wal


def bench_fork_bytes(fig: Figures, cfg: dict, tmp: str) -> None:
    path = os.path.join(tmp, "forkbytes.db")
    pipeline = W.make_pipeline("bench8")
    with rewind.Rewind(path) as rw:
        root = rw.run(pipeline, {"topic": W.topic(1)}, use_cache=False)
        for _ in range(10):
            rw.fork(root.id, at=FORK_AT)
        size0, stat0 = _checkpoint_size(path, rw.store), _dbstat(path)
        n = cfg["fork_bytes_forks"]
        for _ in range(n):
            rw.fork(root.id, at=FORK_AT)
        size1, stat1 = _checkpoint_size(path, rw.store), _dbstat(path)
    per_table = {
        t: round((stat1[t]["payload"] - stat0.get(t, {"payload": 0})["payload"]) / n)
        for t in stat1 if stat1[t]["payload"] != stat0.get(t, {"payload": 0})["payload"]
    }
    file_per_fork = (size1 - size0) / n
    payload_per_fork = sum(per_table.values())
    fig.details["fork_bytes"] = {
        "forks": n, "file_bytes_per_fork": file_per_fork, "payload_bytes_per_fork": payload_per_fork,
        "payload_per_table_per_fork": per_table,
        "method": "no-edit forks at node 3 on a small store; file size after wal_checkpoint(TRUNCATE) "
                  "and dbstat payload (rows + index entries), before and after, divided by the forks",
    }
    fig.add("bytes_per_fork", "4. bytes added by one no-edit fork (file, after checkpoint)",
            file_per_fork, "B", "< 4 KB", file_per_fork < 4096,
            display=f"{file_per_fork:,.0f} B (row payload {payload_per_fork:,} B)")


def bench_scale(fig: Figures, cfg: dict, path: str, meta: dict) -> None:
    ids = synth.pick_ids(path)
    n_runs = ids["runs"]
    label = f"{n_runs // 1000}k runs"
    d: dict = {"store": path, "runs": n_runs, "steps": meta.get("steps"),
               "generated_s": meta.get("seconds"), "reused": meta.get("cached")}
    t0 = time.perf_counter()
    rw = rewind.Rewind(path)
    d["open_ms"] = (time.perf_counter() - t0) * 1e3
    try:
        lists = {}
        for filt in (dict(pipeline="bench8", status="completed"), dict(pipeline="etl", status="failed"),
                     dict(pipeline="support", status="interrupted"), dict()):
            name = ",".join(f"{k}={v}" for k, v in filt.items()) or "unfiltered"
            t0 = time.perf_counter()
            page = rw.list_runs(limit=50, **filt)
            first = (time.perf_counter() - t0) * 1e3
            ts = []
            for _ in range(cfg["scale_reps"]):
                t0 = time.perf_counter()
                rw.list_runs(limit=50, **filt)
                ts.append((time.perf_counter() - t0) * 1e3)
            lists[name] = {"first_ms": first, "median_ms": median(ts), "rows": len(page)}
        d["list_runs"] = lists
        filtered = {k: v for k, v in lists.items() if k != "unfiltered"}
        worst = max(filtered, key=lambda k: max(filtered[k]["median_ms"], filtered[k]["first_ms"]))
        wv = max(filtered[worst]["median_ms"], filtered[worst]["first_ms"])
        fig.add("list_runs_ms", f"4. list_runs(pipeline, status, limit=50), {label} (worst filter)",
                wv, "ms", "< 50 ms", wv < 50, display=f"{fmt(wv)} ms ({worst})")

        def timed(fn) -> tuple:
            t0 = time.perf_counter()
            fn()
            first = (time.perf_counter() - t0) * 1e3
            ts = []
            for _ in range(cfg["scale_reps"]):
                t0 = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t0) * 1e3)
            return first, median(ts)

        f_get, m_get = timed(lambda: rw.get_run(ids["fork"]))
        f_diff, m_diff = timed(lambda: rw.diff(ids["parent"], ids["fork"]))
        run = rw.get_run(ids["fork"])
        d.update({"get_run_first_ms": f_get, "get_run_ms": m_get, "diff_first_ms": f_diff,
                  "diff_ms": m_diff, "get_run_steps": len(run.steps)})
        g = max(f_get, m_get)
        fig.add("get_run_ms", f"4. get_run (8 steps), {label}", g, "ms", "< 50 ms", g < 50)
        g = max(f_diff, m_diff)
        fig.add("diff_ms", f"4. diff(parent, fork), {label}", g, "ms", "< 50 ms", g < 50)
    finally:
        rw.close()
    size = _checkpoint_size(path)
    d["file_bytes"] = size
    if cfg["dbstat"]:
        stat = _dbstat(path)
        d["bytes_per_run_by_table"] = {t: round(v["bytes"] / n_runs) for t, v in stat.items()
                                      if v["bytes"] / n_runs >= 1}
    fig.add("bytes_per_run", f"4. bytes on disk per run ({label}, blobs shared)", size / n_runs, "B",
            display=f"{size / n_runs:,.0f} B ({size / 1e6:,.0f} MB total)")
    fig.details["scale"] = d


# --- 5. the Runs page ------------------------------------------------------------------------

# The dashboard serves its pages through st.navigation (app.py -> rewind_ui/shell.py): a page
# file run on its own is not the product. The probe renders app.py, whose default page is Runs,
# and reports the table's caption, so a render of anything else (an error, another page) shows.
PAGE_PROBE = r"""
import json, os, sys, time
os.chdir({root!r})
os.environ["REWIND_DB"] = {db!r}
from streamlit.testing.v1 import AppTest
import rewind  # a running server has the product imported already
# AppTest's own start-up (it scans the installed packages once) is the harness, not the page a
# visitor waits for: a one-line script pays it first
AppTest.from_string("import streamlit as st\nst.write('harness')").run()
t0 = time.perf_counter()
at = AppTest.from_file({app!r}, default_timeout=120)
at.run()
dt = time.perf_counter() - t0
print(json.dumps({{"seconds": dt, "exceptions": [str(e.message)[:300] for e in at.exception],
                   "captions": [str(c.value) for c in at.caption],
                   "rows": len(at.dataframe[0].value) if len(at.dataframe) else 0}}))
"""


def same_rewind_path() -> str:
    """PYTHONPATH for a child that must import the rewind this process measures (and this
    checkout's pages and rewind_ui), not whichever checkout an editable install points at."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(rewind.__file__)))
    return os.pathsep.join(dict.fromkeys([here, ROOT]))


def bench_page(fig: Figures, cfg: dict, db: Optional[str], n_runs: int) -> None:
    page = os.path.join(ROOT, "pages", "runs.py")
    app = os.path.join(ROOT, "app.py")
    label = f"{n_runs // 1000}k runs"
    key, name = "runs_page_s", f"5. Runs page first render (AppTest), {label}"
    if not (os.path.exists(page) and os.path.exists(app)):
        fig.na(key, name, "page not present", "< 2 s")
        return
    if db is None:
        fig.na(key, name, "no synthetic store", "< 2 s")
        return
    try:
        import streamlit  # noqa: F401
    except ImportError:
        fig.na(key, name, "streamlit not installed", "< 2 s")
        return
    script = PAGE_PROBE.format(root=ROOT, db=db, app=app)
    shown = f"of {n_runs:,} runs"  # the caption under the runs table: the real Runs page
    times, errors = [], []
    for _ in range(cfg["page_reps"]):
        env = {k: v for k, v in os.environ.items() if k != "REWIND_DB"}
        env["PYTHONPATH"] = same_rewind_path()
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=300, env=env, cwd=ROOT)
        if p.returncode != 0:
            errors.append((p.stderr or p.stdout).strip().splitlines()[-1:] or ["exit %d" % p.returncode])
            continue
        res = json.loads(p.stdout.strip().splitlines()[-1])
        times.append(res["seconds"])
        if res["exceptions"]:
            errors.append(res["exceptions"])
        elif not res["rows"] or not any(shown in c for c in res["captions"]):
            errors.append([f"no runs table showing {shown!r}: {res['rows']} rows, captions "
                           f"{res['captions'][:3]}"])
    fig.details["page"] = {"seconds": times, "errors": errors, "app": app, "page": page, "db": db}
    if not times:
        fig.add(key, name, None, "s", "< 2 s", False, display=f"error: {str(errors[0])[:120]}")
        return
    m = median(times)
    note = f"page raised: {str(errors[0])[:200]}" if errors else ""
    fig.add(key, name, m, "s", "< 2 s", (m < 2) and not errors, note=note)
