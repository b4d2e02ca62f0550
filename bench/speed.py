"""Figures 1, 2, 3 and 6: recording overhead against bare Burr, the cached replay (and LangGraph's
node cache as a peer), and the hot path (canonical_hash + cache_get)."""

from __future__ import annotations

import os
import time
from typing import Optional

import rewind
from rewind.keys import canonical_hash

from bench import workload as W
from bench.measure import Figures, fmt, median, per_call_us
from bench.report import version
from bench.workload import FORK_AT, REPLAYED


# --- 1. recording overhead -------------------------------------------------------------------

def bench_overhead(fig: Figures, cfg: dict, tmp: str) -> None:
    pipeline, rw, burr = W.recording_pair(tmp, "overhead")
    try:
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
                cpu_ratio, "x", display=f"{fmt(cpu_ratio)} x ({fmt(median(c_rw) * 1e3)} / "
                f"{fmt(median(c_burr) * 1e3)} ms)")
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
        return None, f"langgraph not installed ({e.name}); pip install -e '.[bench]'"
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
                "langgraph_version": version("langgraph"), "langgraph_saver": lg["saver"],
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
        nbytes = len(rewind.keys.canonical_json(value))
        h_us = per_call_us(lambda: canonical_hash(value), batches=cfg["batches"])
        key = label.replace(" ", "").lower()
        d[f"input_{key}_bytes"] = nbytes
        d[f"canonical_hash_{key}_us"] = h_us
        fig.add(f"hotpath_{key}_us", f"3. canonical_hash + cache_get, {label} input ({nbytes:,} B)",
                h_us + get_us, "us", display=f"{fmt(h_us + get_us)} us (hash {fmt(h_us)} + get {fmt(get_us)})")
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
