"""Five places a stranger found Rewind stepping differently from plain Burr, each run side by
side with Burr on both backends:

- a transition on `__SEQUENCE_ID`: `Application.step` advances the sequence id, then picks the
  action (so a "three steps at most" guard leaves the loop one visit earlier than the
  un-advanced state suggests); a visit served from the cache took the other branch;
- a node deleting by name a field it does not read (`wipe(delete=[...])`): a hit recorded where
  the field was absent left it in place where Burr deletes it;
- a class action whose `update` sets an undeclared field: Burr allows it only where the state
  has the field, and a hit served it where Burr fails the step;
- a node reading Burr's bookkeeping keys: `state.get("__SEQUENCE_ID")` was a silent None
  (now an `UndeclaredRead`; declared, the node gets Burr's value and is keyed on it);
- a fork editing the prior value of a field the node writes (`append`/`increment` build on it)
  was refused, though Burr's `override_state_values` does it.
"""

from __future__ import annotations

import copy

import pytest
from burr.core import ApplicationBuilder, Condition, State, action, default, expr
from burr.core.graph import GraphBuilder

from rewind import Pipeline, Rewind
from tests.test_burr_fidelity import Trajectory, UndeclaredWrite, assert_same_trajectory, visible


def burr_steps(graph, entrypoint: str, state: dict, at: str = "", occurrence: int = 0,
               edit=None) -> Trajectory:
    """Plain Burr stepped to its end; `edit` written into its state just before the
    `occurrence`-th visit of `at` (what a fork there changes)."""
    app = (ApplicationBuilder().with_graph(graph).with_entrypoint(entrypoint)
           .with_state(**copy.deepcopy(state)).build())
    out, seen = Trajectory([], []), 0
    while app.get_next_action() is not None:
        if app.get_next_action().name == at:
            seen += 1
            if seen == occurrence:
                app.update_state(app.state.update(**edit))
        step = app.step()
        out.nodes.append(step[0].name)
        out.states.append(copy.deepcopy(visible(app.state.get_all())))
    return out


@pytest.fixture
def rw(store_url):
    with Rewind(store_url) as handle:
        yield handle


# --- a transition on the sequence id -----------------------------------------------------------

@action(reads=["x"], writes=["x"])
def work(state: State) -> State:
    return state.update(x=state["x"] * 1)  # the same inputs every visit: served from the cache


@action(reads=["x"], writes=["n"])
def done(state: State) -> State:
    return state.update(n=state["x"] + 1)


AT_MOST_THREE = Condition(keys=["__SEQUENCE_ID"], resolver=lambda s: s["__SEQUENCE_ID"] >= 3,
                          name="__SEQUENCE_ID >= 3")
GUARDED = (GraphBuilder().with_actions(work=work, done=done)
           .with_transitions(("work", "done", AT_MOST_THREE), ("work", "work", default)).build())


def test_a_served_visit_is_picked_after_the_sequence_id_advances_as_in_burr(rw):
    pipeline = Pipeline(name="guard", graph=GUARDED, entrypoint="work")
    expected = burr_steps(GUARDED, "work", {"x": 1})
    assert expected.nodes == ["work", "work", "work", "done"]
    first = rw.run(pipeline, {"x": 1})
    assert [str(s.status) for s in first.steps] == ["executed", "cached", "cached", "executed"], [s.reason for s in first.steps]
    assert_same_trajectory(rw, first, expected)  # was work x4: the cached visits looped once more
    again = rw.run(pipeline, {"x": 1})
    assert all(str(s.status) == "cached" for s in again.steps)
    assert_same_trajectory(rw, again, expected)


def test_a_fork_of_a_loop_guarded_by_the_sequence_id_ends_where_burr_ends(rw):
    pipeline = Pipeline(name="guard", graph=GUARDED, entrypoint="work")
    run = rw.run(pipeline, {"x": 1})
    fork = rw.fork(run.id, at="work", occurrence=2, edit={"x": 5})
    assert fork.status == "completed", fork.error
    assert_same_trajectory(rw, fork, burr_steps(GUARDED, "work", {"x": 1}, "work", 2, {"x": 5}))


# --- deleting by name a field the node does not read --------------------------------------------

@action(reads=["a"], writes=["b"])
def clean(state: State) -> State:
    return state.update(b=state["a"] * 2).wipe(delete=["junk"])


@action(reads=["b"], writes=["c"])
def after(state: State) -> State:
    return state.update(c=state["b"] + 1)


CLEANING = GraphBuilder().with_actions(clean=clean, after=after).with_transitions(("clean", "after")).build()


@pytest.mark.parametrize("first, second", [
    ({"a": 2}, {"a": 2, "junk": [1]}),   # recorded with nothing to delete, served where there is
    ({"a": 2, "junk": [1]}, {"a": 2}),   # recorded deleting it, served where there is none
])
def test_a_hit_deletes_by_name_whatever_the_state_holds_now(rw, first, second):
    pipeline = Pipeline(name="clean", graph=CLEANING, entrypoint="clean")
    rw.run(pipeline, first)
    run = rw.run(pipeline, second)
    assert [str(s.status) for s in run.steps] == ["cached", "cached"]
    assert_same_trajectory(rw, run, burr_steps(CLEANING, "clean", second))
    assert "junk" not in rw.state_at(run.steps[0])


# --- a class action's undeclared write -----------------------------------------------------------

def test_a_class_actions_undeclared_write_is_not_served_where_burr_refuses_it(rw):
    graph = GraphBuilder().with_actions(tag=UndeclaredWrite("z")).build()
    pipeline = Pipeline(name="tag", graph=graph, entrypoint="tag")
    ok = rw.run(pipeline, {"x": 1, "z": 0})  # Burr allows it: the state has `z`
    assert ok.status == "completed"
    assert_same_trajectory(rw, ok, burr_steps(graph, "tag", {"x": 1, "z": 0}))
    plain = ApplicationBuilder().with_graph(graph).with_entrypoint("tag").with_state(x=1).build()
    with pytest.raises(ValueError, match="attempted to write to keys"):
        plain.step()
    refused = rw.run(pipeline, {"x": 1})  # same inputs for `tag`, but no `z`
    assert refused.status == "failed" and "attempted to write to keys {'z'}" in refused.error
    assert str(refused.steps[0].status) == "failed"


# --- Burr's bookkeeping keys ------------------------------------------------------------------

@action(reads=["x"], writes=["x"])
def bump(state: State) -> State:
    return state.update(x=state["x"] * 1)


@action(reads=["x"], writes=["seq"])
def peek_undeclared(state: State) -> State:
    return state.update(seq=state.get("__SEQUENCE_ID"))


@action(reads=["x", "__SEQUENCE_ID", "__PRIOR_STEP"], writes=["seq", "prior"])
def peek(state: State) -> State:
    return state.update(seq=state.get("__SEQUENCE_ID"), prior=state["__PRIOR_STEP"])


def peeking(peeker) -> object:
    return (GraphBuilder().with_actions(bump=bump, peek=peeker)
            .with_transitions(("bump", "peek"), ("peek", "bump", expr("seq < 5"))).build())


def test_reading_an_undeclared_bookkeeping_key_names_it_instead_of_a_silent_none(rw):
    run = rw.run(Pipeline(name="peek", graph=peeking(peek_undeclared), entrypoint="bump"), {"x": 0})
    assert run.status == "failed"
    assert "UndeclaredRead" in run.error and "'__SEQUENCE_ID'" in run.error
    assert "add '__SEQUENCE_ID' to its reads" in run.error


def test_a_declared_bookkeeping_key_is_burrs_value_and_part_of_the_key(rw):
    graph = peeking(peek)
    pipeline = Pipeline(name="peek", graph=graph, entrypoint="bump")
    expected = burr_steps(graph, "bump", {"x": 0})
    assert [s["seq"] for s in expected.states if "seq" in s][-1] == 5
    first = rw.run(pipeline, {"x": 0})
    assert_same_trajectory(rw, first, expected)
    # `peek` sees another sequence id on every visit, so none is served from an earlier one
    assert [str(s.status) for s in first.steps if s.node == "peek"] == ["executed"] * 3
    again = rw.run(pipeline, {"x": 0})
    assert all(str(s.status) == "cached" for s in again.steps)
    assert_same_trajectory(rw, again, expected)
    fork = rw.fork(first.id, at="peek", occurrence=2)
    assert_same_trajectory(rw, fork, expected)


# --- editing the prior value of a written field --------------------------------------------------

@action(reads=["count"], writes=["count", "hist"])
def inc(state: State) -> State:
    return state.increment(count=1).append(hist=state["count"])


@action(reads=["hist"], writes=["total"])
def fin(state: State) -> State:
    return state.update(total=sum(state["hist"]))


def test_a_fork_may_edit_the_prior_value_of_a_field_the_node_appends_to(rw):
    graph = (GraphBuilder().with_actions(inc=inc, fin=fin)
             .with_transitions(("inc", "fin", expr("count >= 3")), ("inc", "inc", default)).build())
    run = rw.run(Pipeline(name="hist", graph=graph, entrypoint="inc"), {"count": 0, "hist": []})
    fork = rw.fork(run.id, at="inc", occurrence=2, edit={"hist": [100]})
    assert fork.status == "completed", fork.error
    expected = burr_steps(graph, "inc", {"count": 0, "hist": []}, "inc", 2, {"hist": [100]})
    assert expected.states[-1]["total"] == 103
    assert_same_trajectory(rw, fork, expected)
    assert [str(s.status) for s in fork.steps][1] == "executed"  # its key holds the edit
