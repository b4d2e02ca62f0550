"""Three small pipeline shapes the core tests run on: linear, branching, loop.

Each node appends its name to CALLS when its function really runs, so a test can tell an
executed node from one served by the cache.
"""

from __future__ import annotations

import rewind
from burr.core import expr
from burr.core.graph import GraphBuilder

from rewind import Pipeline, action

CALLS: list = []
SETTINGS = {"fail_in": None}


def calls_of(name: str) -> int:
    return CALLS.count(name)


# --- linear: plan -> draft -> polish -> count_words -> publish --------------------------------
# `stats` reads only `topic`, so an edit of `plan` never reaches it, however far downstream.

@action(reads=["topic"], writes=["plan"])
def plan(state, temperature: float = 0.0, prompt: str = "Plan: {topic}"):
    CALLS.append("plan")
    rewind.record_usage(20, 10)
    return state.update(plan=prompt.format(topic=state["topic"]) + f" (t={temperature})")


@action(reads=["plan"], writes=["draft"])
def draft(state):
    CALLS.append("draft")
    if SETTINGS["fail_in"] == "draft":
        raise RuntimeError("draft exploded")
    rewind.record_usage(30, 40)
    return state.update(draft=f"Draft from: {state['plan']}")


@action(reads=["draft"], writes=["report"])
def polish(state):
    CALLS.append("polish")
    rewind.record_usage(15, 15)
    return state.update(report=state["draft"].upper())


@action(reads=["topic"], writes=["stats"])
def stats(state):
    CALLS.append("stats")
    return state.update(stats={"chars": len(state["topic"]), "words": len(state["topic"].split())})


@action(reads=["report", "stats"], writes=["receipt"], determinism="side-effect")
def publish(state):
    CALLS.append("publish")
    return state.update(receipt={"sent": len(state["report"])})


def linear() -> Pipeline:
    graph = (
        GraphBuilder()
        .with_actions(plan=plan, draft=draft, polish=polish, stats=stats, publish=publish)
        .with_transitions(
            ("plan", "draft"), ("draft", "polish"), ("polish", "stats"), ("stats", "publish")
        )
        .build()
    )
    return Pipeline("linear", graph, "plan")


# --- branching: score -> (long | short) -> finish ---------------------------------------------

@action(reads=["text"], writes=["score"])
def score(state):
    CALLS.append("score")
    rewind.record_usage(5, 1)
    return state.update(score=len(state["text"]))


@action(reads=["text"], writes=["summary"])
def long_summary(state):
    CALLS.append("long_summary")
    rewind.record_usage(50, 20)
    return state.update(summary=state["text"][:10] + "…")


@action(reads=["text"], writes=["summary"])
def short_summary(state):
    CALLS.append("short_summary")
    return state.update(summary=state["text"])


@action(reads=["summary"], writes=["final"])
def finish(state):
    CALLS.append("finish")
    return state.update(final=f"[{state['summary']}]")


def branching() -> Pipeline:
    graph = (
        GraphBuilder()
        .with_actions(score=score, long=long_summary, short=short_summary, finish=finish)
        .with_transitions(
            ("score", "long", expr("score > 20")),
            ("score", "short"),
            ("long", "finish"),
            ("short", "finish"),
        )
        .build()
    )
    return Pipeline("branching", graph, "score")


# --- loop: start -> improve (x3) -> done -----------------------------------------------------

@action(reads=["goal"], writes=["draft", "rounds"])
def start(state):
    CALLS.append("start")
    return state.update(draft=state["goal"], rounds=0)


@action(reads=["draft", "rounds"], writes=["draft", "rounds"])
def improve(state, suffix: str = "+"):
    CALLS.append("improve")
    rewind.record_usage(10, 10)
    return state.update(draft=state["draft"] + suffix, rounds=state["rounds"] + 1)


@action(reads=["draft"], writes=["result"])
def done(state):
    CALLS.append("done")
    return state.update(result=state["draft"].strip())


def loop() -> Pipeline:
    graph = (
        GraphBuilder()
        .with_actions(start=start, improve=improve, done=done)
        .with_transitions(
            ("start", "improve"),
            ("improve", "improve", expr("rounds < 3")),
            ("improve", "done"),
        )
        .build()
    )
    return Pipeline("loop", graph, "start")


SHAPES = {
    "linear": (linear, {"topic": "honey bees"}, "draft"),
    "branching": (branching, {"text": "a fairly long text about pollination and bees"}, "long"),
    "loop": (loop, {"goal": "write"}, "improve"),
}
