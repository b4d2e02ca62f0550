"""How a cached fork scales: per replayed node at 8 and 128 nodes, a fork with a 5 MB field
against the same fork with 2 KB fields, PostgreSQL round trips per fork, and the 100k-run
queries (a search with no match, a page at offset 50,000, cache statistics)."""

from __future__ import annotations

import os
import time
from typing import Any

from burr.core.graph import GraphBuilder

import rewind

from bench import synth
from bench import workload as W
from bench.measure import Figures, count_round_trips, fmt, median

BIG = 5 << 20


def linear_pipeline(name: str, n: int, big_reader: int = -1) -> rewind.Pipeline:
    """n nodes in a line, each reading the previous ~2 KB output; node `big_reader` (and the
    first) also reads the field `big`, carried in the state throughout."""
    actions = {}
    prev = "topic"
    for i in range(n):
        reads = [prev] + (["big"] if i in (0, big_reader) else [])
        out = f"f{i}"

        def make(tag: str, src: str, dst: str, reads=reads):
            @rewind.action(reads=reads, writes=[dst])
            def node(state):
                return state.update(**{dst: W.make_text(tag, state[src])})
            node.__name__ = tag
            return node

        actions[f"n{i}"] = make(f"n{i}", prev, out)
        prev = out
    tr = [(f"n{i}", f"n{i + 1}") for i in range(n - 1)]
    return rewind.Pipeline(name=name, graph=GraphBuilder().with_actions(**actions)
                           .with_transitions(*tr).build(), entrypoint="n0")


def _interleaved(fns: dict, rounds: int) -> tuple:
    wall: dict = {k: [] for k in fns}
    cpu: dict = {k: [] for k in fns}
    for fn in fns.values():
        fn()
        fn()
    keys = list(fns)
    for i in range(rounds):
        for k in (keys if i % 2 == 0 else keys[::-1]):
            c0, t0 = time.process_time(), time.perf_counter()
            fns[k]()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return ({k: median(v) * 1e3 for k, v in wall.items()},
            {k: median(v) * 1e3 for k, v in cpu.items()})


def _check(run: Any, fork: Any) -> bool:
    own = [s for s in fork.steps if s.status != "inherited"]
    return bool(own) and all(s.status == "cached" for s in own) and fork.total_tokens == 0


def bench_shape(fig: Figures, cfg: dict, tmp: str) -> None:
    rw = rewind.Rewind(os.path.join(tmp, "shape.db"))
    try:
        small, large = linear_pipeline("line8", 8), linear_pipeline("line128", 128)
        r8 = rw.run(small, {"topic": W.topic(1), "big": "x"})
        r128 = rw.run(large, {"topic": W.topic(1), "big": "x"})
        ok = _check(r8, rw.fork(r8.id, at="n2")) and _check(r128, rw.fork(r128.id, at="n2"))
        w, c = _interleaved({"8": lambda: rw.fork(r8.id, at="n2"),
                             "128": lambda: rw.fork(r128.id, at="n2"),
                             "128_last": lambda: rw.fork(r128.id, at="n127")},
                            max(cfg["scale_reps"], 10))
        p8, p128 = w["8"] / 6 * 1e3, w["128"] / 126 * 1e3
        ratio = p128 / p8
        fig.details["scaling"] = {"wall_ms": w, "cpu_ms": c, "valid": ok}
        fig.add("per_node_8_us", "G4. per replayed node, 8-node line (fork at node 3)", p8, "us")
        fig.add("per_node_128_us", "G4. per replayed node, 128-node line (fork at node 3)", p128, "us")
        fig.add("per_node_128_over_8", "G4. per replayed node at 128 / at 8", ratio, "x", "<= 1.2x",
                ratio <= 1.2 and ok, display=f"{fmt(ratio)} x (CPU {fmt(c['128'] / 126 / (c['8'] / 6))} x)")
        fig.add("fork_last_of_128_ms", "G4. fork at the last of 128 nodes (127 inherited)",
                w["128_last"], "ms")

        big = linear_pipeline("big8", 8, big_reader=4)
        rb = rw.run(big, {"topic": W.topic(2), "big": "y" * BIG})
        rs = rw.run(big, {"topic": W.topic(3), "big": "y" * 2048})
        ok = _check(rb, rw.fork(rb.id, at="n2")) and _check(rs, rw.fork(rs.id, at="n2"))
        w, c = _interleaved({"big": lambda: rw.fork(rb.id, at="n2"),
                             "small": lambda: rw.fork(rs.id, at="n2")},
                            max(cfg["scale_reps"] // 2, 5))
        ratio = w["big"] / w["small"]
        fig.details["big_field"] = {"wall_ms": w, "cpu_ms": c, "valid": ok}
        fig.add("fork_big_over_small", "G5. fork with a 5 MB field / with 2 KB fields (node 5 reads it)",
                ratio, "x", "<= 3x", ratio <= 3 and ok,
                display=f"{fmt(ratio)} x ({fmt(w['big'])} / {fmt(w['small'])} ms)")
    finally:
        rw.close()


def bench_pg_round_trips(fig: Figures, cfg: dict) -> None:
    url = os.environ.get("REWIND_BENCH_PG_URL") or os.environ.get("REWIND_TEST_PG_URL")
    if not url:
        fig.na("pg_round_trips", "G8. PostgreSQL round trips per no-edit fork",
               "set REWIND_BENCH_PG_URL (or REWIND_TEST_PG_URL)", "<= 6")
        return
    rw = rewind.Rewind(url)
    try:
        p = W.make_pipeline("bench8pg")
        root = rw.run(p, {"topic": W.topic(7)}, use_cache=False)
        conn = rw.store.connection
        count = count_round_trips(getattr(conn, "_conn", conn))
        for _ in range(3):
            rw.fork(root.id, at=W.FORK_AT)
        counts, times = [], []
        for _ in range(max(cfg["scale_reps"] // 2, 5)):
            count["n"] = 0
            t0 = time.perf_counter()
            f = rw.fork(root.id, at=W.FORK_AT)
            times.append((time.perf_counter() - t0) * 1e3)
            counts.append(count["n"])
        assert all(s.status == "cached" for s in f.steps[2:])
        n = max(counts)
        fig.details["pg"] = {"round_trips": counts, "fork_ms": times}
        fig.add("pg_round_trips", "G8. PostgreSQL round trips per no-edit fork", n, "",
                "<= 6", n <= 6, display=f"{n} ({fmt(median(times))} ms per fork)")
    finally:
        rw.close()


def bench_queries(fig: Figures, cfg: dict, path: str, n_runs: int) -> None:
    """The Runs page's worst queries at scale, on the synthetic store and, given a PostgreSQL
    URL (REWIND_BENCH_PG_URL or REWIND_TEST_PG_URL), on a copy of its runs there: a search with
    no match (page + count; beside it the same search with the index bypassed, interleaved),
    page 1,001 reached the way a user reaches it (keyset, `after=` the last run of page 1,000;
    beside it the same page by offset, interleaved, also printed as an unscored row), and cache
    statistics (SQLite; the PostgreSQL copy holds runs only)."""
    label = f"{n_runs // 1000}k runs"
    reps = max(cfg["scale_reps"] // 4, 3)
    needle = "no-such-text-anywhere-7f3a"
    offset = min(50_000, n_runs // 2)
    page_no = offset // 50 + 1

    def timed(fn) -> float:
        t0 = time.perf_counter()
        fn()
        first = (time.perf_counter() - t0) * 1e3
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return max(first, median(ts))

    def scanning(rw):
        """The same store with the search index bypassed (what a search cost before it)."""
        pg = rw.store.placeholder == "%s"

        def run(fn):
            def go():
                rw.store._search_prefilter = lambda text: None
                if pg:
                    rw.store.execute("SET enable_bitmapscan = off")
                try:
                    return fn()
                finally:
                    del rw.store._search_prefilter
                    if pg:
                        rw.store.execute("RESET enable_bitmapscan")
            return go
        return run

    def measure(rw, where: str, key: str) -> dict:
        search = lambda: (rw.list_runs(search=needle, limit=50), rw.count_runs(search=needle))
        s = timed(search)
        (prev,) = rw.list_runs(limit=1, offset=offset - 1)
        want = [r.id for r in rw.list_runs(limit=50, offset=offset)]
        got = [r.id for r in rw.list_runs(limit=50, after=prev.id)]
        assert got == want and len(got) == 50, "keyset page differs from the offset page"
        k = timed(lambda: rw.list_runs(limit=50, after=prev.id))
        # same-process, interleaved ratios: index vs scan, keyset vs offset
        w, _ = _interleaved({"index": search, "scan": scanning(rw)(search),
                             "keyset": lambda: rw.list_runs(limit=50, after=prev.id),
                             "offset": lambda: rw.list_runs(limit=50, offset=offset)}, reps)
        fig.add(f"search_nomatch_ms{key}", f"G7. search with no match (page + count), {label}{where}",
                s, "ms", "<= 10 ms", s <= 10,
                display=f"{fmt(s)} ms (LIKE scan without the index {fmt(w['scan'])} ms: "
                        f"{fmt(w['scan'] / w['index'])}x)")
        fig.add(f"page_keyset_ms{key}",
                f"G7. list_runs page {page_no:,} via keyset (after= last run of page {page_no - 1:,}), "
                f"{label}{where}", k, "ms", "<= 10 ms", k <= 10,
                display=f"{fmt(k)} ms ({fmt(w['offset'] / w['keyset'])}x faster than by offset)")
        fig.add(f"page_offset_ms{key}", f"G7. same page by offset={offset:,} (unscored), {label}{where}",
                w["offset"], "ms")
        return {"search_ms": s, "keyset_ms": k, "interleaved_ms": w}

    details: dict = {}
    rw = rewind.Rewind(path)
    try:
        details["sqlite"] = measure(rw, "", "")
        st = timed(lambda: rw.cache_stats())
        details["sqlite"]["cache_stats_ms"] = st
        fig.add("cache_stats_ms", f"G7. cache_stats, {label}", st, "ms", "<= 10 ms", st <= 10)
    finally:
        rw.close()
    url = os.environ.get("REWIND_BENCH_PG_URL") or os.environ.get("REWIND_TEST_PG_URL")
    if not url:
        fig.na("search_nomatch_ms_pg", f"G7. search and keyset page, {label} (PostgreSQL)",
               "set REWIND_BENCH_PG_URL (or REWIND_TEST_PG_URL)", "<= 10 ms")
    else:
        with synth.pg_copy_of_runs(path, url) as (pg_url, copy_s):
            rw = rewind.Rewind(pg_url)
            try:
                details["postgres"] = {"copy_s": copy_s, **measure(rw, " (PostgreSQL)", "_pg")}
            finally:
                rw.close()
    fig.details["queries"] = details
