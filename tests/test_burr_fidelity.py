"""Any Burr app runs under Rewind exactly as under plain Burr (issue 10).

Each app of tests/burr_apps.py runs twice: under plain Burr (stepping `app.step(inputs=...)` and
snapshotting the state after every step) and under Rewind (`rw.run`, then `rw.resume` per later
turn, reading `rw.state_at(step)`). The states must be equal after every step. Then a no-edit
fork must call no node function, cost 0 tokens and match every hash, and an edit must re-execute
exactly the steps it reaches. This module also holds the one trajectory helper the other
test_burr_fidelity_* modules use.
"""

import asyncio
import copy
import dataclasses

import pytest
from burr.core import Action, ApplicationBuilder, State
from burr.core.graph import GraphBuilder

import rewind
from rewind import Rewind
from tests import burr_apps
from tests.burr_apps import APPS, CALLS, SETTINGS, App


@pytest.fixture(autouse=True)
def clean_calls():
    CALLS.clear()
    SETTINGS["search_down"] = False
    yield
    SETTINGS["search_down"] = False


@pytest.fixture
def rw(tmp_path):
    handle = Rewind(str(tmp_path / "rewind.db"))
    yield handle
    handle.close()


# --- the trajectory helper ---------------------------------------------------------------------

def visible(values: dict) -> dict:
    """A state as the user sees it: without Burr's internal keys (__SEQUENCE_ID, __PRIOR_STEP)."""
    return {k: v for k, v in values.items() if not k.startswith("__")}


@dataclasses.dataclass
class Trajectory:
    nodes: list
    states: list  # the visible state after each step
    halted: bool = False  # the last turn stopped at a halt condition (not at the graph's end)


def burr_trajectory(graph, entrypoint: str, state: dict, turns: list) -> Trajectory:
    """What plain Burr computes, driven turn by turn as `app.run(inputs=, halt_after=)` does."""
    app = (ApplicationBuilder().with_graph(graph).with_entrypoint(entrypoint)
           .with_state(**copy.deepcopy(state)).build())
    uses_async = any(a.is_async() for a in graph.actions)
    out = Trajectory([], [])
    for inputs, halt_after in turns:
        out.halted = False
        while app.get_next_action() is not None:
            step = asyncio.run(app.astep(inputs=inputs)) if uses_async else app.step(inputs=inputs)
            out.nodes.append(step[0].name)
            # by value: an action mutating a nested value must not rewrite earlier snapshots
            out.states.append(copy.deepcopy(visible(app.state.get_all())))
            if halt_after and step[0].name in halt_after:
                out.halted = True
                break
        if not out.halted:
            break  # the graph ended: later turns have nothing to run
    return out


def _show(value) -> str:
    text = repr(value)
    text = text if len(text) <= 120 else text[:117] + "..."
    return f"{text} ({len(value)} items)" if isinstance(value, (list, dict)) else text


def assert_same_trajectory(rw: Rewind, run, expected: Trajectory) -> None:
    """Rewind's run took Burr's steps and held Burr's state after every one of them."""
    nodes = [s.node for s in run.steps]
    assert nodes == expected.nodes, (
        f"run {run.id} ({run.status}, error={run.error!r}) took {nodes}; Burr took {expected.nodes}"
    )
    for i, (step, want) in enumerate(zip(run.steps, expected.states)):
        raw = rw.state_at(step)
        got = visible(raw) if raw is not None else None
        if got == want:
            continue
        if got is None:
            pytest.fail(f"step {i} ({step.node}#{step.occurrence}, {step.status}) has no saved state")
        missing = object()
        keys = sorted(k for k in set(got) | set(want) if got.get(k, missing) != want.get(k, missing))
        pytest.fail(
            f"state after step {i} ({step.node}#{step.occurrence}, {step.status}) differs from "
            f"Burr's in {keys}: " + "; ".join(
                f"{k}: rewind={_show(got.get(k, '<absent>'))} burr={_show(want.get(k, '<absent>'))}"
                for k in keys
            )
        )


def run_turns(rw: Rewind, app: App, pipeline=None):
    """`rw.run` for the first turn, `rw.resume` for each later one; the whole run at the end."""
    pipeline = pipeline or app.pipeline()
    (inputs, halt_after), *later = app.turns
    run = rw.run(pipeline, copy.deepcopy(app.state), **turn_kwargs(inputs, halt_after))
    for inputs, halt_after in later:
        assert run.status == "halted", f"{app.name}: a turn ended {run.status}: {run.error}"
        run = rw.resume(run.id, **turn_kwargs(inputs, halt_after))
    return rw.get_run(run.id)


def turn_kwargs(inputs, halt_after) -> dict:
    """Only what a turn sets: an app with no inputs and no halt runs as `rw.run(p, state)`."""
    return {k: v for k, v in (("inputs", inputs), ("halt_after", halt_after)) if v is not None}


def nth_index(nodes: list, node: str, occurrence: int) -> int:
    return [i for i, n in enumerate(nodes) if n == node][occurrence - 1]


# --- the three checks, run on every app --------------------------------------------------------

def check_matches_burr(rw: Rewind, app: App) -> None:
    expected = burr_trajectory(app.graph, app.entrypoint, app.state, app.turns)
    run = run_turns(rw, app)
    assert run.status == ("halted" if expected.halted else "completed"), (
        f"{app.name}: run {run.id} is {run.status}: {run.error}"
    )
    assert_same_trajectory(rw, run, expected)


def check_no_edit_fork(rw: Rewind, app: App) -> None:
    run = run_turns(rw, app)
    assert run.status in ("completed", "halted"), f"{app.name}: run {run.status}: {run.error}"
    CALLS.clear()
    fork = rw.fork(run.id, at=app.mid, occurrence=app.mid_occurrence)
    assert fork.status == run.status, f"{app.name}: fork {fork.status}: {fork.error}"
    assert CALLS == [], f"a no-edit fork of {app.name} at {app.mid} called {CALLS}"
    assert fork.total_tokens == 0
    assert [(s.node, s.output_hash) for s in fork.steps] == [(s.node, s.output_hash) for s in run.steps]


def check_edit(rw: Rewind, app: App) -> None:
    parent = burr_trajectory(app.graph, app.entrypoint, app.state, app.turns)
    run = run_turns(rw, app)
    assert run.status in ("completed", "halted"), f"{app.name}: run {run.status}: {run.error}"
    CALLS.clear()
    fork = rw.fork(run.id, at=app.edit_at, edit=app.edit, occurrence=app.edit_occurrence)
    executed = [s.node for s in fork.steps if s.status == "executed"]
    assert executed == app.executed_after_edit, (
        f"{app.name}: the edit of {sorted(app.edit)} at {app.edit_at} re-executed {executed} "
        f"(fork {fork.status}, error={fork.error!r})"
    )
    # the fork's whole trajectory is Burr's: the parent's prefix, then Burr from the edited state
    index = nth_index(parent.nodes, app.edit_at, app.edit_occurrence)
    before = parent.states[index - 1] if index else app.state
    rest = burr_trajectory(app.graph, app.edit_at, {**before, **app.edit}, app.turns[app.edit_turn:])
    assert fork.status == ("halted" if rest.halted else "completed"), fork.error
    assert_same_trajectory(rw, fork, Trajectory(parent.nodes[:index] + rest.nodes,
                                                 parent.states[:index] + rest.states, rest.halted))


@pytest.mark.parametrize("name", list(APPS))
def test_state_matches_burr_after_every_step(rw, name):
    check_matches_burr(rw, APPS[name]())


@pytest.mark.parametrize("name", list(APPS))
def test_no_edit_fork_calls_nothing_and_matches_every_hash(rw, name):
    check_no_edit_fork(rw, APPS[name]())


@pytest.mark.parametrize("name", list(APPS))
def test_edit_reexecutes_exactly_the_dependent_steps(rw, name):
    check_edit(rw, APPS[name]())


# --- what the issue saw, one test each ---------------------------------------------------------

def test_collatz_history_has_burrs_111_entries(rw):
    app = burr_apps.collatz_app()
    run = run_turns(rw, app)
    assert run.status == "completed", run.error
    history = rw.state_at(run.steps[-1])["n_history"]
    assert len(history) == 111 and history[:3] == [27, 82, 41]


def test_result_step_records_its_outputs(rw):
    run = run_turns(rw, burr_apps.counter_app("burr"))
    assert run.status == "completed", run.error
    result = run.steps[-1]
    assert result.node == "result" and result.outputs == {"counter": 10}


def test_map_states_runs_every_item_and_meters_their_tokens(rw):
    run = run_turns(rw, burr_apps.hypotheses_app())
    assert run.status == "completed", run.error
    assert CALLS.count("run_hypothesis") == 3
    step = run.step("hypotheses")
    outputs = step.outputs["diagnosis_outputs"]
    assert [d["hypothesis"] for d in outputs] == burr_apps.HYPOTHESES
    assert step.tokens > 0  # the three sub-application calls are this step's spend


def test_runtime_inputs_are_part_of_the_key(rw):
    app = burr_apps.counter_app("class")
    first = run_turns(rw, app)
    assert first.status == "completed", first.error
    CALLS.clear()
    by_two = dataclasses.replace(app, turns=[({"increment_by": 2}, None)])
    second = run_turns(rw, by_two)
    assert second.status == "completed", second.error
    assert second.steps[0].status == "executed"  # increment_by=2 is not increment_by=1's hit
    assert second.steps[0].input_hash != first.steps[0].input_hash
    assert_same_trajectory(rw, second, burr_trajectory(app.graph, "counter", {"counter": 0}, by_two.turns))


def test_class_based_action_params_are_forkable(rw):
    app = burr_apps.counter_app("class")
    run = run_turns(rw, app)
    assert run.status == "completed", run.error
    fork = rw.fork(run.id, at="counter", params={"increment_by": 2})
    assert fork.status == "completed", fork.error
    expected = burr_trajectory(app.graph, "counter", {"counter": 0}, [({"increment_by": 2}, None)])
    assert_same_trajectory(rw, fork, expected)


class UndeclaredWrite(Action):
    """Reads `x`, writes `y`, and its `update` also sets `field` (2), which it does not declare."""

    def __init__(self, field: str):
        super().__init__()
        self.field = field

    @property
    def reads(self) -> list:
        return ["x"]

    @property
    def writes(self) -> list:
        return ["y"]

    def run(self, state: State, **run_kwargs) -> dict:
        return {"y": state["x"]}

    def update(self, result: dict, state: State) -> State:
        return state.update(y=result["y"], **{self.field: 2})


def test_a_class_action_that_adds_an_undeclared_field_fails_as_in_burr(rw):
    """Burr's `_run_reducer` refuses a class action's `update` that adds a field it does not
    declare; under Rewind the run fails the same way, not quietly without the field. A field
    already in the state it may set, as Burr lets it."""

    for field, state in (("extra", {"x": 1}), ("other", {"x": 1, "other": 0})):
        graph = GraphBuilder().with_actions(a=UndeclaredWrite(field)).build()
        app = ApplicationBuilder().with_graph(graph).with_entrypoint("a").with_state(**state).build()
        if field == "extra":
            with pytest.raises(ValueError, match="did not declare") as burr_error:
                app.step()
            run = rw.run(rewind.Pipeline(f"undeclared-{field}", graph, "a"), dict(state))
            assert run.status == "failed" and str(burr_error.value) in run.error
        else:
            app.step()
            run = rw.run(rewind.Pipeline(f"undeclared-{field}", graph, "a"), dict(state))
            assert run.status == "completed"
            assert visible(rw.state_at(run.steps[0])) == visible(app.state.get_all()) == {"x": 1, "y": 1, "other": 2}


def test_an_action_whose_run_returns_no_dict_fails_as_in_burr(rw):
    """Burr's `_validate_result` refuses a result that is not a dict (a class action's `run`
    returning 5, a list, a string, None; an async one too): under Rewind the run fails with
    Burr's message, not quietly with the value written (a stranger's find)."""
    class Returns(Action):
        def __init__(self, value, later=False):
            super().__init__()
            self._value, self._later = value, later

        @property
        def reads(self) -> list:
            return ["a"]

        @property
        def writes(self) -> list:
            return ["b"]

        def run(self, state: State, **run_kwargs):
            if self._later:  # a coroutine, as an async run returns
                async def later():
                    return self._value
                return later()
            return self._value

        def update(self, result, state: State) -> State:
            return state.update(b=result)

    for i, (value, later) in enumerate([(5, False), ([1, 2], False), ("text", False),
                                        (None, False), (3, True)]):
        graph = GraphBuilder().with_actions(n=Returns(value, later)).build()
        if not later:
            app = ApplicationBuilder().with_graph(graph).with_entrypoint("n").with_state(a=1).build()
            with pytest.raises(ValueError, match="non-dict result") as burr_error:
                app.step()
            want = str(burr_error.value)
        else:
            want = "Action n returned a non-dict result: 3. All results must be dictionaries."
        run = rw.run(rewind.Pipeline(f"nondict-{i}", graph, "n"), {"a": 1})
        assert run.status == "failed", (value, run.status)
        assert want in run.error, (want, run.error)
