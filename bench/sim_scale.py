"""The offline model's cost against the size of its prompt (issue 38: a 100 MB prompt took
20 GB and more than 11 minutes): time and the process's peak memory (max RSS) for `rewind.sim.complete` on
prompts of growing size, and the ratio of each time to the one before.

    python bench/sim_scale.py [--sizes 1000000,10000000] [--kind prose|nospace|lines]

Linear cost shows as a time ratio close to the size ratio (10x for 1 MB -> 10 MB, not 100x).
The prompt tokens are counted over the whole input; the writers read at most
`rewind.model.sim.prompt.READ_LIMIT` characters of it. Times depend on the machine, so no
threshold is checked here (tests/test_sim_limits.py checks the cap and the memory).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from rewind.model import sim  # noqa: E402


def _text(n: int, kind: str, seed: int = 0) -> str:
    rnd = random.Random(seed)
    if kind == "nospace":  # one pre-token: the tokenizer's heap merge on all of it
        return "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    words = ["urban", "heat", "islands", "canopy", "cover", "lowers", "surface", "temperature",
             "in", "3", "points", "the", "evidence", "[doc:x]", "may", "affect", "many", "people."]
    sep = "\n" if kind == "lines" else " "
    out, size = [], 0
    while size < n:
        line = " ".join(rnd.choice(words) for _ in range(12))
        out.append(line)
        size += len(line) + 1
    return sep.join(out)[:n]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--kind", default="prose", choices=("prose", "nospace", "lines"))
    args = parser.parse_args(argv)
    sim.warm()
    print(f"{'chars':>10} {'seconds':>8} {'ratio':>6} {'read':>7} {'prompt tokens':>14} {'max RSS MB':>10}")
    previous = None
    for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
        msgs = [{"role": "user", "content": "Write a research plan on urban heat.\n" + _text(n, args.kind, n)}]
        t0 = time.perf_counter()
        c = sim.complete("sim-small", msgs)[0]
        dt = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ratio = f"{dt / previous:.1f}" if previous else "-"
        print(f"{n:>10} {dt:>8.2f} {ratio:>6} {c.chars_read:>7} {c.prompt_tokens:>14} {rss:>10.0f}")
        previous = dt
    return 0


if __name__ == "__main__":
    sys.exit(main())
