"""Blame: at which step was a failed run's failure locked in? Found by experiment, not by reading
the log: re-roll the run from a step many times and count how often it then succeeds.

A trial at step k is a fork at k in which k and every later step of a re-sampled node execute
afresh (their cache and model calls bypassed, `resample_params` such as a wider temperature set
on them), while the steps before k are inherited and the rest are served as in any fork; side
effects are dry-run. `outcome(final_state) -> bool` judges each trial. The statistics and the
definition of the decisive step live in `blame_stats`.

`strategy="each"` tries every candidate step (a step of a re-sampled node); `"bisect"` assumes
success is likelier the earlier the re-roll starts, binary-searches the latest step that still
recovers, then checks that step against the one after it (and walks back a few steps when
that check fails). A token budget stops before a trial that would pass it, estimated from the
recorded cost of the steps a trial re-samples.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable, Optional

from ..errors import InvalidRequest, UserError
from .blame_stats import BASELINE, clearly_above, decisive_index, verdicts, wilson

STRATEGIES = ("bisect", "each")
MAX_SAMPLES = 1000
_WALK_BACK = 3  # steps bisect re-checks below a boundary that did not hold


@dataclasses.dataclass
class BlameRow:
    node: str
    occurrence: int
    index: int                      # the step's position in the run
    trials: int = 0
    successes: int = 0
    success_rate: Optional[float] = None
    low: Optional[float] = None     # the 95% interval (Wilson)
    high: Optional[float] = None
    verdict: str = "not tried"      # decisive | recovers | locked | not tried
    resampled: bool = False
    tokens_estimate: int = 0        # what one trial from here is expected to spend
    trial_runs: list = dataclasses.field(default_factory=list)  # the trials re-rolled from here


@dataclasses.dataclass
class BlameReport:
    run_id: str
    samples: int
    strategy: str
    resample: list
    decisive: Optional[tuple]       # (node, occurrence) or None
    steps: list                     # BlameRow per step of the run
    trial_runs: list                # the trial forks' run ids
    tokens: int                     # every token the trials spent
    tokens_each_estimate: int       # what strategy="each" would spend
    budget_exhausted: bool = False

    @property
    def deterministic(self) -> bool:
        """Every step was tried and none recovers: the failure is fixed by the run's inputs."""
        return self.decisive is None and not self.budget_exhausted and not any(
            r.verdict == "recovers" for r in self.steps)

    @property
    def summary(self) -> str:
        if self.decisive is not None:
            return f"decisive step: {self.decisive[0]} (visit {self.decisive[1]})"
        if self.budget_exhausted:
            return "no decisive step found within the token budget"
        if any(r.verdict == "recovers" for r in self.steps):
            return ("no step is clearly decisive: re-rolling recovers the run from some steps, but "
                    "their intervals overlap; try more samples (--samples 16 or more)")
        return "no decisive step: re-rolling no step recovers the run (the failure is deterministic given its inputs)"


def final_state(rw: Any, run: Any) -> dict:
    """The state after the last step that did not fail (a plain dict, Burr's keys left out):
    what an outcome judges."""
    for step in reversed(run.steps):
        if str(step.status) != "failed" and step.sequence_id is not None:
            state = rw.state_at(step) or {}
            return {k: v for k, v in state.items() if not str(k).startswith("__")}
    return {}


class field_outcome:  # noqa: N801 - used as a function: field_outcome("ok", True)
    """`state[field] == value` (or != with `negate`) as a picklable outcome (workers get it); a
    state without the field raises KeyError naming it, so a typo is refused on the recorded state
    before any trial is paid for."""

    def __init__(self, field: str, value: Any, negate: bool = False):
        self.field, self.value, self.negate = field, value, negate

    def __call__(self, state: dict) -> bool:
        if self.field not in state:
            raise KeyError(f"no field {self.field!r} in the final state (it has "
                           f"{', '.join(sorted(state)[:12])})")
        return (state[self.field] != self.value) if self.negate else (state[self.field] == self.value)


def passes(rw: Any, run: Any, outcome: Callable[[dict], bool]) -> bool:
    """Whether a trial succeeded: it completed (or halted) and its final state passes."""
    if str(run.status) not in ("completed", "halted"):
        return False
    try:
        return bool(outcome(final_state(rw, run)))
    except Exception:  # noqa: BLE001 - an outcome that cannot judge a trial's state: not a success
        return False


def default_resample(run: Any) -> list:
    """The nodes a trial re-samples by default: those whose steps cost tokens (`Step.cost`: its
    own, or what a cached or inherited step's outputs cost when they were made) or called a model."""
    return sorted({s.node for s in run.steps if s.cost or s.calls})


def _resample_set(run: Any, pipeline: Any, resample: Any) -> list:
    if resample is None:
        nodes = default_resample(run)
        if not nodes:
            raise InvalidRequest(f"run {run.id} made no model call, so no step has a sample to "
                                 "re-roll; pass resample='all' or a list of nodes", run_id=run.id,
                                 field="resample")
        return nodes
    if resample == "all":
        return sorted(pipeline.actions)
    if isinstance(resample, str) or not isinstance(resample, Iterable):
        raise InvalidRequest(f"resample must be 'all' or a list of node names, not {resample!r}",
                             field="resample")
    nodes = sorted({str(n) for n in resample})
    unknown = [n for n in nodes if n not in pipeline.actions]
    if unknown or not nodes:
        raise InvalidRequest(f"resample: pipeline {pipeline.name!r} has no node "
                             f"{', '.join(repr(n) for n in unknown) or '(none given)'}", field="resample")
    return nodes


def _check(rw: Any, run: Any, outcome: Any, samples: Any, strategy: str, params: dict,
           nodes: list, pipeline: Any) -> None:
    if not callable(outcome):
        raise InvalidRequest("outcome must be a function of the final state returning True on "
                             "success", field="outcome")
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise InvalidRequest(f"samples must be an integer from 1 to {MAX_SAMPLES}, not {samples!r}",
                             field="samples")
    if strategy not in STRATEGIES:
        raise InvalidRequest(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}",
                             field="strategy")
    taken = set().union(*(pipeline.param_names(n) for n in nodes))
    stray = sorted(set(params) - taken)
    if stray:
        raise InvalidRequest(f"no re-sampled node ({', '.join(nodes)}) has a parameter "
                             f"{', '.join(repr(p) for p in stray)}", field=stray[0])
    try:
        ok = outcome(final_state(rw, run))
    except Exception as e:  # noqa: BLE001 - the user's function: named, not a traceback
        raise UserError(f"the outcome raised on run {run.id}'s recorded state: "
                        f"{type(e).__name__}: {e}", run_id=run.id, field="outcome") from None
    if ok:
        raise InvalidRequest(f"run {run.id} passes the outcome: there is no failure to blame",
                             run_id=run.id, field="outcome")


class _Trials:
    """Runs trials, keeps the tallies, the spend and the budget."""

    def __init__(self, rw, run, outcome, candidates, samples, nodes, params, budget, on_progress, total):
        self.rw, self.run, self.outcome = rw, run, outcome
        self.candidates, self.samples, self.nodes, self.params = candidates, samples, nodes, params
        self.budget, self.on_progress, self.total = budget, on_progress, total
        self.tallies = [(0, 0)] * len(candidates)
        self.trial_runs: list = []
        self.tokens = 0
        self.done = 0
        self.exhausted = False

    def tried(self, i: int) -> bool:
        return self.tallies[i][1] > 0

    def run_at(self, i: int, estimate: int) -> None:
        """`samples` trials at candidate i (once)."""
        if self.tried(i) or self.exhausted:
            return
        step = self.candidates[i]
        successes = n = 0
        for _ in range(self.samples):
            if self.budget is not None and self.tokens + estimate > self.budget:
                self.exhausted = True
                break
            trial = self.rw.fork(self.run.id, at=step.node, occurrence=step.occurrence,
                                 resample=self.nodes, resample_params=self.params)
            self.trial_runs.append(trial.id)
            step.trial_runs.append(trial.id)
            self.tokens += int(trial.total_tokens or 0)
            n += 1
            successes += passes(self.rw, trial, self.outcome)
            self.done += 1
            if self.on_progress is not None:
                self.on_progress(self.done, self.total, f"{step.node} (visit {step.occurrence})")
        self.tallies[i] = (successes, n)

    def recovers(self, i: int, estimate: int) -> bool:
        self.run_at(i, estimate)
        return self.tallies[i][0] > 0


def _bisect(trials: _Trials, estimates: list) -> None:
    m = len(trials.candidates)
    lo, hi = 0, m - 1
    if trials.recovers(hi, estimates[hi]):
        boundary = hi
    elif not trials.recovers(lo, estimates[lo]):
        return  # the earliest re-roll does not recover: none later will (monotone)
    else:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if trials.recovers(mid, estimates[mid]):
                lo = mid
            else:
                hi = mid
        boundary = lo
    # check the boundary against the step after it; walk back a little when it does not hold
    for i in range(boundary, max(boundary - _WALK_BACK, 0) - 1, -1):
        trials.run_at(i, estimates[i])
        if i + 1 < m:
            trials.run_at(i + 1, estimates[i + 1])
        if _holds(trials.tallies, i):
            return


def blame(rw: Any, run_id: str, outcome: Callable[[dict], bool], *, samples: int = 8,
          strategy: str = "bisect", resample: Any = None, params: Optional[dict] = None,
          budget_tokens: Optional[int] = None, on_progress: Optional[Callable] = None,
          executor: str = "local", workers: Optional[int] = None) -> BlameReport:
    """Find the step that decided run `run_id`'s failure (see the module docstring). Trials run
    one after another in this process: `executor` must be "local" (`workers` is unused)."""
    if executor != "local":
        raise InvalidRequest(f"executor={executor!r}: blame runs its trials in this process "
                             "(executor='local')", field="executor")
    run = rw.get_run(run_id)
    pipeline = rw.pipeline(run.pipeline)
    params = dict(params or {})
    nodes = _resample_set(run, pipeline, resample)
    _check(rw, run, outcome, samples, strategy, params, nodes, pipeline)
    if budget_tokens is not None and (isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int)
                                      or budget_tokens < 0):
        raise InvalidRequest(f"budget_tokens must be a whole number of tokens, not {budget_tokens!r}",
                             field="budget_tokens")
    steps = list(run.steps)
    cost = [int(s.cost or 0) if s.node in nodes else 0 for s in steps]
    rows = [BlameRow(node=s.node, occurrence=s.occurrence, index=i, resampled=s.node in nodes,
                     tokens_estimate=sum(cost[i:])) for i, s in enumerate(steps)]
    cand_rows = [r for r in rows if r.resampled and str(steps[r.index].status) != "dry-run"]
    estimates = [r.tokens_estimate for r in cand_rows]
    m = len(cand_rows)
    sets = m if strategy == "each" else min(m, math.ceil(math.log2(max(m, 1))) + 2)
    trials = _Trials(rw, run, outcome, cand_rows, samples, nodes, params, budget_tokens,
                     on_progress, sets * samples)
    if m and strategy == "each":
        for i in range(m):
            trials.run_at(i, estimates[i])
    elif m:
        _bisect(trials, estimates)
    found = decisive_index(trials.tallies) if strategy == "each" else _bisect_decisive(trials.tallies)
    for row, tally, verdict in zip(cand_rows, trials.tallies, verdicts(trials.tallies, found)):
        successes, n = tally
        row.trials, row.successes, row.verdict = n, successes, verdict
        if n:
            row.success_rate = successes / n
            row.low, row.high = wilson(successes, n)
    decisive = (cand_rows[found].node, cand_rows[found].occurrence) if found is not None else None
    return BlameReport(run_id=run.id, samples=samples, strategy=strategy, resample=nodes,
                       decisive=decisive, steps=rows, trial_runs=trials.trial_runs,
                       tokens=trials.tokens, tokens_each_estimate=samples * sum(estimates),
                       budget_exhausted=trials.exhausted)


def _holds(tallies: list, i: int) -> bool:
    """Candidate i (tried) recovers clearly more often than the adjacent step after it (tried
    too), or than no re-roll at all when it is the last."""
    if not tallies[i][1]:
        return False
    if i + 1 == len(tallies):
        return clearly_above(wilson(*tallies[i]), BASELINE)
    return bool(tallies[i + 1][1]) and clearly_above(wilson(*tallies[i]), wilson(*tallies[i + 1]))


def _bisect_decisive(tallies: list) -> Optional[int]:
    """Bisect's decisive step: the latest tried step that `_holds` against its neighbour."""
    return next((i for i in range(len(tallies) - 1, -1, -1) if _holds(tallies, i)), None)
