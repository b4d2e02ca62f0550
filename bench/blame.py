"""Blame's benchmark: does it find the step that decided a failure, and at what cost?

    python bench/blame.py [--runs 20] [--samples 16] [--quick]

Faults of known step are injected into chains of model-like steps (bench/blame_shapes.py), and
each failed run is blamed, fresh randomness every run:

- a single stochastic fault (a bad sample at step k with probability 0.25, the recorded run
  unlucky), 8 steps: the share of runs whose decisive step is k;
- cause before symptom: a bad sample at j that only raises at a later step: the share whose
  decisive step is j (the cause), not the step that raised;
- a deterministic failure no re-roll fixes: the share reported as having no decisive step;
- 32 steps: trials of bisect against each, and the steps before the re-rolled step that any
  trial executed (all must be inherited).

Prints every figure beside its goal; exit status 0 unless the bench itself crashes.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path[:2]:
    sys.path.insert(0, ROOT)

import rewind  # noqa: E402
from bench import blame_shapes as shapes  # noqa: E402


def _executed_before_fork(rw, report) -> int:
    n = 0
    for trial_id in report.trial_runs:
        trial = rw.get_run(trial_id)
        at = [s.node for s in trial.steps].index(trial.fork_node)
        n += sum(str(s.status) != "inherited" for s in trial.steps[:at])
    return n


def bench(runs: int, samples: int, quick: bool) -> list:
    rng = random.Random()
    found = cause = determ = 0
    before = 0
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        rw = rewind.Rewind(os.path.join(tmp, "blame.db"))
        for i in range(runs):
            shapes.reseed(rng.randrange(1 << 30))
            k = rng.randrange(8)
            run = shapes.failed_run(rw, shapes.chain(8, fault_at=k))
            report = rw.blame(run.id, shapes.succeeded, samples=samples, strategy="bisect")
            found += report.decisive == (f"s{k}", 1)
            before += _executed_before_fork(rw, report)
            j = rng.randrange(6)
            run = shapes.failed_run(rw, shapes.chain(8, fault_at=j, symptom_at=rng.randrange(j + 1, 8)))
            report = rw.blame(run.id, shapes.succeeded, samples=samples, strategy="bisect")
            cause += report.decisive == (f"s{j}", 1)
            print(f"  run {i + 1}/{runs}: fault s{k} found={found}, cause s{j} found={cause}", file=sys.stderr)
        for i in range(max(2, runs // 4)):
            run = shapes.failed_run(rw, shapes.chain(8, fault_at=rng.randrange(8)), doomed=True)
            determ += rw.blame(run.id, shapes.succeeded, samples=4 if quick else 8,
                               strategy="bisect").decisive is None
        for i in range(1 if quick else 3):
            shapes.reseed(rng.randrange(1 << 30))
            run = shapes.failed_run(rw, shapes.chain(32, fault_at=rng.randrange(32)))
            each = rw.blame(run.id, shapes.succeeded, samples=samples, strategy="each")
            bis = rw.blame(run.id, shapes.succeeded, samples=samples, strategy="bisect")
            ratios.append(len(bis.trial_runs) / max(len(each.trial_runs), 1))
            before += _executed_before_fork(rw, bis)
        rw.close()
    n_det = max(2, runs // 4)
    return [
        ("decisive step found, single fault, samples=%d" % samples, f"{found / runs:.0%}", ">= 95%", found / runs >= 0.95),
        ("cause named, not the symptom", f"{cause / runs:.0%}", ">= 95%", cause / runs >= 0.95),
        ("deterministic failure reported as none", f"{determ / n_det:.0%}", "100%", determ == n_det),
        ("bisect trials / each trials, 32 steps", f"{max(ratios):.2f} (worst of {len(ratios)})", "<= 0.35",
         max(ratios) <= 0.35),
        ("steps before the re-rolled step executed in a trial", str(before), "0", before == 0),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="fewer runs: a smoke test")
    args = ap.parse_args()
    rows = bench(4 if args.quick else args.runs, args.samples, args.quick)
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'value':>22}  {'goal':>8}  met")
    for name, value, goal, met in rows:
        print(f"{name:<{width}}  {value:>22}  {goal:>8}  {'yes' if met else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
