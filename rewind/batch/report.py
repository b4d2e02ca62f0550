"""What a batch returns: one `BatchRow` per source run, and the `BatchReport` over them (counts
per outcome, tokens spent and saved, and a metric's mean paired difference with a bootstrap
confidence interval).

Rows travel from worker processes and Ray tasks as plain dicts (`BatchRow.from_dict`), so a
worker never has to import anything but this module's field names.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any, Optional

SAME, CHANGED, FAILED, SKIPPED = "same", "changed", "failed", "skipped"
OUTCOMES = (SAME, CHANGED, FAILED, SKIPPED)
WITHIN, BEYOND = "within noise", "beyond noise"

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclasses.dataclass
class BatchRow:
    """The fork of one source run: what it spent, and whether the run's outcome changed."""

    run_id: str
    fork_id: Optional[str] = None
    status: Optional[str] = None          # the fork's run status; None when no fork was made
    outcome: str = SKIPPED                # same | changed | failed | skipped
    reason: str = ""                      # why skipped or failed; what changed otherwise
    first_divergence: Optional[str] = None
    tokens_spent: int = 0
    tokens_saved: int = 0
    verdict: Optional[str] = None         # within noise | beyond noise, with noise_samples
    executed: list = dataclasses.field(default_factory=list)   # nodes the fork really ran
    outcome_fields: list = dataclasses.field(default_factory=list)
    metric_a: Optional[float] = None
    metric_b: Optional[float] = None
    elapsed_ms: float = 0.0
    worker: Optional[str] = None          # "pid 1234" or a Ray node: where it ran
    worker_rss_kb: Optional[int] = None   # peak resident memory of that worker so far

    @classmethod
    def from_dict(cls, d: dict) -> "BatchRow":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def metric_diff(self) -> Optional[float]:
        if self.metric_a is None or self.metric_b is None:
            return None
        return self.metric_b - self.metric_a


@dataclasses.dataclass
class MetricSummary:
    """The mean of metric(fork) - metric(source) over the paired rows, with a percentile
    bootstrap interval (resampling rows with replacement, a fixed seed: reruns agree)."""

    n: int
    mean_a: float
    mean_b: float
    mean_diff: float
    ci_low: float
    ci_high: float
    confidence: float = CONFIDENCE
    resamples: int = BOOTSTRAP_RESAMPLES

    @property
    def significant(self) -> bool:
        """True when the interval excludes 0: the change moved the metric beyond chance."""
        return self.ci_low > 0 or self.ci_high < 0


def bootstrap_mean(diffs: list, resamples: int = BOOTSTRAP_RESAMPLES,
                   confidence: float = CONFIDENCE, seed: int = 0) -> tuple:
    """(mean, low, high) of `diffs` with a percentile bootstrap interval."""
    n = len(diffs)
    mean = sum(diffs) / n
    if n == 1 or all(d == diffs[0] for d in diffs):
        return mean, mean, mean
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    lo = means[max(0, int(math.floor(tail * resamples)))]
    hi = means[min(resamples - 1, int(math.ceil((1.0 - tail) * resamples)) - 1)]
    return mean, lo, hi


def summarize_metric(rows: list) -> Optional[MetricSummary]:
    pairs = [(r.metric_a, r.metric_b) for r in rows if r.metric_diff is not None]
    if not pairs:
        return None
    diffs = [b - a for a, b in pairs]
    mean, lo, hi = bootstrap_mean(diffs)
    return MetricSummary(n=len(pairs), mean_a=sum(a for a, _ in pairs) / len(pairs),
                         mean_b=sum(b for _, b in pairs) / len(pairs), mean_diff=mean,
                         ci_low=lo, ci_high=hi)


@dataclasses.dataclass
class BatchReport:
    """Rows in the order of the source runs, and what they add up to."""

    at: str
    rows: list
    edit: dict = dataclasses.field(default_factory=dict)
    params: dict = dataclasses.field(default_factory=dict)
    executor: str = "local"
    workers: int = 1
    noise_samples: int = 0
    elapsed_s: float = 0.0
    metric: Optional[MetricSummary] = None

    @property
    def counts(self) -> dict:
        """{outcome: number of rows} for every outcome, zeros included."""
        out = {o: 0 for o in OUTCOMES}
        for r in self.rows:
            out[r.outcome] = out.get(r.outcome, 0) + 1
        return out

    @property
    def verdict_counts(self) -> dict:
        out = {WITHIN: 0, BEYOND: 0}
        for r in self.rows:
            if r.verdict in out:
                out[r.verdict] += 1
        return out

    @property
    def tokens_spent(self) -> int:
        return sum(r.tokens_spent for r in self.rows)

    @property
    def tokens_saved(self) -> int:
        return sum(r.tokens_saved for r in self.rows)

    @property
    def changed(self) -> list:
        return [r for r in self.rows if r.outcome == CHANGED]

    @property
    def forks_per_second(self) -> float:
        made = sum(1 for r in self.rows if r.fork_id)
        return made / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def row(self, run_id: str) -> BatchRow:
        for r in self.rows:
            if r.run_id == run_id:
                return r
        raise KeyError(f"batch has no row for run {run_id!r}")

    @property
    def summary(self) -> str:
        c = self.counts
        text = (f"{len(self.rows)} runs forked at {self.at}: {c[CHANGED]} changed, {c[SAME]} same, "
                f"{c[FAILED]} failed, {c[SKIPPED]} skipped; {self.tokens_spent} tokens spent, "
                f"{self.tokens_saved} saved")
        if self.noise_samples:
            v = self.verdict_counts
            text += f"; {v[BEYOND]} beyond noise, {v[WITHIN]} within"
        if self.metric is not None:
            m = self.metric
            text += (f"; metric diff {m.mean_diff:+.4g} "
                     f"[{m.ci_low:+.4g}, {m.ci_high:+.4g}] ({m.confidence:.0%}, n={m.n})")
        return text

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(counts=self.counts, tokens_spent=self.tokens_spent, tokens_saved=self.tokens_saved,
                 summary=self.summary)
        return d
