"""A/B a proposed change to rewind/ against the tree, interleaved in one process.

    python bench/ab.py /path/to/patched/rewind [--n 300]

Copies both packages under private names (rewind_a: this tree's rewind/, rewind_b: the given
directory), then alternates, call by call, a first run (fresh inputs), a no-edit fork at node 3
(6 nodes from cache) and a fork at node 8 (the fixed cost of a fork) on each, each side on its
own store. Prints medians of wall-clock and CPU time and the B/A ratios: on a noisy machine an
interleaved pair is the only comparison worth reading.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time

# A is this checkout's rewind/ (copied by path below); the root goes on sys.path only so that
# `python bench/ab.py` can import `bench` as a package.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import workload as W  # noqa: E402

FORK_AT = W.NODES[2]


def load_as(src: str, name: str, into: str):
    """Import the package at `src` under the module name `name` (its imports are relative)."""
    dst = os.path.join(into, name)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    if into not in sys.path:
        sys.path.insert(0, into)
    return importlib.import_module(name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("patched", help="a directory holding a patched copy of the rewind package")
    ap.add_argument("--n", type=int, default=300, help="interleaved repetitions (default 300)")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="ab-", dir=os.path.join(ROOT, "bench", "out")
                            if os.path.isdir(os.path.join(ROOT, "bench", "out")) else None)
    try:
        sides = {}
        for label, src in (("A", os.path.join(ROOT, "rewind")), ("B", args.patched)):
            mod = load_as(os.path.abspath(src), f"rewind_{label.lower()}", os.path.join(work, "pkgs"))
            pipeline = mod.Pipeline("bench8", W.build_graph(mod), W.NODES[0])
            rw = mod.Rewind(os.path.join(work, f"{label}.db"))
            root = rw.run(pipeline, {"topic": W.topic(0)}, use_cache=False)
            fork = rw.fork(root.id, at=FORK_AT)
            statuses = [s.status for s in fork.steps]
            assert statuses == ["inherited"] * 2 + ["cached"] * 6, (label, statuses)
            assert [s.output_hash for s in fork.steps] == [s.output_hash for s in root.steps]
            for i in range(10):
                rw.fork(root.id, at=FORK_AT)
                rw.run(pipeline, {"topic": W.topic(10_000_000 + i)})
            sides[label] = (rw, pipeline, root)
        wall = {f"{s}{k}": [] for s in "AB" for k in ("run", "fork6", "fork1")}
        cpu = {k: [] for k in wall}
        for i in range(args.n):
            order = "AB" if i % 2 == 0 else "BA"
            for kind in ("run", "fork6", "fork1"):
                for s in order:
                    rw, pipeline, root = sides[s]
                    c0, t0 = time.process_time(), time.perf_counter()
                    if kind == "run":
                        out = rw.run(pipeline, {"topic": W.topic(20_000_000 + i)})
                    elif kind == "fork6":
                        out = rw.fork(root.id, at=FORK_AT)
                    else:
                        out = rw.fork(root.id, at=W.NODES[-1])
                    wall[s + kind].append(time.perf_counter() - t0)
                    cpu[s + kind].append(time.process_time() - c0)
                    assert out.status == "completed", (s, kind, out.error)
                    assert kind != "run" or out.total_tokens == 800, (s, out.total_tokens)
        print(f"{args.n} interleaved repetitions; A = {os.path.join(ROOT, 'rewind')}, B = {args.patched}")
        print(f"{'':28}{'A ms':>9}{'B ms':>9}{'B/A':>7}   {'A cpu':>8}{'B cpu':>8}{'B/A':>7}")
        names = {"run": "first run (8 executed)", "fork6": "fork at node 3 (6 cached)",
                 "fork1": "fork at node 8 (1 cached)"}
        for kind in ("run", "fork6", "fork1"):
            a, b = (statistics.median(wall[s + kind]) * 1e3 for s in "AB")
            ca, cb = (statistics.median(cpu[s + kind]) * 1e3 for s in "AB")
            print(f"{names[kind]:28}{a:9.3f}{b:9.3f}{b / a:7.2f}   {ca:8.3f}{cb:8.3f}{cb / ca:7.2f}")
        for rw, _, _ in sides.values():
            rw.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
