"""Rewind benchmarks: recording overhead, cached replay, the hot path, scale, the Runs page and
LangGraph's node cache as a peer.

    python bench/run.py [--quick] [--json out.json] [--markdown bench/RESULTS.md] [--profile]

Prints a table (figure, value, goal, met?) and, with --json, writes every figure and detail.
Timings are medians over repeated runs; ratios are against baselines measured in the same
process, interleaved (the machine is noisy). `--quick` (the CI smoke test) uses fewer
repetitions and a 10k-run synthetic store; it asserts nothing about time: the exit status is 0
unless the bench itself crashes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
# To measure a proposed change without touching the tree: REWIND_BENCH_PATH=/dir/holding/a/rewind
if os.environ.get("REWIND_BENCH_PATH"):
    sys.path.insert(0, os.environ["REWIND_BENCH_PATH"])

import rewind  # noqa: E402
from rewind.hashing import canonical_hash  # noqa: E402

from bench import synth  # noqa: E402
from bench import workload as W  # noqa: E402

FORK_AT = W.NODES[2]  # fork at node 3: nodes 1-2 inherited, 6 replayed from the cache
REPLAYED = len(W.NODES) - 2


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- measuring -------------------------------------------------------------------------------

def median(xs: list) -> float:
    return statistics.median(xs) if xs else float("nan")


def per_call_us(fn: Callable[[], Any], target_s: float = 0.02, batches: int = 15) -> float:
    """Median over `batches` of the mean time of one call, in µs (calls batched to ~target_s)."""
    fn()
    n, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= target_s / 4 or n >= 1 << 20:
            break
        n *= 2
    n = max(1, int(n * target_s / max(t, 1e-9)))
    out = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return median(out)


class Figures:
    """Rows of the result table plus free-form details for the JSON."""

    def __init__(self):
        self.rows: list = []
        self.details: dict = {}
        self.errors: list = []

    def add(self, key: str, figure: str, value: Optional[float], unit: str, goal: str = "",
            met: Optional[bool] = None, display: Optional[str] = None, note: str = "") -> None:
        if display is None:
            display = "n/a" if value is None else f"{_fmt(value)} {unit}".strip()
        self.rows.append({
            "key": key, "figure": figure, "value": value, "unit": unit, "display": display,
            "goal": goal, "met": met, "note": note,
        })

    def na(self, key: str, figure: str, why: str, goal: str = "") -> None:
        self.add(key, figure, None, "", goal, None, display=f"n/a: {why}")


def _fmt(v: float) -> str:
    if v is None:
        return "n/a"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


# --- 1. recording overhead -------------------------------------------------------------------

def bench_overhead(fig: Figures, cfg: dict, tmp: str) -> None:
    pipeline = W.make_pipeline("bench8")
    rw = rewind.Rewind(os.path.join(tmp, "overhead-rewind.db"))
    burr = W.BurrBaseline(os.path.join(tmp, "overhead-burr.db"), pipeline.graph)
    try:
        # warm up both (imports, code fingerprints, first pages)
        for i in range(3):
            rw.run(pipeline, {"topic": W.topic(900_000 + i)})
            burr.run(f"warm{i}", {"topic": W.topic(900_000 + i)})
        t_rw, t_burr, c_rw, c_burr = [], [], [], []
        check = None
        for i in range(cfg["overhead_pairs"]):
            state = {"topic": W.topic(i)}  # fresh inputs: nothing is served from the cache

            def a():
                c0, t0 = time.process_time(), time.perf_counter()
                run = rw.run(pipeline, state)
                t_rw.append(time.perf_counter() - t0)
                c_rw.append(time.process_time() - c0)
                return run

            def b():
                c0, t0 = time.process_time(), time.perf_counter()
                burr.run(f"app{i}", state)
                t_burr.append(time.perf_counter() - t0)
                c_burr.append(time.process_time() - c0)

            if i % 2 == 0:
                run = a()
                b()
            else:
                b()
                run = a()
            if check is None:
                check = run
        statuses = sorted({s.status for s in check.steps})
        ok = check.status == "completed" and statuses == ["executed"] and check.total_tokens == 800
        m_rw, m_burr = median(t_rw) * 1e3, median(t_burr) * 1e3
        ratio = m_rw / m_burr
        cpu_ratio = median(c_rw) / median(c_burr)
        fig.details["overhead"] = {
            "cpu_rewind_median_ms": median(c_rw) * 1e3, "cpu_burr_median_ms": median(c_burr) * 1e3,
            "cpu_ratio": cpu_ratio,
            "pairs": cfg["overhead_pairs"], "rewind_ms": [x * 1e3 for x in t_rw],
            "burr_ms": [x * 1e3 for x in t_burr], "rewind_median_ms": m_rw,
            "burr_median_ms": m_burr, "ratio": ratio, "per_step_overhead_us": (m_rw - m_burr) / 8 * 1e3,
            "first_run_statuses": statuses, "first_run_tokens": check.total_tokens,
        }
        fig.add("first_run_rewind_ms", "1. first run with Rewind (8 nodes, nothing cached)", m_rw, "ms")
        fig.add("first_run_burr_ms", "1. same Burr app, SQLitePersister only (WAL, NORMAL)", m_burr, "ms")
        fig.add("recording_overhead_ratio", "1. recording overhead (Rewind / Burr)", ratio, "x",
                "<= 1.5x", ratio <= 1.5 if ok else False,
                note="" if ok else f"INVALID: first run was {check.status} {statuses}")
        fig.add("recording_overhead_cpu_ratio", "1. same, CPU time (immune to other processes)",
                cpu_ratio, "x", display=f"{_fmt(cpu_ratio)} x ({_fmt(median(c_rw) * 1e3)} / "
                f"{_fmt(median(c_burr) * 1e3)} ms)")
        fig.add("recording_overhead_per_step_us", "1. added cost per recorded step",
                (m_rw - m_burr) / 8 * 1e3, "us")
    finally:
        rw.close()
        burr.close()


# --- 2 + 6. cached replay, Rewind and LangGraph ---------------------------------------------

def _langgraph(tmp: str):
    """A LangGraph StateGraph of the same 8 nodes with node caching, or (None, why)."""
    try:
        from typing import TypedDict

        from langgraph.cache.sqlite import SqliteCache
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import CachePolicy
    except ImportError as e:
        return None, f"langgraph not installed ({e.name}); pip install -r bench/requirements.txt"
    saver_kind = "SqliteSaver (WAL, synchronous=NORMAL)"
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = W.wal_connection(os.path.join(tmp, "langgraph-checkpoints.db"))
        saver = SqliteSaver(conn)
        saver.setup()
    except ImportError:
        from langgraph.checkpoint.memory import InMemorySaver

        saver, conn = InMemorySaver(), None
        saver_kind = "InMemorySaver (langgraph-checkpoint-sqlite not installed)"
    cache = SqliteCache(path=os.path.join(tmp, "langgraph-cache.db"))
    cache._conn.execute("PRAGMA synchronous = NORMAL")  # it opens WAL itself; match our store
    S = TypedDict("S", {"topic": str, **{W.FIELDS[n]: str for n in W.NODES}})
    calls = {"n": 0}

    def make(name: str, reads: str, writes: str, llm: bool):
        def node(state):
            calls["n"] += 1
            text = W.make_text(name, state[reads])
            if llm:
                rewind.record_usage(W.PROMPT_TOKENS, W.COMPLETION_TOKENS)  # no-op outside Rewind
            return {writes: text}

        return node

    g = StateGraph(S)
    prev = "topic"
    for n in W.NODES:
        g.add_node(n, make(n, prev, W.FIELDS[n], n in W.LLM_NODES), cache_policy=CachePolicy())
        prev = W.FIELDS[n]
    g.add_edge(START, W.NODES[0])
    for a, b in zip(W.NODES, W.NODES[1:]):
        g.add_edge(a, b)
    g.add_edge(W.NODES[-1], END)
    app = g.compile(checkpointer=saver, cache=cache)
    return {"app": app, "calls": calls, "saver": saver_kind, "conn": conn, "cache": cache}, None


def bench_replay(fig: Figures, cfg: dict, tmp: str) -> dict:
    pipeline = W.make_pipeline("bench8")
    rw = rewind.Rewind(os.path.join(tmp, "replay.db"))
    lg, lg_why = _langgraph(tmp)
    out: dict = {"rw": rw, "pipeline": pipeline}
    try:
        root = rw.run(pipeline, {"topic": W.topic(0)}, use_cache=False)
        out["root"] = root
        # correctness of the figure: a no-edit fork replays every step from the cache
        calls0 = W.USAGE_CALLS["n"]
        fork = rw.fork(root.id, at=FORK_AT)
        statuses = [s.status for s in fork.steps]
        want = ["inherited"] * 2 + ["cached"] * REPLAYED
        valid = (statuses == want and fork.total_tokens == 0 and W.USAGE_CALLS["n"] == calls0
                 and all(a.output_hash == b.output_hash for a, b in zip(root.steps, fork.steps)))
        if lg is not None:
            app, lcfg = lg["app"], {"configurable": {"thread_id": "fill"}}
            lg_first = app.invoke({"topic": W.topic(0)}, lcfg)  # fills the cache
            history = list(app.get_state_history(lcfg))
            lg_fork_cp = [h for h in history if h.next == (FORK_AT,)][0].config
            calls1 = lg["calls"]["n"]
            lg_out = app.invoke(None, lg_fork_cp)
            lg_rerun = app.invoke({"topic": W.topic(0)}, {"configurable": {"thread_id": "check"}})
            lg_valid = lg["calls"]["n"] == calls1 and lg_out == lg_first and lg_rerun == lg_first
        for _ in range(5):  # warm up
            rw.fork(root.id, at=FORK_AT)
            rw.fork(root.id, at=W.NODES[-1])
            if lg is not None:
                app.invoke(None, lg_fork_cp)
        t_rw, t_rw1, t_lg_fork, t_lg_rerun, c_rw, c_lg = [], [], [], [], [], []
        for i in range(cfg["replays"]):
            c0, t0 = time.process_time(), time.perf_counter()
            rw.fork(root.id, at=FORK_AT)
            t_rw.append(time.perf_counter() - t0)
            c_rw.append(time.process_time() - c0)
            t0 = time.perf_counter()
            rw.fork(root.id, at=W.NODES[-1])  # one replayed node: the fixed cost of a fork
            t_rw1.append(time.perf_counter() - t0)
            if lg is not None:
                c0, t0 = time.process_time(), time.perf_counter()
                app.invoke(None, lg_fork_cp)
                t_lg_fork.append(time.perf_counter() - t0)
                c_lg.append(time.process_time() - c0)
                t0 = time.perf_counter()
                app.invoke({"topic": W.topic(0)}, {"configurable": {"thread_id": f"rerun{i}"}})
                t_lg_rerun.append(time.perf_counter() - t0)
        m_rw, m_rw1 = median(t_rw) * 1e3, median(t_rw1) * 1e3
        per_node = m_rw / REPLAYED * 1e3
        marginal = (m_rw - m_rw1) / (REPLAYED - 1) * 1e3
        note = "" if valid else f"INVALID: fork steps were {statuses}"
        fig.add("replay_total_ms", f"2. no-edit fork at node 3: {REPLAYED} nodes from cache, total",
                m_rw, "ms", "~1 ms", (m_rw <= 1.0) if valid else False, note=note)
        fig.add("replay_us_per_node", "2. cached replay per replayed node (total / 6)", per_node, "us",
                "< 170 us", (per_node < 170) if valid else False, note=note)
        fig.add("replay_cpu_us_per_node", "2. same, CPU time per replayed node",
                median(c_rw) / REPLAYED * 1e6, "us")
        fig.add("replay_fork_fixed_ms", "2. fork fixed cost (fork at node 8: 1 node replayed)",
                m_rw1, "ms")
        fig.add("replay_marginal_us_per_node", "2. marginal cost of one more cached node",
                marginal, "us")
        d = {
            "replays": cfg["replays"], "rewind_fork_ms": [x * 1e3 for x in t_rw],
            "rewind_fork_median_ms": m_rw, "rewind_fork1_median_ms": m_rw1,
            "us_per_replayed_node": per_node, "marginal_us_per_node": marginal,
            "cpu_rewind_fork_median_ms": median(c_rw) * 1e3,
            "fork_statuses": statuses, "valid": valid,
        }
        if lg is None:
            fig.na("langgraph_fork_ms", "6. LangGraph cached replay", lg_why)
            fig.na("langgraph_ratio", "6. LangGraph / Rewind cached replay", lg_why, ">= 5x")
        else:
            m_lf, m_lr = median(t_lg_fork) * 1e3, median(t_lg_rerun) * 1e3
            ratio_fork = m_lf / m_rw
            ratio_rerun = (m_lr / len(W.NODES)) / (m_rw / REPLAYED)
            lnote = "" if lg_valid else "INVALID: LangGraph re-ran node functions"
            fig.add("langgraph_fork_ms", "6. LangGraph fork from checkpoint after node 2, 6 nodes from cache",
                    m_lf, "ms", note=lnote)
            fig.add("langgraph_rerun_ms", "6. LangGraph re-run of the same input, 8 nodes from cache",
                    m_lr, "ms", note=lnote)
            fig.add("langgraph_us_per_node", "6. LangGraph per node served from cache (fork)",
                    m_lf / REPLAYED * 1e3, "us")
            fig.add("langgraph_ratio", "2/6. LangGraph / Rewind, same 6-node cached replay", ratio_fork,
                    "x", ">= 5x", ratio_fork >= 5 if (valid and lg_valid) else False)
            cpu_ratio = median(c_lg) / median(c_rw)
            fig.add("langgraph_ratio_cpu", "2/6. same ratio, CPU time", cpu_ratio, "x")
            fig.add("langgraph_ratio_rerun", "2/6. LangGraph re-run / Rewind fork, per cached node",
                    ratio_rerun, "x")
            d.update({
                "langgraph_version": _version("langgraph"), "langgraph_saver": lg["saver"],
                "langgraph_cache": "SqliteCache (WAL, synchronous=NORMAL set on its connection)",
                "langgraph_fork_ms": [x * 1e3 for x in t_lg_fork], "langgraph_fork_median_ms": m_lf,
                "langgraph_rerun_ms": [x * 1e3 for x in t_lg_rerun], "langgraph_rerun_median_ms": m_lr,
                "ratio_fork": ratio_fork, "cpu_langgraph_fork_median_ms": median(c_lg) * 1e3,
                "ratio_fork_cpu": median(c_lg) / median(c_rw), "ratio_rerun_per_node": ratio_rerun, "langgraph_valid": lg_valid,
            })
        fig.details["replay"] = d
        return out
    except BaseException:
        rw.close()
        raise
    finally:
        if lg is not None and lg["conn"] is not None:
            lg["conn"].close()


# --- 3. the hot path -------------------------------------------------------------------------

def sample_input(size: int) -> dict:
    """A structured node input of about `size` bytes of canonical JSON (retrieved documents)."""
    docs, total, i = [], 0, 0
    while total < size:
        text = W.make_text(f"doc{i}", f"document {i}", 400)
        doc = {"title": f"Document {i}", "url": f"https://example.org/{i}", "score": 0.5 + i / 1000,
               "text": text}
        docs.append(doc)
        total += len(text) + 80
        i += 1
    value = {"query": "what changed?", "documents": docs}
    return value


def bench_hotpath(fig: Figures, cfg: dict, replay: dict, scale_store: Optional[str]) -> None:
    rw = replay["rw"]
    store = rw.store
    root = replay["root"]
    node = root.steps[3]
    d: dict = {}
    get_us = per_call_us(lambda: store.cache_get(node.node, node.input_hash), batches=cfg["batches"])
    assert store.cache_get(node.node, node.input_hash) is not None
    d["cache_get_us_small_store"] = get_us
    miss_us = per_call_us(lambda: store.cache_get(node.node, "0" * 64), batches=cfg["batches"])
    d["cache_get_miss_us"] = miss_us
    for size, label in ((2048, "2 KB"), (100 * 1024, "100 KB")):
        value = sample_input(size)
        nbytes = len(rewind.hashing.canonical_json(value))
        h_us = per_call_us(lambda: canonical_hash(value), batches=cfg["batches"])
        key = label.replace(" ", "").lower()
        d[f"input_{key}_bytes"] = nbytes
        d[f"canonical_hash_{key}_us"] = h_us
        fig.add(f"hotpath_{key}_us", f"3. canonical_hash + cache_get, {label} input ({nbytes:,} B)",
                h_us + get_us, "us", display=f"{_fmt(h_us + get_us)} us (hash {_fmt(h_us)} + get {_fmt(get_us)})")
    if scale_store:
        big = rewind.Rewind(scale_store)
        try:
            ih = big.store.query("SELECT node, input_hash FROM cache LIMIT 1 OFFSET 1000")[0]
            d["cache_get_us_synthetic_store"] = per_call_us(
                lambda: big.store.cache_get(ih[0], ih[1]), batches=cfg["batches"])
            d["synthetic_cache_entries"] = big.store.query("SELECT COUNT(*) FROM cache")[0][0]
        finally:
            big.close()
        fig.add("cache_get_big_us", f"3. cache_get on the synthetic store ({d['synthetic_cache_entries']:,} entries)",
                d["cache_get_us_synthetic_store"], "us")
    fig.details["hotpath"] = d


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


def _checkpoint_size(path: str) -> int:
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
        size0, stat0 = _checkpoint_size(path), _dbstat(path)
        n = cfg["fork_bytes_forks"]
        for _ in range(n):
            rw.fork(root.id, at=FORK_AT)
        size1, stat1 = _checkpoint_size(path), _dbstat(path)
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
                wv, "ms", "< 50 ms", wv < 50, display=f"{_fmt(wv)} ms ({worst})")

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

PAGE_PROBE = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
os.chdir({root!r})
os.environ["REWIND_DB"] = {db!r}
from streamlit.testing.v1 import AppTest
import rewind  # a running server has the product imported already
t0 = time.perf_counter()
at = AppTest.from_file({page!r}, default_timeout=120)
at.run()
dt = time.perf_counter() - t0
print(json.dumps({{"seconds": dt, "exceptions": [str(e.message)[:300] for e in at.exception],
                   "elements": len(list(at.main)) if hasattr(at, "main") else None}}))
"""


def bench_page(fig: Figures, cfg: dict, db: Optional[str], n_runs: int) -> None:
    page = os.path.join(ROOT, "pages", "runs.py")
    label = f"{n_runs // 1000}k runs"
    key, name = "runs_page_s", f"5. Runs page first render (AppTest), {label}"
    if not os.path.exists(page):
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
    script = PAGE_PROBE.format(root=ROOT, db=db, page=page)
    times, errors = [], []
    for _ in range(cfg["page_reps"]):
        env = {k: v for k, v in os.environ.items() if k != "REWIND_DB"}
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=300, env=env, cwd=ROOT)
        if p.returncode != 0:
            errors.append((p.stderr or p.stdout).strip().splitlines()[-1:] or ["exit %d" % p.returncode])
            continue
        res = json.loads(p.stdout.strip().splitlines()[-1])
        times.append(res["seconds"])
        if res["exceptions"]:
            errors.append(res["exceptions"])
    fig.details["page"] = {"seconds": times, "errors": errors, "page": page, "db": db}
    if not times:
        fig.add(key, name, None, "s", "< 2 s", False, display=f"error: {str(errors[0])[:120]}")
        return
    m = median(times)
    note = f"page raised: {str(errors[0])[:200]}" if errors else ""
    fig.add(key, name, m, "s", "< 2 s", (m < 2) and not errors, note=note)


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


# --- machine, output -------------------------------------------------------------------------

def _version(dist: str) -> Optional[str]:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


def loadavg() -> Optional[str]:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return None


def machine() -> dict:
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ram = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(), "cpu": cpu or platform.processor(), "ram": ram,
        "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(), "apache-burr": _version("apache-burr"),
        "langgraph": _version("langgraph"),
        "langgraph-checkpoint-sqlite": _version("langgraph-checkpoint-sqlite"),
        "streamlit": _version("streamlit"),
    }


def table(rows: list) -> str:
    head = ("figure", "value", "goal", "met?")
    body = [(r["figure"], r["display"] + (f"  [{r['note']}]" if r["note"] else ""), r["goal"] or "-",
             {True: "yes", False: "NO", None: "-"}[r["met"]]) for r in rows]
    widths = [max(len(head[i]), *(len(b[i]) for b in body)) for i in range(4)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, body)])


def markdown_table(rows: list) -> str:
    out = ["| figure | value | goal | met? |", "|---|---|---|---|"]
    for r in rows:
        v = r["display"] + (f" ({r['note']})" if r["note"] else "")
        out.append(f"| {r['figure']} | {v} | {r['goal'] or '-'} | "
                   f"{ {True: 'yes', False: '**no**', None: '-'}[r['met']] } |")
    return "\n".join(out)


def write_markdown(path: str, result: dict) -> None:
    """Write the generated part of RESULTS.md between its markers; keep the rest of the file."""
    m = result["machine"]
    lines = [
        "<!-- bench:begin (generated by bench/run.py --markdown; edits inside are overwritten) -->",
        f"Command: `{result['command']}` ({'quick' if result['quick'] else 'full'}; "
        f"{result['seconds']:.0f} s; {time.strftime('%Y-%m-%d', time.gmtime(result['started']))})",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['ram']} RAM, Python {m['python']}, "
        f"SQLite {m['sqlite']}, apache-burr {m['apache-burr']}, langgraph {m['langgraph']} "
        f"(langgraph-checkpoint-sqlite {m['langgraph-checkpoint-sqlite']}), streamlit {m['streamlit']}. "
        f"Load average (1/5/15 min) at start {m.get('loadavg_start')}, at end {m.get('loadavg_end')}.",
        "",
        markdown_table(result["figures"]),
        "",
    ]
    prof = result.get("profile")
    if prof:
        lines += [
            f"Profile of the cached replay (cProfile, {prof['forks']} no-edit forks at node 3; "
            f"{prof['profiled_us_per_fork']:,.0f} us per fork under the profiler). "
            f"SQL per fork: {result['details'].get('sql_per_fork')}.",
            "",
            "Self time by module: " + ", ".join(f"{k} {v}%" for k, v in prof["self_time_share"].items()),
            "",
            "```", prof["top_tottime"], "```", "",
            "Cumulative, rewind/ only:", "", "```", prof["top_cumulative_rewind"], "```", "",
        ]
    lines.append("<!-- bench:end -->")
    block = "\n".join(lines)
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        text = "# Rewind benchmark results\n\n<!-- bench:begin -->\n<!-- bench:end -->\n"
    a = text.find("<!-- bench:begin")
    b = text.find("<!-- bench:end -->")
    if a == -1 or b == -1:
        text = text.rstrip() + "\n\n" + block + "\n"
    else:
        text = text[:a] + block + text[b + len("<!-- bench:end -->"):]
    with open(path, "w") as f:
        f.write(text)


# --- main ------------------------------------------------------------------------------------

def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="CI smoke test: fewer repetitions, 10k runs")
    ap.add_argument("--json", metavar="PATH", help="write every figure and detail as JSON")
    ap.add_argument("--markdown", metavar="PATH", help="update the generated block of RESULTS.md")
    ap.add_argument("--profile", action="store_true", help="cProfile the cached replay (on with --markdown)")
    ap.add_argument("--runs", type=int, help="synthetic store size (default 100000; 10000 with --quick)")
    ap.add_argument("--rebuild", action="store_true", help="regenerate the synthetic store")
    ap.add_argument("--keep-store", action="store_true",
                    help="reuse the cached synthetic store even if rewind's source changed "
                         "(for A/B runs of a patch that does not change what a run writes)")
    args = ap.parse_args(argv)
    quick = args.quick
    cfg = {
        "overhead_pairs": 10 if quick else 40,
        "replays": 30 if quick else 200,
        "batches": 7 if quick else 15,
        "scale_reps": 5 if quick else 20,
        "page_reps": 1 if quick else 3,
        "fork_bytes_forks": 30 if quick else 200,
        "profile_forks": 100 if quick else 300,
        "runs": args.runs or (10_000 if quick else 100_000),
        "dbstat": True,
    }
    started = time.time()
    t_start = time.perf_counter()
    load_start = loadavg()
    fig = Figures()
    os.makedirs(synth.OUT_DIR, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="tmp-", dir=synth.OUT_DIR)
    crashed = False
    replay = None
    result: dict = {}

    def section(name: str, fn: Callable, *a) -> Any:
        nonlocal crashed
        log(f"[bench] {name} ...")
        t0 = time.perf_counter()
        try:
            return fn(*a)
        except Exception as e:
            crashed = True
            fig.errors.append({"section": name, "error": f"{type(e).__name__}: {e}",
                               "traceback": traceback.format_exc()})
            fig.add(f"error_{name}", f"{name}: bench crashed", None, "", display=f"error: {type(e).__name__}: {e}"[:160])
            log(traceback.format_exc())
            return None
        finally:
            log(f"[bench] {name} done in {time.perf_counter() - t0:.1f}s")

    try:
        section("overhead", bench_overhead, fig, cfg, tmp)
        replay = section("replay", bench_replay, fig, cfg, tmp)
        scale = section("synthetic store", synth.synthetic_store, cfg["runs"], log, args.rebuild,
                        args.keep_store)
        scale_path, scale_meta = scale if scale else (None, {})
        if replay:
            section("hotpath", bench_hotpath, fig, cfg, replay, scale_path)
        if scale_path:
            if quick:
                fig.details["scale_note"] = f"--quick: {cfg['runs']:,} runs instead of 100,000"
            section("scale", bench_scale, fig, cfg, scale_path, scale_meta)
        section("fork bytes", bench_fork_bytes, fig, cfg, tmp)
        section("runs page", bench_page, fig, cfg, scale_path, cfg["runs"])
        if replay:
            fig.details["sql_per_fork"] = section("sql count", sql_per_fork, replay)
            if args.profile or args.markdown:
                result["profile"] = section("profile", profile_replay, replay, cfg["profile_forks"])
    finally:
        if replay:
            replay["rw"].close()
        shutil.rmtree(tmp, ignore_errors=True)

    result.update({
        "command": "python bench/run.py" + (" --quick" if quick else "")
                   + (f" --runs {args.runs}" if args.runs else ""),
        "quick": quick, "started": started, "seconds": time.perf_counter() - t_start,
        "machine": {**machine(), "loadavg_start": load_start, "loadavg_end": loadavg()},
        "config": cfg, "figures": fig.rows, "details": fig.details,
        "errors": fig.errors,
        "goals": {r["key"]: r["met"] for r in fig.rows if r["goal"]},
    })
    print(table(fig.rows))
    if quick:
        print(f"(--quick: synthetic store of {cfg['runs']:,} runs, fewer repetitions)")
    if result.get("profile"):
        p = result["profile"]
        print("\ncached replay profile, self time by module:",
              ", ".join(f"{k} {v}%" for k, v in p["self_time_share"].items()))
        if args.profile:
            print(p["top_tottime"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    else:
        print("\n" + json.dumps({r["key"]: r["value"] for r in fig.rows}, default=str))
    if args.markdown:
        write_markdown(args.markdown, result)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
