"""Batch counterfactuals at scale: N stored demo runs (the research pipeline on the offline
model), one temperature change at `critique`, replayed by `rewind.batch.batch_fork`.

    python bench/batch.py [--runs 1000] [--temperature 0.7] [--seed 1] [--json out.json] [--no-ray]

Figures: forks per second with 1 and 2 local workers and on a local Ray (2 CPUs), overall
(worker start-up included) and steady (from the first finished fork to the last); tokens
spent against a full re-run of all N runs; peak memory per worker; and a re-run of the same
batch (resumption: every fork from cache). Each executor starts from a copy of the same store,
so none sees another's cache entries. The outcome compared is the final `report`. The new
critique samples with a fixed `seed` (`--seed`; `--seed -1` for none), so that every executor
draws the same text and their tables can be compared row by row.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path[:2]:
    sys.path.insert(0, ROOT)

import rewind  # noqa: E402
from rewind.batch import batch_fork  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_store(path: str, n_runs: int) -> dict:
    """N completed demo runs, each on its own question (so each critique is its own key)."""
    from rewind.pipelines.research import SAMPLE_QUESTIONS, pipeline

    started = time.perf_counter()
    tokens = 0
    with rewind.Rewind(path) as rw:
        for i in range(n_runs):
            q = SAMPLE_QUESTIONS[i % len(SAMPLE_QUESTIONS)]
            run = rw.run(pipeline, {"question": f"{q} (case {i})"})
            if run.status != "completed":
                raise SystemExit(f"demo run {i} ended {run.status}: {run.error}")
            tokens += run.total_tokens
            if (i + 1) % 100 == 0:
                log(f"  stored {i + 1}/{n_runs} runs")
    return {"runs": n_runs, "seconds": time.perf_counter() - started, "full_rerun_tokens": tokens}


def copy_store(src: str, dst: str) -> str:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(src + suffix):
            shutil.copyfile(src + suffix, dst + suffix)
    return dst


def one_batch(path: str, label: str, executor: str, workers: int, params: dict, n_runs: int) -> dict:
    stamps: list = []

    def on_progress(done: int, total: int, row) -> None:
        stamps.append(time.perf_counter())
        if done % max(1, total // 10) == 0:
            log(f"  {label}: {done}/{total}")

    with rewind.Rewind(path) as rw:
        started = time.perf_counter()
        report = batch_fork(rw, "critique", pipeline="research", params=params, limit=n_runs,
                            outcome="report",
                            executor=executor, workers=workers, on_progress=on_progress)
        elapsed = time.perf_counter() - started
    forks = sum(1 for r in report.rows if r.fork_id)
    steady = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 and stamps[-1] > stamps[0] else 0.0
    rss: dict = {}
    for r in report.rows:
        if r.worker and r.worker_rss_kb:
            rss[r.worker] = max(rss.get(r.worker, 0), r.worker_rss_kb)
    return {
        "label": label, "executor": executor, "workers": workers, "forks": forks,
        "seconds": elapsed, "forks_per_s": forks / elapsed if elapsed else 0.0,
        "steady_forks_per_s": steady, "tokens_spent": report.tokens_spent,
        "tokens_saved": report.tokens_saved, "counts": report.counts,
        "worker_processes": len(rss),
        "worker_peak_rss_mb": round(max(rss.values()) / 1024, 1) if rss else None,
        "worker_mean_peak_rss_mb": round(sum(rss.values()) / len(rss) / 1024, 1) if rss else None,
        "table": [(r.run_id, r.outcome, r.first_divergence, r.tokens_spent) for r in report.rows],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000, help="stored demo runs (default 1,000)")
    ap.add_argument("--temperature", type=float, default=0.7, help="critique's new temperature")
    ap.add_argument("--seed", type=int, default=1, help="critique's sampling seed (-1: none)")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray figure")
    ap.add_argument("--json", metavar="PATH", help="write every figure here")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    params = {"temperature": args.temperature}
    if args.seed >= 0:
        params["seed"] = args.seed
    tmp = tempfile.mkdtemp(prefix="rewind-bench-batch-")
    os.environ.setdefault("REWIND_OUTBOX", os.path.join(tmp, "outbox"))
    try:
        base = os.path.join(tmp, "base.db")
        log(f"storing {args.runs} demo runs in {base} …")
        stored = make_store(base, args.runs)
        configs = [("local, 1 worker", "local", 1), ("local, 2 workers", "local", 2)]
        if not args.no_ray:
            configs.append(("ray (local, 2 CPUs)", "ray", 2))
        results = []
        for i, (label, executor, workers) in enumerate(configs):
            path = copy_store(base, os.path.join(tmp, f"b{i}.db"))
            log(f"{label} …")
            results.append(one_batch(path, label, executor, workers, params, args.runs))
        log("re-running the 2-worker batch on its own store (resumption) …")
        rerun = one_batch(os.path.join(tmp, "b1.db"), "re-run (local, 2 workers)", "local", 2,
                          params, args.runs)
        same_tables = len({json.dumps([t[1:] for t in r["table"]]) for r in results}) == 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    full = stored["full_rerun_tokens"]
    print(f"batch counterfactuals: {args.runs} stored demo runs, critique temperature "
          f"0.0 → {args.temperature} (seed {params.get('seed', 'none')}), {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"storing the runs took {stored['seconds']:.1f} s; a full re-run of all of them costs "
          f"{full:,} tokens")
    head = f"{'executor':<28}{'forks':>7}{'s':>8}{'forks/s':>9}{'steady/s':>10}" \
           f"{'tokens':>10}{'% of full':>10}{'worker MB':>11}"
    print(head)
    print("-" * len(head))
    for r in results + [rerun]:
        share = 100.0 * r["tokens_spent"] / full if full else 0.0
        print(f"{r['label']:<28}{r['forks']:>7}{r['seconds']:>8.1f}{r['forks_per_s']:>9.1f}"
              f"{r['steady_forks_per_s']:>10.1f}{r['tokens_spent']:>10,}{share:>9.2f}%"
              f"{(r['worker_peak_rss_mb'] or 0):>11.1f}")
    c = results[0]["counts"]
    print(f"outcomes (the report): {c['changed']} changed, {c['same']} same, {c['failed']} failed, "
          f"{c['skipped']} skipped; executors agree on every row: {'yes' if same_tables else 'NO'}")
    print(f"caller process peak memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"stored": stored, "results": [{k: v for k, v in r.items() if k != "table"}
                                                     for r in results + [rerun]],
                       "executors_agree": same_tables, "temperature": args.temperature}, f, indent=2)
    return 0 if same_tables else 1


if __name__ == "__main__":
    sys.exit(main())
