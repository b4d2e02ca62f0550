"""Figure W: how much of a fork's time is this machine's, not Rewind's.

The same no-edit fork is timed right after another fork (its code and data still in the CPU's
caches) and right after 8 ms of unrelated work (a spin that touches almost no memory: what
the LangGraph peer and a user's click put between two forks). Beside it, in the same
alternation, a pure-Python reference (JSON and arithmetic, no Rewind code) of about the same
length. On a shared virtual machine the reference slows down after the gap too (less than the
fork, whose code and data are larger): part of the gap's cost is the machine's (caches shared
with other tenants), and every figure of section 2 is measured after such a gap.
"""

from __future__ import annotations

import json
import os
import time

import rewind

from bench import workload as W
from bench.measure import Figures, median

GAP_S = 0.008
_DOC = {f"k{i}": [i, str(i), {"x": i}] for i in range(120)}


def _reference() -> None:
    """Pure-Python work of about a fork's length that runs no Rewind, Burr or SQLite code."""
    for _ in range(3):
        json.loads(json.dumps(_DOC, sort_keys=True))
    total = 0
    for i in range(2_000):
        total += i * i


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def bench_warmth(fig: Figures, cfg: dict, tmp: str) -> None:
    rw = rewind.Rewind(os.path.join(tmp, "warmth.db"))
    try:
        root = rw.run(W.make_pipeline("bench8"), {"topic": W.topic(0)}, use_cache=False)

        def fork() -> None:
            rw.fork(root.id, at=W.FORK_AT)

        series = {(name, warm): [] for name in ("fork", "reference") for warm in (True, False)}
        for fn in (fork, _reference):
            fn()
        for _ in range(cfg["replays"]):
            for name, fn in (("fork", fork), ("reference", _reference)):
                for warm in (True, False):
                    if warm:
                        fn()  # the same code just before: its caches are warm
                    else:
                        _spin(GAP_S)
                    t0 = time.perf_counter()
                    fn()
                    series[(name, warm)].append(time.perf_counter() - t0)
        m = {k: median(v) * 1e3 for k, v in series.items()}
        fig.add("warm_fork_ms", "W. no-edit fork right after another (warm caches)",
                m[("fork", True)], "ms")
        fig.add("cold_fork_ms", f"W. same fork after {GAP_S * 1e3:.0f} ms of other work (section 2 forks after a gap)",
                m[("fork", False)], "ms")
        fig.add("warm_per_node_us", "W. per replayed node, warm (total / 6)",
                m[("fork", True)] / W.REPLAYED * 1e3, "us")
        fig.add("cold_ratio_fork", "W. after the gap / warm, Rewind fork",
                m[("fork", False)] / m[("fork", True)], "x")
        fig.add("cold_ratio_reference", "W. after the gap / warm, pure-Python reference (no Rewind code)",
                m[("reference", False)] / m[("reference", True)], "x")
        fig.details["warmth"] = {"gap_s": GAP_S, "medians_ms": {f"{k[0]}_{'warm' if k[1] else 'cold'}": v
                                                               for k, v in m.items()}}
    finally:
        rw.close()
