"""Pins every Burr internal Rewind uses (rewind/engine/burr_compat.py): a Burr upgrade that
changes one fails here, by name, instead of silently changing what Rewind records."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor

import pytest
from burr.core import Action, ApplicationBuilder, ApplicationContext, State
from burr.core.action import action
from burr.core.graph import GraphBuilder

from rewind.engine import burr_compat


@action(reads=["n"], writes=["n"])
def bump(state):
    return state.update(n=state["n"] + 1)


def _app():
    graph = GraphBuilder().with_actions(bump=bump).with_transitions(("bump", "bump")).build()
    return ApplicationBuilder().with_graph(graph).with_entrypoint("bump").with_state(n=0).build()


def test_the_internal_state_keys_are_burrs():
    app = _app()
    app.step()
    assert app.state[burr_compat.PRIOR_STEP] == "bump"
    assert app.state[burr_compat.SEQUENCE_ID] == 0


def test_set_sequence_id_makes_burr_number_the_next_step_after_it():
    app = _app()
    burr_compat.set_sequence_id(app, 41)
    app.step()
    assert app.sequence_id == 42


def test_single_step_output_is_adjusted_and_validated_as_burr_does():
    act = getattr(bump, "action_function")
    assert burr_compat.adjust_single_step_output(State({"n": 1}), act) == ({}, State({"n": 1}))
    result, state = burr_compat.adjust_single_step_output(({"r": 1}, State({"n": 2})), act)
    assert result == {"r": 1} and state["n"] == 2
    with pytest.raises(Exception):
        burr_compat.adjust_single_step_output("not a state", act)


class UsesContext(Action):
    @property
    def reads(self):
        return []

    @property
    def writes(self):
        return ["who"]

    @property
    def inputs(self):
        return ["__context"]

    def run(self, state, __context):
        return {"who": __context.action_name}

    def update(self, result, state):
        return state.update(**result)


def test_dunder_inputs_are_remapped_onto_a_class_actions_mangled_params():
    runner = UsesContext()
    kwargs = burr_compat.remap_dunder_inputs(runner, {"__context": "ctx"})
    assert kwargs != {"__context": "ctx"} and list(kwargs.values()) == ["ctx"]
    assert burr_compat.remap_dunder_inputs(runner, {"x": 1}) == {"x": 1}


@action(reads=["n"], writes=["n"], tags=["llm"])
def ask(state):
    return state


def test_halts_expand_tags_to_the_actions_tagged():
    graph = (GraphBuilder().with_actions(bump=bump, ask=ask)
             .with_transitions(("bump", "ask"), ("ask", "bump")).build())
    assert burr_compat.expand_halts(graph, ["bump"]) == {"bump"}
    assert burr_compat.expand_halts(graph, ["@tag:llm"]) == {"ask"}
    assert burr_compat.expand_halts(graph, ["@tag:none"]) == set()


def test_the_context_burr_injects_has_the_executor_factory_rewind_wraps():
    marker: contextvars.ContextVar = contextvars.ContextVar("marker", default=None)
    marker.set("the step's")
    context = ApplicationContext(app_id="a", partition_key=None, sequence_id=0, tracker=None,
                                 parallel_executor_factory=lambda: ThreadPoolExecutor(2),
                                 state_initializer=None, state_persister=None, action_name="x")
    wrapped = burr_compat.metered_context({"__context": context})["__context"]
    with wrapped.parallel_executor_factory() as pool:
        seen = pool.submit(marker.get).result()
        mapped = list(pool.map(lambda _: marker.get(), range(2)))
    assert seen == "the step's" and mapped == ["the step's", "the step's"]
    assert wrapped.app_id == "a" and burr_compat.metered_context({"x": 1}) == {"x": 1}


# --- state_values: a State keeps its values in one plain dict that reads may use directly -----
def test_state_values_is_the_dict_the_state_holds():
    state = State({"a": 1, "b": [2, 3]})
    values = burr_compat.state_values(state)
    assert type(values) is dict
    assert values == state.get_all() == {"a": 1, "b": [2, 3]}
    assert values is burr_compat.state_values(state)  # not a copy
    assert values["b"] is state["b"]


def test_a_new_state_holds_a_new_dict_so_old_views_stay_right():
    state = State({"a": 1})
    before = burr_compat.state_values(state)
    after = state.update(a=2, c=3)
    assert before == {"a": 1}  # Burr copies on update: a view never changes under a reader
    assert burr_compat.state_values(after) == {"a": 2, "c": 3}
    assert burr_compat.state_values(after.wipe(delete=["c"])) == {"a": 2}


def test_a_state_like_mapping_without_the_dict_is_copied():
    class Other(dict):
        pass

    assert burr_compat.state_values(Other(x=1)) == {"x": 1}
