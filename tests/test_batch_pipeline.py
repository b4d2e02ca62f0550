"""The pipeline the batch tests replay (no tests here): workers import it by its spec,
`test_batch_pipeline:pipeline`, so it lives in a module of its own at module level.

    extract ─┬─(n % 10 == 9)→ shortcut                  (never reaches `judge`)
             └───────────────→ judge → tally → summarize

`judge` passes a run when its score reaches `threshold` (default 15); raising it to 20 flips
exactly the runs with n in 15..18 (19 takes the shortcut). `tally` reads only the score, so no
change at `judge` reaches it. Every real execution appends its node and n to the file named by
`REWIND_BATCH_CALLS` (workers are other processes, so a list in memory would not see them).
With `REWIND_BATCH_KILL` naming a file that does not exist yet, `judge` on n == 7 creates it and
SIGKILLs its own process: a worker dying mid-fork, once.
"""

from __future__ import annotations

import os
import signal

from burr.core import expr
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, action

TOKENS = {"extract": 10, "judge": 5, "tally": 3, "summarize": 7, "shortcut": 4}
N_RUNS = 30


def _called(node: str, n: int) -> None:
    rewind.record_usage(TOKENS[node], 0)
    path = os.environ.get("REWIND_BATCH_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{node} {n}\n")


def calls(path) -> list:
    """[(node, n)] of every real execution logged at `path`."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [(a, int(b)) for a, b in (line.split() for line in f if line.strip())]


@action(reads=["n"], writes=["score", "route"])
def extract(state):
    _called("extract", state["n"])
    return state.update(score=state["n"], route="short" if state["n"] % 10 == 9 else "long")


@action(reads=["score"], writes=["verdict"])
def judge(state, threshold: int = 15):
    n = state["score"]
    marker = os.environ.get("REWIND_BATCH_KILL")
    if marker and n == 7 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    _called("judge", n)
    return state.update(verdict="pass" if n >= threshold else "fail")


@action(reads=["score"], writes=["bucket"])
def tally(state):
    _called("tally", state["score"])
    return state.update(bucket=state["score"] // 10)


@action(reads=["verdict", "bucket", "score"], writes=["summary"])
def summarize(state):
    _called("summarize", state["score"])
    return state.update(summary=f"{state['verdict']}: {state['score']} (bucket {state['bucket']})")


@action(reads=["n"], writes=["summary"])
def shortcut(state):
    _called("shortcut", state["n"])
    return state.update(summary="shortcut")


graph = (
    GraphBuilder()
    .with_actions(extract=extract, judge=judge, tally=tally, summarize=summarize, shortcut=shortcut)
    .with_transitions(
        ("extract", "shortcut", expr("route == 'short'")),
        ("extract", "judge"),
        ("judge", "tally"),
        ("tally", "summarize"),
    )
    .build()
)
pipeline = Pipeline(name="batch-test", graph=graph, entrypoint="extract")


def flips_at(threshold: int, base: int = 15) -> set:
    """The n whose verdict a threshold of `threshold` flips, by construction."""
    lo, hi = sorted((base, threshold))
    return {n for n in range(N_RUNS) if n % 10 != 9 and lo <= n < hi}
