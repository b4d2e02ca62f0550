"""Runtime inputs in a fork, beside plain Burr (found by a stranger): Burr hands every step of a
turn the same `inputs=`, so a visit an edit adds (a loop that now goes round more often) gets
them too; before, such a visit got none (a required input failed the fork, an optional one
silently took its default). And a fork's `params=` naming a keyword the run passed as a runtime
input replaces that input; before, the node got it twice (a TypeError)."""

from __future__ import annotations

from burr.core import ApplicationBuilder, default, expr
from burr.core.action import action
from burr.core.graph import GraphBuilder

from rewind import Pipeline, Rewind


@action(reads=["n"], writes=["n"])
def grow(state, bonus: int):
    return state.update(n=state["n"] + bonus)


@action(reads=["n"], writes=["n"])
def grow_optional(state, bonus: int = 1):
    return state.update(n=state["n"] + bonus)


@action(reads=["n"], writes=["final"])
def done(state):
    return state.update(final=state["n"])


def _loop(node) -> tuple:
    graph = (GraphBuilder().with_actions(grow=node, done=done)
             .with_transitions(("grow", "grow", expr("n < 6")), ("grow", "done", default)).build())
    return graph, Pipeline("loop", graph, "grow")


def _burr(graph, entrypoint: str, state: dict, inputs: dict) -> list:
    app = ApplicationBuilder().with_graph(graph).with_entrypoint(entrypoint).with_state(**state).build()
    out = []
    for _, _, st in app.iterate(halt_after=["done"], inputs=inputs):
        out.append(st["n"])
    return out


def test_a_visit_an_edit_adds_gets_the_inputs_of_its_turn(tmp_path):
    for name, node in (("required", grow), ("optional", grow_optional)):
        graph, pipeline = _loop(node)
        with Rewind(str(tmp_path / f"{name}.db")) as rw:
            run = rw.run(pipeline, {"n": 0}, inputs={"bonus": 2})
            assert [s.node for s in run.steps] == ["grow"] * 3 + ["done"]
            fork = rw.fork(run.id, at="grow", occurrence=2, edit={"n": -4})
            assert fork.status == "completed", fork.error
            ours = [rw.state_at(s)["n"] for s in fork.steps]
            assert ours == [2] + _burr(graph, "grow", {"n": -4}, {"bonus": 2})  # 6 grows, not 9
            assert rw.state_at(fork.steps[-1])["final"] == 6


@action(reads=["topic"], writes=["essay"])
def write(state, tone: str = "plain"):
    return state.update(essay=f"{tone} essay on {state['topic']}")


def test_a_param_change_naming_an_input_the_run_was_given_replaces_it(tmp_path):
    graph = GraphBuilder().with_actions(write=write).with_transitions().build()
    with Rewind(str(tmp_path / "r.db")) as rw:
        run = rw.run(Pipeline("essay", graph, "write"), {"topic": "bees"}, inputs={"tone": "loud"})
        assert rw.state_at(run.steps[-1])["essay"] == "loud essay on bees"
        fork = rw.fork(run.id, at="write", params={"tone": "shouty"})
        assert fork.status == "completed", fork.error
        app = ApplicationBuilder().with_graph(graph).with_entrypoint("write").with_state(topic="bees").build()
        assert rw.state_at(fork.steps[-1])["essay"] == app.run(
            halt_after=["write"], inputs={"tone": "shouty"})[2]["essay"] == "shouty essay on bees"
