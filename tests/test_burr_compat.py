"""Pins every Burr internal Rewind uses (rewind/engine/burr_compat.py): a Burr upgrade that
changes one fails here, by name, instead of silently changing what Rewind records."""

from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor

import pytest
from burr.core import application as burr_application
from burr.core import Action, ApplicationBuilder, ApplicationContext, State
from burr.core.action import SingleStepAction, action
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


# --- stepping without Burr: each replica against what Burr itself does ----------------------

class Returns(SingleStepAction):
    """A single-step action returning a fixed full state, as Rewind's wrapper does on a hit."""

    def __init__(self, reads, writes, returned, seen=None):
        super().__init__()
        self._reads, self._writes, self._returned = reads, writes, returned
        self.seen = seen if seen is not None else []  # shared by the copy Burr's graph holds

    @property
    def reads(self):
        return self._reads

    @property
    def writes(self):
        return self._writes

    def run_and_update(self, state, **run_kwargs):
        self.seen.append(state)
        return dict(self._returned(state)), State(self._returned(state))


CASES = {  # (state before, outputs written, deleted)
    "overwrite": ({"a": 1, "b": 2}, {"b": 3}, []),
    "new key": ({"a": 1}, {"z": 9, "c": 4}, []),
    "delete": ({"a": 1, "b": 2, "c": 3}, {"a": 5}, ["c"]),
    "write then delete": ({"a": 1, "b": 2}, {"b": 7}, ["b"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_numbered_and_after_served_are_burrs_step(case):
    values, outputs, deleted = CASES[case]
    writes = sorted(set(outputs) - set(deleted))

    def returned(state):
        full = {**state.get_all(), **outputs}
        return {k: v for k, v in full.items() if k not in deleted}

    act = Returns(["a"], writes, returned)
    graph = GraphBuilder().with_actions(act=act).with_transitions(("act", "act")).build()
    app = ApplicationBuilder().with_graph(graph).with_entrypoint("act").with_state(**values).build()
    for _ in range(2):  # the first step (no sequence id yet) and a later one
        before = app.state
        app.step()
        handed = burr_compat.numbered(before)
        assert handed.get_all() == act.seen[-1].get_all()
        after = burr_compat.after_served(handed, outputs, writes, deleted, graph.actions[0])
        assert list(after.get_all().items()) == list(app.state.get_all().items())  # order too


def test_after_served_refuses_where_burr_raises_for_a_missing_write():
    act = Returns([], ["w"], lambda state: state.get_all())
    graph = GraphBuilder().with_actions(act=act).with_transitions(("act", "act")).build()
    app = ApplicationBuilder().with_graph(graph).with_entrypoint("act").with_state(a=1).build()
    with pytest.raises(ValueError, match="missing write keys"):
        app.step()
    assert burr_compat.after_served(State({"a": 1}), {}, ["w"], [], act) is None


@pytest.mark.parametrize("status", ["completed", "failed"])
@pytest.mark.parametrize("override", [None, {"n": 100}])
def test_resumed_is_the_state_initialize_from_builds(status, override):
    from burr.core.persistence import InMemoryPersister

    graph = GraphBuilder().with_actions(bump=bump, other=bump).with_transitions(
        ("bump", "other"), ("other", "bump")).build()
    persister = InMemoryPersister()
    saved = State({"n": 5, burr_compat.PRIOR_STEP: "bump", burr_compat.SEQUENCE_ID: 3})
    persister.save("p", "src", 3, "bump", saved, status)
    app = (ApplicationBuilder().with_graph(graph)
           .initialize_from(persister, resume_at_next_action=True, default_state={},
                            default_entrypoint="other", fork_from_app_id="src",
                            fork_from_partition_key="p", fork_from_sequence_id=3,
                            override_state_values=override)
           .with_identifiers(app_id="fork", partition_key="p").build())
    state, start, sequence_id = burr_compat.resumed(persister.load("p", "src", 3), override, "other")
    assert state.get_all() == app.state.get_all()
    assert sequence_id == app.sequence_id == 3
    assert burr_compat.next_action(graph, state, start).name == app.get_next_action().name


def test_adapter_set_and_set_state_reach_the_applications_own():
    app = _app()
    assert hasattr(burr_compat.adapter_set(app), "call_all_lifecycle_hooks_sync")
    burr_compat.set_state(app, app.state.update(n=41))
    app.step()
    assert app.state["n"] == 42


def test_sync_hooks_are_what_the_adapter_set_calls():
    from burr.lifecycle import PostRunStepHook
    from burr.lifecycle.internal import LifecycleAdapterSet

    heard = []

    class Hook(PostRunStepHook):
        def post_run_step(self, **kwargs):
            heard.append(kwargs["n"])

    adapters = LifecycleAdapterSet(Hook(), Hook())
    adapters.call_all_lifecycle_hooks_sync("post_run_step", n=1)
    for hook in burr_compat.sync_hooks(adapters)["post_run_step"]:
        hook.post_run_step(n=2)
    assert heard == [1, 1, 2, 2]
    assert "pre_run_step" not in burr_compat.sync_hooks(adapters)


def test_hook_set_is_the_set_a_built_application_calls():
    from burr.core.persistence import InMemoryPersister
    from burr.lifecycle import PostRunStepHook

    class Hook(PostRunStepHook):
        def post_run_step(self, **kwargs):
            pass

    hook, persister = Hook(), InMemoryPersister()
    graph = GraphBuilder().with_actions(bump=bump).with_transitions(("bump", "bump")).build()
    app = (ApplicationBuilder().with_graph(graph).with_entrypoint("bump").with_state(n=0)
           .with_hooks(hook).with_state_persister(persister).build())
    built = burr_compat.sync_hooks(burr_compat.adapter_set(app))
    ours = burr_compat.sync_hooks(burr_compat.hook_set([hook], persister))
    assert set(ours) == set(built)
    for name in built:
        assert [type(h) for h in ours[name]] == [type(h) for h in built[name]], name
    assert ours["post_run_step"][0] is hook and ours["post_run_step"][1].persister is persister
    # and Burr's tracer-context hook sets its context around a step, then restores it
    from burr.visibility.tracing import tracer_factory_context_var

    before = tracer_factory_context_var.get(None)
    ids = dict(app_id="a", partition_key="p", sequence_id=0, state=app.state, action=graph.actions[0])
    ours["pre_run_step"][0].pre_run_step(inputs={}, **ids)
    assert tracer_factory_context_var.get(None) is not before
    ours["post_run_step"][-1].post_run_step(result={}, exception=None, **ids)
    assert tracer_factory_context_var.get(None) is before



def test_own_hooks_knows_the_set_of_only_rewinds_hooks():
    """`own_hooks` names (recorder, persister hook) only for exactly the set an execution's
    application is built with and no other hook: a user's hook keeps every hook firing."""
    from burr.core.persistence import InMemoryPersister
    from burr.lifecycle import PostRunStepHook, PreRunStepHook

    class Recorder(PostRunStepHook):
        def post_run_step(self, **kwargs):
            pass

    class Users(PreRunStepHook):
        def pre_run_step(self, **kwargs):
            pass

    recorder, persister = Recorder(), InMemoryPersister()
    graph = GraphBuilder().with_actions(bump=bump).with_transitions(("bump", "bump")).build()
    app = (ApplicationBuilder().with_graph(graph).with_entrypoint("bump").with_state(n=0)
           .with_hooks(recorder).with_state_persister(persister).build())
    for adapters in (burr_compat.adapter_set(app), burr_compat.hook_set([recorder], persister)):
        got = burr_compat.own_hooks(adapters, Recorder)
        assert got is not None and got[0] is recorder and got[1].persister is persister
    assert burr_compat.own_hooks(burr_compat.hook_set([recorder, Users()], persister), Recorder) is None
    assert burr_compat.own_hooks(burr_compat.hook_set([Users()], persister), Recorder) is None

def test_a_laid_out_hook_set_is_what_burr_builds_for_the_same_adapters():
    """`hook_set` lays Burr's hook tables out once per adapter classes, then fills them with
    the new instances without Burr's MRO walk: every later set must hold exactly what
    `LifecycleAdapterSet(*adapters)` holds, and in the same order."""
    from burr.core.persistence import InMemoryPersister, PersisterHook
    from burr.lifecycle import PostRunStepHook, PreRunStepHook
    from burr.lifecycle.internal import LifecycleAdapterSet

    class Both(PreRunStepHook, PostRunStepHook):
        def pre_run_step(self, **kwargs):
            pass

        def post_run_step(self, **kwargs):
            pass

    class Post(PostRunStepHook):
        def post_run_step(self, **kwargs):
            pass

    for _ in range(3):  # the first builds the layout, the others reuse it
        hooks, persister = [Post(), Both()], InMemoryPersister()
        ours = burr_compat.hook_set(hooks, persister)
        plain = LifecycleAdapterSet(*hooks, PersisterHook(persister))
        burrs = plain.with_new_adapters(burr_application.TracerFactoryContextHook(plain))
        assert [type(a) for a in ours.adapters] == [type(a) for a in burrs.adapters]
        assert ours.adapters[:2] == hooks and ours.adapters[2].persister is persister
        for table in ("sync_hooks", "async_hooks"):
            mine, theirs = getattr(ours, table), getattr(burrs, table)
            assert list(mine) == list(theirs), table
            for name in theirs:
                assert [ours.adapters.index(a) for a in mine[name]] == \
                       [burrs.adapters.index(a) for a in theirs[name]], (table, name)
        tracer = ours.adapters[-1]
        assert tracer._adapter_set.adapters == ours.adapters[:3]  # noqa: SLF001


def test_injected_inputs_are_what_burrs_process_inputs_hands_an_action():
    """A served step hands the hooks the `__context`/`__tracer` Burr would have injected: from a
    built application's own `_process_inputs`, or made as its factories make them."""
    import dataclasses

    from burr.core.persistence import InMemoryPersister
    from burr.visibility.tracing import TracerFactory

    @action(reads=["n"], writes=["n"])
    def uses_both(state, __context: ApplicationContext, __tracer):
        return state.update(n=state["n"] + 1)

    persister = InMemoryPersister()
    graph = GraphBuilder().with_actions(act=uses_both).with_transitions(("act", "act")).build()
    app = (ApplicationBuilder().with_graph(graph).with_entrypoint("act").with_state(n=0)
           .with_identifiers(app_id="app", partition_key="p").with_state_persister(persister)
           .build())
    act = graph.actions[0]
    burr_compat.set_sequence_id(app, 3)
    burrs = app._process_inputs({}, act)  # noqa: SLF001 (what the pin is about)
    adapters = burr_compat.adapter_set(app)
    ours = burr_compat.injected_inputs(None, act, {}, 3, app_id="app", partition_key="p",
                                       persister=persister, adapters=adapters)
    assert set(ours) == set(burrs) == {"__context", "__tracer"}
    fields = [f.name for f in dataclasses.fields(ApplicationContext) if f.name != "tracker"]
    assert {f: getattr(ours["__context"], f) for f in fields} == \
        {f: getattr(burrs["__context"], f) for f in fields}
    assert isinstance(ours["__tracer"], TracerFactory) and isinstance(burrs["__tracer"], TracerFactory)
    assert burr_compat.injected_inputs(app, act, {}, 3, app_id="app", partition_key="p",
                                       persister=persister, adapters=adapters).keys() == burrs.keys()


def test_next_action_is_burrs_choice_with_and_without_conditions():
    """`next_action` takes an action's first transition at once when its condition is Burr's
    `default` (which holds on every state); any other first condition goes through Burr's
    own walk. Both must give what `Graph.get_next_node` gives, on every state."""
    from burr.core import expr
    from burr.core.action import default

    @action(reads=["n"], writes=["n"])
    def up(state: State) -> State:
        return state.update(n=state["n"] + 1)

    @action(reads=[], writes=[])
    def done(state: State) -> State:
        return state

    graph = (GraphBuilder().with_actions(up=up, down=up.bind(), done=done, other=done.bind())
             .with_transitions(("up", "done", expr("n >= 3")), ("up", "down", default),
                               ("down", "up"), ("done", "other"))
             .build())
    for n in range(5):
        for prior in ("up", "down", "done", "other", None):
            state = State({"n": n, **({"__PRIOR_STEP": prior} if prior else {})})
            want = graph.get_next_node(prior, state, "up")
            got = burr_compat.next_action(graph, state, "up")
            assert (got and got.name) == (want and want.name), (n, prior)
    assert set(burr_compat._unconditional_next(graph)) == {"down", "done"}  # not `up`
