"""The peers a cached fork is measured against, in the same process: LangGraph in four
configurations (per-step durable SqliteSaver + SqliteCache, the same with `durability="exit"`,
in-memory saver and cache, and in-memory + exit, its fastest) and Burr's own fork with only its
SQLitePersister (the floor a Rewind fork that persists every step can be compared with)."""

from __future__ import annotations

import os
import uuid
from typing import Any

from burr.core import ApplicationBuilder
from burr.core.persistence import SQLitePersister

from bench import workload as W
from bench.workload import FORK_AT, NODES

# (key, label, saver, cache, durability)
LANGGRAPH_CONFIGS = (
    ("lg_sync", "SqliteSaver + SqliteCache, durability=sync (per-step durable)", "sqlite", "sqlite", "sync"),
    ("lg_exit", "SqliteSaver + SqliteCache, durability=exit", "sqlite", "sqlite", "exit"),
    ("lg_mem", "InMemorySaver + InMemoryCache", "memory", "memory", "sync"),
    ("lg_fastest", "InMemorySaver + InMemoryCache, durability=exit (fastest)", "memory", "memory", "exit"),
)


def langgraph_app(tmp: str, saver_kind: str, cache_kind: str, tag: str) -> tuple:
    """A LangGraph StateGraph of the benchmark's 8 nodes with node caching, or (None, why)."""
    try:
        from typing import TypedDict

        from langgraph.graph import END, START, StateGraph
        from langgraph.types import CachePolicy
    except ImportError as e:
        return None, f"langgraph not installed ({e.name}); pip install -r bench/requirements.txt"
    conn = None
    if saver_kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = W.wal_connection(os.path.join(tmp, f"lg-{tag}-checkpoints.db"))
        saver = SqliteSaver(conn)
        saver.setup()
    else:
        from langgraph.checkpoint.memory import InMemorySaver

        saver = InMemorySaver()
    if cache_kind == "sqlite":
        from langgraph.cache.sqlite import SqliteCache

        cache = SqliteCache(path=os.path.join(tmp, f"lg-{tag}-cache.db"))
        cache._conn.execute("PRAGMA synchronous = NORMAL")  # it opens WAL itself; match ours
    else:
        from langgraph.cache.memory import InMemoryCache

        cache = InMemoryCache()
    S = TypedDict("S", {"topic": str, **{W.FIELDS[n]: str for n in NODES}})
    calls = {"n": 0}

    def make(name: str, reads: str, writes: str):
        def node(state):
            calls["n"] += 1
            return {writes: W.make_text(name, state[reads])}
        return node

    g = StateGraph(S)
    prev = "topic"
    for n in NODES:
        g.add_node(n, make(n, prev, W.FIELDS[n]), cache_policy=CachePolicy())
        prev = W.FIELDS[n]
    g.add_edge(START, NODES[0])
    for a, b in zip(NODES, NODES[1:]):
        g.add_edge(a, b)
    g.add_edge(NODES[-1], END)
    return {"app": g.compile(checkpointer=saver, cache=cache), "calls": calls, "conn": conn}, None


def langgraph_fork(tmp: str, key: str, saver: str, cache: str, durability: str) -> tuple:
    """(fork callable, valid, why): a fork from the checkpoint after node 2 replaying the
    same 6 nodes from LangGraph's cache; valid when no node function ran."""
    lg, why = langgraph_app(tmp, saver, cache, key)
    if lg is None:
        return None, False, why, None
    app, cfg = lg["app"], {"configurable": {"thread_id": "fill"}}
    first = app.invoke({"topic": W.topic(0)}, cfg)  # fills the cache (durably, for the history)
    point = [h for h in app.get_state_history(cfg) if h.next == (FORK_AT,)][0].config
    before = lg["calls"]["n"]
    out = app.invoke(None, point, durability=durability)
    valid = lg["calls"]["n"] == before and out == first
    return (lambda: app.invoke(None, point, durability=durability)), valid, "", lg["conn"]


class BurrFork:
    """Burr alone: fork the same app after node 2 with its SQLitePersister and run 6 steps."""

    def __init__(self, path: str, graph: Any):
        self.conn = W.wal_connection(path)
        self.persister = SQLitePersister(db_path=path, table_name="burr_state", connection=self.conn)
        self.persister.initialize()
        self.graph = graph
        app = self._builder("root").with_entrypoint(NODES[0]).with_state(topic=W.topic(0)).build()
        app.run(halt_after=[NODES[-1]])
        self.seq = 1  # the state after node 2 (sequence ids 0, 1)

    def _builder(self, app_id: str) -> ApplicationBuilder:
        return (ApplicationBuilder().with_graph(self.graph)
                .with_identifiers(app_id=app_id, partition_key="bench")
                .with_state_persister(self.persister))

    def fork(self) -> None:
        app = self._builder(uuid.uuid4().hex).initialize_from(
            self.persister, resume_at_next_action=True, default_state={},
            default_entrypoint=NODES[0], fork_from_app_id="root", fork_from_partition_key="bench",
            fork_from_sequence_id=self.seq).build()
        assert app.get_next_action().name == FORK_AT
        app.run(halt_after=[NODES[-1]])

    def close(self) -> None:
        self.conn.close()


def peers(tmp: str) -> tuple:
    """({key: (label, callable)}, {key: why not}) of every peer that could be built, checked."""
    out: dict = {}
    why: dict = {}
    conns: list = []
    for key, label, saver, cache, durability in LANGGRAPH_CONFIGS:
        try:
            fn, valid, reason, conn = langgraph_fork(tmp, key, saver, cache, durability)
        except Exception as e:  # a LangGraph that changed its API: reported, the rest runs
            fn, valid, reason, conn = None, False, f"{type(e).__name__}: {e}", None
        if conn is not None:
            conns.append(conn)
        if fn is None or not valid:
            why[key] = reason or "INVALID: LangGraph re-ran node functions"
            continue
        out[key] = (f"LangGraph {label}", fn)
    burr = BurrFork(os.path.join(tmp, "burr-fork.db"), W.build_graph())
    out["burr_fork"] = ("Burr alone: fork + 6 steps, SQLitePersister (WAL, NORMAL)", burr.fork)
    conns.append(burr.conn)
    return out, why, conns


def bench_peers(fig: Any, cfg: dict, tmp: str, replay: dict) -> None:
    """Rewind's no-edit fork and every peer, interleaved call by call, wall and CPU time."""
    import time

    from bench.measure import fmt, median

    rw, root = replay["rw"], replay["root"]
    found, why, conns = peers(tmp)
    try:
        timed = {"rewind": ("Rewind no-edit fork (6 nodes from cache, every step persisted)",
                            lambda: rw.fork(root.id, at=FORK_AT)), **found}
        wall: dict = {k: [] for k in timed}
        cpu: dict = {k: [] for k in timed}
        for fn in timed.values():
            for _ in range(3):
                fn[1]()
        keys = list(timed)
        for i in range(cfg["replays"]):
            order = keys if i % 2 == 0 else keys[::-1]
            for k in order:
                c0, t0 = time.process_time(), time.perf_counter()
                timed[k][1]()
                wall[k].append(time.perf_counter() - t0)
                cpu[k].append(time.process_time() - c0)
        w = {k: median(v) * 1e3 for k, v in wall.items()}
        c = {k: median(v) * 1e3 for k, v in cpu.items()}
        fig.details["peers"] = {"wall_ms": w, "cpu_ms": c, "not_measured": why,
                                "rounds": cfg["replays"]}
        for k, (label, _) in timed.items():
            fig.add(f"peer_{k}_ms", f"P. {label}", w[k], "ms",
                    display=f"{fmt(w[k])} ms wall, {fmt(c[k])} ms CPU")
        for k, reason in why.items():
            fig.na(f"peer_{k}_ms", f"P. LangGraph {k}", reason)
        if "lg_sync" in w:
            rw_, rc = w["lg_sync"] / w["rewind"], c["lg_sync"] / c["rewind"]
            fig.add("goal_vs_langgraph_wall", "G1. LangGraph per-step durable / Rewind, wall", rw_,
                    "x", ">= 5x", rw_ >= 5)
            fig.add("goal_vs_langgraph_cpu", "G1. LangGraph per-step durable / Rewind, CPU", rc,
                    "x", ">= 5x", rc >= 5)
        else:
            fig.na("goal_vs_langgraph_wall", "G1. LangGraph per-step durable / Rewind",
                   why.get("lg_sync", "not measured"), ">= 5x")
        for k in ("lg_exit", "lg_mem"):
            if k in w:
                fig.add(f"ratio_{k}", f"G2. LangGraph {k} / Rewind (wall; CPU beside)",
                        w[k] / w["rewind"], "x",
                        display=f"{fmt(w[k] / w['rewind'])} x wall, {fmt(c[k] / c['rewind'])} x CPU")
        if "lg_fastest" in w:
            r, rc = w["lg_fastest"] / w["rewind"], c["lg_fastest"] / c["rewind"]
            fig.add("goal_vs_langgraph_fastest", "G2. LangGraph fastest (in-memory + exit) / Rewind",
                    r, "x", ">= 2x", r >= 2 and rc >= 2,
                    display=f"{fmt(r)} x wall, {fmt(rc)} x CPU")
        per_node = w["rewind"] / W.REPLAYED * 1e3
        burr_step = w["burr_fork"] / W.REPLAYED * 1e3
        fig.add("goal_per_node_vs_burr", "G3. Rewind per replayed node vs Burr+SQLitePersister "
                "per forked step", per_node, "us", "<= Burr's", per_node <= burr_step,
                display=f"{fmt(per_node)} us vs {fmt(burr_step)} us (CPU {fmt(c['rewind'] / 6 * 1e3)}"
                        f" vs {fmt(c['burr_fork'] / 6 * 1e3)})")
    finally:
        for conn in conns:
            conn.close()
