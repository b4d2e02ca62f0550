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
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Optional

# `python bench/run.py` measures the checkout it sits in: its root goes first on sys.path, before
# an editable install that may point at another worktree (and it makes `bench` a package).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path[:2]:
    sys.path.insert(0, ROOT)
# To measure a proposed change without touching the tree: REWIND_BENCH_PATH=/dir/holding/a/rewind
if os.environ.get("REWIND_BENCH_PATH"):
    sys.path.insert(0, os.environ["REWIND_BENCH_PATH"])

from bench import synth  # noqa: E402
from bench.measure import Figures, log  # noqa: E402
from bench.floor import bench_floor  # noqa: E402
from bench.profiling import profile_replay, sql_per_fork  # noqa: E402
from bench.report import loadavg, machine, table, write_markdown  # noqa: E402
from bench.scale import bench_fork_bytes, bench_page, bench_scale  # noqa: E402
from bench.peers import bench_peers  # noqa: E402
from bench.shape import bench_pg_round_trips, bench_queries, bench_shape  # noqa: E402
from bench.speed import bench_hotpath, bench_overhead, bench_replay  # noqa: E402
from bench.warmth import bench_warmth  # noqa: E402


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
        section("floor", bench_floor, fig, cfg, tmp)
        replay = section("replay", bench_replay, fig, cfg, tmp)
        if replay:
            section("peers", bench_peers, fig, cfg, tmp, replay)
        section("warmth", bench_warmth, fig, cfg, tmp)
        section("shape", bench_shape, fig, cfg, tmp)
        section("postgres", bench_pg_round_trips, fig, cfg)
        scale = section("synthetic store", synth.synthetic_store, cfg["runs"], log, args.rebuild,
                        args.keep_store)
        scale_path, scale_meta = scale if scale else (None, {})
        if replay:
            section("hotpath", bench_hotpath, fig, cfg, replay, scale_path)
        if scale_path:
            if quick:
                fig.details["scale_note"] = f"--quick: {cfg['runs']:,} runs instead of 100,000"
            section("scale", bench_scale, fig, cfg, scale_path, scale_meta)
            section("queries", bench_queries, fig, cfg, scale_path, cfg["runs"])
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
