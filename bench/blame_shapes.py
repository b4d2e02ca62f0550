"""Pipelines with a fault injected at a known step, for blame's benchmark (bench/blame.py) and
its tests (tests/test_blame.py).

`chain(n, fault_at, symptom_at=None, p_bad=0.25)`: n model-like steps s0..s{n-1} (each meters
tokens, as a model call would). Step `fault_at` draws a bad sample with probability `p_bad`
(always, while CONTROL["force"] is set: how the failed run to blame is recorded), which sets a
hidden flag; the last step writes `ok = not flag`. With `symptom_at`, the step there raises when
the flag is set: the failure shows at the symptom, but was decided at the fault. `doomed=True`
in the initial state makes every run fail whatever is re-sampled. The draws come from one
seeded generator (`reseed`), so a test's trials are the same every time it runs (the benchmark
reseeds it per run).
"""

from __future__ import annotations

import random

from burr.core.graph import GraphBuilder

import rewind

CONTROL = {"force": False}
RNG = random.Random(0)


def reseed(seed: int = 0) -> None:
    RNG.seed(seed)


def _step(name: str, bad_here: bool, p_bad: float, symptom: bool, last: bool):
    @rewind.action(reads=["flag", "doomed", "trace"], writes=["flag", "trace", "ok"])
    def step(state):
        rewind.llm.record_usage(10, 5)  # a model call's worth of tokens: re-sampled by default
        draw = RNG.random()  # every step samples, as a model at temperature > 0 would
        flag = bool(state["flag"])
        if bad_here:
            flag = flag or CONTROL["force"] or draw < p_bad
        if symptom and flag:
            raise RuntimeError(f"{name}: the answer is malformed")
        ok = (not flag and not state["doomed"]) if last else None
        return state.update(flag=flag, trace=state["trace"] + [name], ok=ok)

    step.__name__ = name
    return step


def chain(n: int, fault_at: int, symptom_at=None, p_bad: float = 0.25) -> rewind.Pipeline:
    names = [f"s{i}" for i in range(n)]
    actions = {name: _step(name, i == fault_at, p_bad, i == symptom_at, i == n - 1)
               for i, name in enumerate(names)}
    graph = (GraphBuilder().with_actions(**actions)
             .with_transitions(*[(a, b) for a, b in zip(names, names[1:])]).build())
    tag = f"{n}-{fault_at}-{symptom_at}"
    return rewind.Pipeline(name=f"blame-chain-{tag}", graph=graph, entrypoint="s0")


def failed_run(rw, pipeline, doomed: bool = False):
    """A run of `pipeline` that fails: the fault forced bad (or the run doomed)."""
    CONTROL["force"] = True
    try:
        return rw.run(pipeline, {"flag": False, "doomed": doomed, "trace": [], "ok": None})
    finally:
        CONTROL["force"] = False


def succeeded(state: dict) -> bool:
    return state.get("ok") is True


# one fault-injected pipeline at module level, for `REWIND_PIPELINES=bench.blame_shapes:PIPELINE`
# (the dashboard's Blame page in tests/test_blame_page.py)
PIPELINE = chain(6, fault_at=2)
