"""Adversarial checks of the stepper (issue 16): served visits against Burr-stepped ones and
against plain Burr, on shapes the fidelity tests do not walk.

Each scenario runs twice, as shipped and with every visit handed to Burr's own step (the path
before the stepper, as tests/test_stepper_fidelity.py does it), and must write the same rows and
Burr states: a fork whose first visit misses and whose later visits hit again (the application
built mid-fork, then hits served into it), forks at the n-th visit inside loops, a class-based
action declaring `__context` with runtime inputs recorded and replayed or replaced, chat turns
with halts, resumes and a side effect dry-run, a failed run forked and resumed at its failed step
(served from the cache at a failed position), async actions, param changes, forks of forks of
forks, halt_before, fields deleted with wipe(delete=) and wipe(keep=). Then every own step of
those forks is checked against plain Burr forking from the same saved state with Burr's own
`initialize_from`.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from burr.core import Action, ApplicationBuilder, ApplicationContext, State, default, expr, when
from burr.core.action import Result, action
from burr.core.graph import GraphBuilder
from burr.core.parallelism import MapStates
from burr.lifecycle import PreRunStepHook

import rewind
from rewind import Rewind
from rewind.store import serde
from rewind.engine import runner, stepper
from rewind.engine.fork import fork_source
from rewind.store import PARTITION_KEY
from tests import shapes
from tests.test_burr_fidelity import visible
from tests.test_stepper_fidelity import burr_steps_everything, spied, trajectory  # noqa: F401 (a fixture)

CALLS: list = []
FAIL = {"at": None}


@pytest.fixture(autouse=True)
def clean():
    CALLS.clear()
    shapes.CALLS.clear()
    FAIL["at"] = None
    yield
    FAIL["at"] = None


# --- apps ----------------------------------------------------------------------------------------
# score -> label -> tally -> scratch -> dropper -> keeper -> out: an edit of `text` to another of
# the same length misses at score only; label appends to a field, tally increments a field it
# writes but does not read, dropper deletes a field, keeper keeps only two, out writes nothing.

@action(reads=["text"], writes=["score"])
def score(state):
    CALLS.append("score")
    return state.update(score=len(state["text"]))


@action(reads=["score"], writes=["label", "log"])
def label(state):
    CALLS.append("label")
    return state.update(label="long" if state["score"] > 5 else "short").append(log=state["score"])


@action(reads=["label"], writes=["tally"])
def tally(state):
    CALLS.append("tally")
    return state.increment(tally=1)


@action(reads=["label", "log"], writes=["scratch"])
def scratch(state):
    CALLS.append("scratch")
    return state.update(scratch=list(state["log"]))


@action(reads=["scratch"], writes=[])
def dropper(state):
    CALLS.append("dropper")
    return state.wipe(delete=["scratch"])


@action(reads=["label", "tally"], writes=["label", "tally"])
def keeper(state):
    CALLS.append("keeper")
    return state.wipe(keep=["label", "tally"])


def chain() -> rewind.Pipeline:
    graph = (GraphBuilder()
             .with_actions(score=score, label=label, tally=tally, scratch=scratch, dropper=dropper,
                           keeper=keeper, out=Result("label", "tally"))
             .with_transitions(("score", "label"), ("label", "tally"), ("tally", "scratch"),
                               ("scratch", "dropper"), ("dropper", "keeper"), ("keeper", "out"))
             .build())
    return rewind.Pipeline("adv-chain", graph, "score")


class Counter(Action):
    """A class-based action in a loop: a runtime input, and Burr's `__context` (its sequence
    id lands in the state, so a re-executed visit shows how Burr numbered it)."""

    @property
    def reads(self) -> list:
        return ["counter"]

    @property
    def writes(self) -> list:
        return ["counter", "seqs"]

    @property
    def inputs(self) -> list:
        return ["increment_by", "__context"]

    def run(self, state: State, increment_by: int, __context: ApplicationContext) -> dict:
        CALLS.append("counter")
        return {"counter": state["counter"] + increment_by, "seq": __context.sequence_id}

    def update(self, result: dict, state: State) -> State:
        return state.update(counter=result["counter"]).append(seqs=result["seq"])


@action(reads=["counter"], writes=["note"])
def note(state: State, __context: ApplicationContext) -> State:
    CALLS.append("note")
    return state.update(note=f"c={state['counter']} seq={__context.sequence_id}")


def counter_loop() -> rewind.Pipeline:
    graph = (GraphBuilder().with_actions(counter=Counter(), note=note)
             .with_transitions(("counter", "counter", expr("counter < 10")), ("counter", "note"))
             .build())
    return rewind.Pipeline("adv-counter", graph, "counter")


@action(reads=[], writes=["prompt", "history"])
def human(state: State, user_input: str) -> State:
    CALLS.append("human")
    return state.update(prompt=user_input).append(history=user_input)


@action(reads=["prompt"], writes=["safe"])
def safety(state: State) -> State:
    CALLS.append("safety")
    return state.update(safe="bad" not in state["prompt"])


@action(reads=["history"], writes=["reply", "history"])
def ai(state: State) -> State:
    CALLS.append("ai")
    reply = f"echo {len(state['history'])}: {state['history'][-1]}"
    return state.update(reply=reply).append(history=reply)


@action(reads=[], writes=["reply", "history"])
def refuse(state: State) -> State:
    CALLS.append("refuse")
    return state.update(reply="no").append(history="no")


@rewind.action(reads=["reply"], writes=["sent"], determinism="side-effect")
def send(state: State) -> State:
    CALLS.append("send")
    return state.update(sent=state["reply"])


def chat() -> rewind.Pipeline:
    graph = (GraphBuilder().with_actions(human=human, safety=safety, ai=ai, refuse=refuse, send=send)
             .with_transitions(("human", "safety"), ("safety", "refuse", when(safe=False)),
                               ("safety", "ai", default), (["ai", "refuse"], "send"),
                               ("send", "human"))
             .build())
    return rewind.Pipeline("adv-chat", graph, "human")


@action(reads=["n"], writes=["n", "hist"])
def step_n(state: State) -> State:
    CALLS.append("step_n")
    if FAIL["at"] == state["n"]:
        raise RuntimeError(f"boom at {state['n']}")
    return state.update(n=state["n"] - 1).append(hist=state["n"])


@action(reads=["hist"], writes=["total"])
def total(state: State) -> State:
    CALLS.append("total")
    return state.update(total=sum(state["hist"]))


def countdown() -> rewind.Pipeline:
    graph = (GraphBuilder().with_actions(step_n=step_n, total=total)
             .with_transitions(("step_n", "step_n", expr("n > 0")), ("step_n", "total")).build())
    return rewind.Pipeline("adv-countdown", graph, "step_n")


@action(reads=["x"], writes=["y"])
async def aplus(state: State) -> State:
    CALLS.append("aplus")
    await asyncio.sleep(0)
    return state.update(y=state["x"] + 1)


@rewind.action(reads=["y"], writes=["z"])
def times(state: State, factor: int = 2) -> State:
    CALLS.append("times")
    return state.update(z=state["y"] * factor)


@action(reads=["z"], writes=["w"])
def tail(state: State) -> State:
    CALLS.append("tail")
    return state.update(w=state["z"] % 3)


def asyncish() -> rewind.Pipeline:
    graph = (GraphBuilder().with_actions(aplus=aplus, times=times, tail=tail)
             .with_transitions(("aplus", "times"), ("times", "tail")).build())
    return rewind.Pipeline("adv-async", graph, "aplus")


# warm -> effect -> after: on a fork allowed side effects, warm is served (no application yet),
# effect executes (the application is built for it, and numbers it in its __context), after is
# served again into the built application.

@action(reads=["seed"], writes=["warmed"])
def warm(state: State) -> State:
    CALLS.append("warm")
    return state.update(warmed=state["seed"] * 2)


@rewind.action(reads=["warmed"], writes=["stamp"], determinism="side-effect")
def effect(state: State, __context: ApplicationContext) -> State:
    CALLS.append("effect")
    return state.update(stamp=[state["warmed"], __context.sequence_id % 1])


@action(reads=["stamp", "rounds"], writes=["done", "seen", "rounds"])
def after(state: State) -> State:
    CALLS.append("after")
    return (state.update(done=sum(state["stamp"]), rounds=state["rounds"] + 1)
            .append(seen=state["stamp"][0]))


def effects_ctx() -> rewind.Pipeline:
    graph = (GraphBuilder().with_actions(warm=warm, effect=effect, after=after)
             .with_transitions(("warm", "effect"), ("effect", "after"), ("after", "warm", expr("rounds < 3")))
             .build())
    return rewind.Pipeline("adv-effects", graph, "warm")


def sc_effects(rw):
    p = effects_ctx()
    base = rw.run(p, {"seed": 5, "seen": [], "rounds": 0})
    out = [("base", base)]
    out.append(("dry", rw.fork(base.id, at="warm")))
    out.append(("allowed", rw.fork(base.id, at="warm", allow_side_effects=True)))
    out.append(("allowed at 2", rw.fork(base.id, at="after", occurrence=2, allow_side_effects=True)))
    out.append(("edit", rw.fork(base.id, at="warm", occurrence=2, edit={"seed": 30})))
    return out


# --- scenarios: (label, run) of every run each one writes ----------------------------------------

def sc_miss_then_hits(rw):
    p = chain()
    base = rw.run(p, {"text": "abcdefgh"})
    same = rw.fork(base.id, at="score", edit={"text": "zyxwvuts"})  # misses once, then hits
    short = rw.fork(base.id, at="score", edit={"text": "ab"})
    again = rw.fork(short.id, at="label")
    longer = rw.fork(again.id, at="score", edit={"text": "abcdefghij"})  # hits, misses, hits
    last = rw.fork(longer.id, at="tally")
    return [("base", base), ("same", same), ("short", short), ("again", again),
            ("longer", longer), ("last", last)]


def sc_counter(rw):
    p = counter_loop()
    base = rw.run(p, {"counter": 0, "seqs": []}, inputs={"increment_by": 3})
    out = [("base", base)]
    for occ in (1, 2, 4):
        out.append((f"at{occ}", rw.fork(base.id, at="counter", occurrence=occ)))
    out.append(("inputs", rw.fork(base.id, at="counter", occurrence=2, inputs={"increment_by": 4})))
    out.append(("edit", rw.fork(base.id, at="counter", occurrence=3, edit={"counter": 5})))
    out.append(("note", rw.fork(base.id, at="note")))
    return out


def sc_chat(rw):
    p = chat()
    c = rw.run(p, {"history": []}, inputs={"user_input": "hi"}, halt_after=["send"])
    c = rw.resume(c.id, inputs={"user_input": "bad thing"}, halt_after=["send"])
    c = rw.resume(c.id, inputs={"user_input": "again"}, halt_after=["send"])
    out = [("base", c)]
    for at, occ in (("safety", 2), ("human", 3), ("send", 1), ("ai", 2)):
        out.append((f"{at}{occ}", rw.fork(c.id, at=at, occurrence=occ)))
    inp = rw.fork(c.id, at="human", occurrence=2, inputs={"user_input": "fine now"})
    out.append(("inputs", inp))
    out.append(("inputs+turn", rw.resume(inp.id, inputs={"user_input": "more"}, halt_after=["send"])))
    out.append(("effects", rw.fork(c.id, at="safety", allow_side_effects=True)))
    edit = rw.fork(c.id, at="ai", edit={"history": ["other"]})
    out.append(("edit", edit))
    turn = rw.resume(edit.id, inputs={"user_input": "bad again"}, halt_after=["send"])
    out.append(("edit+turn", turn))
    out.append(("edit+turn fork", rw.fork(turn.id, at="human", occurrence=4)))
    return out


def sc_failed(rw):
    p = countdown()
    FAIL["at"] = 3
    failed = rw.run(p, {"n": 5, "hist": []})
    FAIL["at"] = None
    out = [("failed", failed)]
    out.append(("fork at failed", rw.fork(failed.id, at="step_n", occurrence=3)))  # executes
    # the same visit again: a hit served at the failed position (Burr starts *at* it)
    out.append(("fork at failed, served", rw.fork(failed.id, at="step_n", occurrence=3)))
    out.append(("fork at failed, edit", rw.fork(failed.id, at="step_n", occurrence=3, edit={"n": 2})))
    out.append(("fork before", rw.fork(failed.id, at="step_n", occurrence=2)))
    resumed = rw.resume(failed.id)  # served from the forks' cache entries
    out.append(("resumed", resumed))
    out.append(("resumed fork", rw.fork(resumed.id, at="step_n", occurrence=4)))
    out.append(("resumed fork total", rw.fork(resumed.id, at="total")))
    out.append(("resumed fork edit", rw.fork(resumed.id, at="step_n", occurrence=2, edit={"n": 1})))
    out.append(("no cache", rw.fork(resumed.id, at="step_n", occurrence=3, use_cache=False)))
    return out


def sc_async_params(rw):
    p = asyncish()
    base = rw.run(p, {"x": 1})
    params = rw.fork(base.id, at="times", params={"factor": 3})
    nofork = rw.fork(params.id, at="aplus")  # keeps the param change: all hits
    edit = rw.fork(params.id, at="aplus", edit={"x": 4})
    return [("base", base), ("params", params), ("params again", nofork), ("edit", edit),
            ("edit fork", rw.fork(edit.id, at="tail"))]


def sc_loop_lineage(rw):
    p = shapes.loop()
    base = rw.run(p, {"goal": "x"})
    a = rw.fork(base.id, at="improve", occurrence=2, params={"suffix": "!"})
    b = rw.fork(a.id, at="improve", occurrence=1)
    c = rw.fork(b.id, at="improve", occurrence=3, edit={"draft": "zz"})
    d = rw.fork(c.id, at="start", edit={"goal": "y"})
    e = rw.fork(d.id, at="improve", occurrence=2)
    halted = rw.run(p, {"goal": "q"}, halt_before=["done"])
    hf = rw.fork(halted.id, at="improve", occurrence=2)  # stops where its parent stopped
    return [("base", base), ("a", a), ("b", b), ("c", c), ("d", d), ("e", e),
            ("halted", halted), ("halted fork", hf), ("halted fork resumed", rw.resume(hf.id)),
            ("halted resumed", rw.resume(halted.id))]


def sc_linear_effects(rw):
    p = shapes.linear()
    base = rw.run(p, {"topic": "bees"})
    params = rw.fork(base.id, at="plan", params={"temperature": 0.3})
    effects = rw.fork(params.id, at="plan", allow_side_effects=True)
    return [("base", base), ("params", params), ("params fork", rw.fork(params.id, at="stats")),
            ("effects", effects), ("effects fork", rw.fork(effects.id, at="publish"))]


SCENARIOS = {
    "miss-then-hits": sc_miss_then_hits, "counter": sc_counter, "chat": sc_chat,
    "failed": sc_failed, "async-params": sc_async_params, "loop-lineage": sc_loop_lineage,
    "linear-effects": sc_linear_effects, "effects": sc_effects,
}


def written(rw: Rewind, runs: list) -> list:
    """What each run wrote (rows, Burr states), what its returned Run said, and what ran."""
    out = []
    for label, run in runs:
        stored = rw.get_run(run.id)
        out.append((label, str(run.status), str(stored.status), run.error is None,
                     trajectory(rw, run),
                     [(s.node, s.occurrence, str(s.status), s.sequence_id, s.input_hash,
                       s.output_hash) for s in run.steps],
                     [(s.node, s.occurrence, str(s.status), s.sequence_id) for s in stored.steps]))
    return out


def play(rw: Rewind, name: str) -> tuple:
    CALLS.clear()
    shapes.CALLS.clear()
    runs = SCENARIOS[name](rw)
    return runs, written(rw, runs), list(CALLS) + list(shapes.CALLS)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_served_visits_write_what_burrs_steps_write(tmp_path, monkeypatch, name):
    with Rewind(str(tmp_path / "served.db")) as rw:
        runs, served, served_calls = play(rw, name)
    statuses = {str(s.status) for _, r in runs for s in r.steps}
    assert "cached" in statuses and "executed" in statuses, f"{name}: nothing served or executed"
    burr_steps_everything(monkeypatch)
    with Rewind(str(tmp_path / "stepped.db")) as rw:
        _, stepped, stepped_calls = play(rw, name)
    assert served_calls == stepped_calls, f"{name}: other nodes ran"
    assert len(served) == len(stepped)
    for a, b in zip(served, stepped):
        assert a == b, f"{name}, run {a[0]!r}: served and Burr-stepped differ"
    last = {run.id: label for label, run in runs}  # a run resumed later changed since
    for (label, status, stored_status, *_), (_, run) in zip(served, runs):
        if last[run.id] == label:
            assert status == stored_status, f"{name}, {label}: the returned Run says {status}"


# --- against plain Burr: every own step of every fork is what Burr's own fork computes ---------

def assert_burr_forks_alike(rw: Rewind, pipeline: rewind.Pipeline, fork) -> None:
    """Plain Burr, forked with `initialize_from` from the state the fork started from (its
    edit as `override_state_values`), stepped with the inputs each step recorded: the state
    after each of the fork's own steps is Burr's."""
    row = rw.store.get_run_row(fork.id)
    parent = rw.store.get_run_row(row["parent_id"])
    parent_steps = rw.get_run(parent["id"]).steps
    own = [s for s in fork.steps if str(s.status) != "inherited"]
    if not own:
        return
    index = own[0].index
    source_app, source_seq = fork_source(rw.store, parent, parent_steps, index)
    edit = serde.decode(row["edit_json"].encode("utf-8")) if row["edit_json"] else None
    app = (ApplicationBuilder().with_graph(pipeline.graph)
           .initialize_from(rw.store.persister(), resume_at_next_action=True, default_state={},
                            default_entrypoint=pipeline.entrypoint, fork_from_app_id=source_app,
                            fork_from_partition_key=PARTITION_KEY,
                            fork_from_sequence_id=source_seq, override_state_values=edit)
           .with_identifiers(app_id=f"plain-{fork.id}", partition_key=PARTITION_KEY).build())
    assert app.parent_pointer is not None, f"Burr found no state {source_app}@{source_seq}"
    params = json.loads(row["params_json"]) if row["params_json"] else {}
    for s in own:
        assert app.get_next_action().name == s.node, f"fork {fork.id}: Burr goes elsewhere at {s.index}"
        if s.node in params:  # Burr does not know Rewind's params: check the step's own state
            break
        if str(s.status) == "dry-run":  # a side effect Rewind did not perform
            break
        inputs = s.runtime_inputs
        _, _, state = app.step(inputs=inputs or None)
        assert app.sequence_id == s.sequence_id, f"fork {fork.id} step {s.index}: numbered differently"
        assert visible(rw.state_at(s)) == visible(state.get_all()), (
            f"fork {fork.id} step {s.index} ({s.node}#{s.occurrence}, {s.status}) holds another state")


@pytest.mark.parametrize("name,make", [("miss-then-hits", chain), ("counter", counter_loop),
                                       ("failed", countdown), ("loop-lineage", shapes.loop),
                                       ("effects", effects_ctx)])
def test_every_fork_holds_what_plain_burr_forking_computes(tmp_path, name, make):
    pipeline = make()
    with Rewind(str(tmp_path / "r.db")) as rw:
        runs = SCENARIOS[name](rw)
        checked = 0
        for label, run in runs:
            if rw.store.get_run_row(run.id)["parent_id"] and run.pipeline == pipeline.name:
                assert_burr_forks_alike(rw, pipeline, rw.get_run(run.id))
                checked += 1
        assert checked >= 3


def test_a_transition_edit_is_refused_and_writes_nothing(tmp_path):
    with Rewind(str(tmp_path / "r.db")) as rw:
        base = rw.run(countdown(), {"n": 4, "hist": []})
        before = rw.count_runs()
        with pytest.raises(rewind.ForkError, match="would resume at 'total', not 'step_n'"):
            rw.fork(base.id, at="step_n", occurrence=2, edit={"n": 0})
        assert rw.count_runs() == before


def test_a_fork_built_mid_way_numbers_and_resumes_as_burr(tmp_path, monkeypatch):
    """The application is built at the fork's first miss, after served visits: it numbers its
    steps after them, the served visits after it go into it, and Burr resumes from any step."""
    built = []
    real = stepper.Stepper.burr_app
    monkeypatch.setattr(stepper.Stepper, "burr_app",
                        lambda self: (self.app is None and built.append(len(self.ctx.steps)))
                        or real(self))
    with Rewind(str(tmp_path / "r.db")) as rw:
        runs = dict(sc_miss_then_hits(rw))
        longer = rw.get_run(runs["longer"].id)
        assert [str(s.status) for s in longer.steps] == [
            "executed", "executed", "cached", "executed", "executed", "cached", "cached"]
        assert [s.sequence_id for s in longer.steps] == list(range(7))
        assert visible(rw.state_at(longer.steps[-1])) == {"label": "long", "tally": 1}
        last = rw.get_run(runs["last"].id)  # a fork of it, wholly served: never built
        assert [str(s.status) for s in last.steps][2:] == ["cached"] * 5
        assert built, "no fork built an application"
        for s in longer.steps:  # Burr's own fork from each step computes plain Burr's end state
            app = (ApplicationBuilder().with_graph(chain().graph)
                   .initialize_from(rw.store.persister(), resume_at_next_action=True,
                                    default_state={}, default_entrypoint="score",
                                    fork_from_app_id=longer.id, fork_from_partition_key=PARTITION_KEY,
                                    fork_from_sequence_id=s.sequence_id)
                   .with_identifiers(app_id=f"b-{s.index}", partition_key=PARTITION_KEY).build())
            if app.get_next_action() is None:
                continue
            _, _, final = app.run(halt_after=["out"])
            assert visible(final.get_all()) == {"label": "long", "tally": 1}, f"from step {s.index}"


# --- bugs ------------------------------------------------------------------------------------------

class InputsSpy(PreRunStepHook):
    def __init__(self, log: list):
        self.log = log

    def pre_run_step(self, *, action, inputs, sequence_id, app_id, **kw):
        context = inputs.get("__context")
        self.log.append((action.name, sequence_id, sorted(inputs), type(context).__name__))
        if context is not None:  # the context Burr would have handed the action
            self.log.append((context.app_id == app_id, context.partition_key, context.sequence_id,
                             context.action_name, context.tracker,
                             type(context.state_persister).__name__, context.state_initializer,
                             type(context.parallel_executor_factory()).__name__))


def test_served_steps_hand_hooks_the_inputs_burr_injects(tmp_path, monkeypatch):
    """BUG (minor): Burr's `pre_run_step` hears the inputs `_process_inputs` made, `__context`
    (and `__tracer`) included for an action declaring them; a served step hands the hooks the
    inputs without them (stepper.Stepper.step passes `given`)."""
    logs: dict = {}
    original = stepper.burr_hooks

    def hooks(ctx):
        return [*original(ctx), InputsSpy(logs.setdefault(ctx.run_id, []))]

    monkeypatch.setattr(stepper, "burr_hooks", hooks)
    monkeypatch.setattr(runner, "burr_hooks", hooks)
    heard = []
    for stepped in (False, True):
        if stepped:
            burr_steps_everything(monkeypatch)
        with Rewind(str(tmp_path / f"{stepped}.db")) as rw:
            base = rw.run(counter_loop(), {"counter": 0, "seqs": []}, inputs={"increment_by": 3})
            fork = rw.fork(base.id, at="counter", occurrence=2)
            assert {str(s.status) for s in fork.steps} == {"inherited", "cached"}
            # a first run served from the cache: the hits go into the application Burr built
            again = rw.run(counter_loop(), {"counter": 0, "seqs": []}, inputs={"increment_by": 3})
            assert {str(s.status) for s in again.steps} == {"cached"}
            heard.append((logs[fork.id], logs[again.id]))
    served, burr = heard
    assert burr[0][0] == ("counter", 1, ["__context", "increment_by"], "ApplicationContext")
    assert served[0] == burr[0], "a fork's served steps"
    assert served[1] == burr[1], "a first run's served steps"


def test_a_keep_wipe_served_from_the_cache_deletes_what_burr_deletes(tmp_path):
    """Was a bug (older than the stepper): a node returning `state.wipe(keep=[...])` makes
    Burr delete every other field. A hit deleted the fields the *cached* visit deleted, so a
    field the state has now but did not have then (not part of the node's key) survived. The
    entry now keeps the fields the node kept, and a hit deletes every other one."""
    p = chain()
    with Rewind(str(tmp_path / "r.db")) as rw:
        rw.run(p, {"text": "abcdefgh"})
        again = rw.run(p, {"text": "abcdefgh", "extra": 1})
        assert str(again.steps[5].status) == "cached" and again.steps[5].node == "keeper"
        got = visible(rw.state_at(again.steps[5]))
    app = (ApplicationBuilder().with_graph(p.graph).with_entrypoint("score")
           .with_state(text="abcdefgh", extra=1).build())
    for _ in range(6):
        app.step()
    assert got == visible(app.state.get_all()) == {"label": "long", "tally": 1}


# a MapStates node visited more than once in a run (Burr's sub-application ids are stable per
# parent app and item, so the second visit's sub-applications save sequence id 0 again)

@action(reads=["x"], writes=["y"])
def square(state: State) -> State:
    return state.update(y=state["x"] * state["x"])


class SquareAll(MapStates):
    def states(self, state, context, inputs):
        for x in state["xs"]:
            yield state.update(x=x)

    def action(self, state, inputs):
        return square

    def reduce(self, state, states):
        return state.update(ys=[s["y"] for s in states])

    @property
    def reads(self) -> list:
        return ["xs"]

    @property
    def writes(self) -> list:
        return ["ys"]


@action(reads=["xs", "rounds"], writes=["xs", "rounds"])
def bump(state: State) -> State:
    return state.update(xs=[x + 1 for x in state["xs"]], rounds=state["rounds"] + 1)


@action(reads=["ys", "trace"], writes=["trace"])
def log_ys(state: State) -> State:
    return state.update(trace=state["trace"] + [list(state["ys"])])


def map_loop() -> rewind.Pipeline:
    graph = (GraphBuilder()
             .with_actions(square=SquareAll(), log=log_ys, bump=bump, out=Result("trace"))
             .with_transitions(("square", "log"), ("log", "out", expr("rounds >= 3")),
                               ("log", "bump"), ("bump", "square"))
             .build())
    return rewind.Pipeline("adv-map-loop", graph, "square")


def test_map_states_in_a_loop_runs_as_plain_burr(store_url):
    """Was a bug (older than the stepper): the second visit of a MapStates node failed with an
    IntegrityError on Burr's state rows (its sub-applications reuse their ids per parent and
    item). Before the stepper a fork built its application with `initialize_from`, so the
    sub-applications loaded the first visit's state and the fork completed with stale values
    ([[25, 36]] * 4). A sub-application's row now replaces the one at its key."""
    p = map_loop()
    app = (ApplicationBuilder().with_graph(p.graph).with_entrypoint("square")
           .with_state(xs=[1, 2], rounds=0, trace=[]).build())
    _, _, want = app.run(halt_after=["out"])
    assert want["trace"] == [[1, 4], [4, 9], [9, 16], [16, 25]]
    with Rewind(store_url) as rw:
        run = rw.run(p, {"xs": [1, 2], "rounds": 0, "trace": []})
        assert run.status == "completed", run.error
        assert visible(rw.state_at(run.steps[-1]))["trace"] == want["trace"]
        # a fork at the second visit runs its sub-applications again, as plain Burr does
        fork = rw.fork(run.id, at="square", occurrence=2, edit={"xs": [5, 6]})
        assert fork.status == "completed", fork.error
        before = visible(rw.state_at(run.steps[2]))  # after bump#1, the state square#2 got
        plain = (ApplicationBuilder().with_graph(p.graph).with_entrypoint("square")
                 .with_state(**{**before, "xs": [5, 6]}).build())
        _, _, rest = plain.run(halt_after=["out"])
        assert visible(rw.state_at(fork.steps[-1]))["trace"] == rest["trace"] == \
            [[1, 4], [25, 36], [36, 49], [49, 64]]


# --- a visit whose keying raises, served path vs Burr's step -----------------------------------

def test_a_visit_that_fails_while_keyed_is_recorded_as_burrs_step_records_it(tmp_path, monkeypatch,
                                                                            spied):
    """The stepper keys a visit before Burr would have run it: if keying raises, the hooks hear
    of it (a failed step, Burr's failed state row) as they do when Burr's step runs the wrapper."""
    from rewind.engine import replay

    real = replay.ReplayAction._key

    def key(self, ctx, spec, state, occurrence, run_kwargs):
        if spec.node == "counter" and occurrence == 3:
            raise rewind.RewindError("keying failed (injected)", node="counter")
        return real(self, ctx, spec, state, occurrence, run_kwargs)

    out = []
    for stepped in (False, True):
        if stepped:
            burr_steps_everything(monkeypatch)
        with Rewind(str(tmp_path / f"{stepped}.db")) as rw:
            base = rw.run(counter_loop(), {"counter": 0, "seqs": []}, inputs={"increment_by": 3})
            monkeypatch.setattr(replay.ReplayAction, "_key", key)
            fork = rw.fork(base.id, at="counter", occurrence=2)
            monkeypatch.setattr(replay.ReplayAction, "_key", real)
            assert fork.status == "failed" and "injected" in fork.error
            resumed = rw.resume(fork.id)
            out.append((str(fork.status), fork.error, trajectory(rw, fork), spied.get(fork.id),
                        str(resumed.status), trajectory(rw, resumed)))
    assert out[0][:3] == out[1][:3]
    assert out[0][3] == out[1][3], "the hooks heard different calls"
    assert out[0][4:] == out[1][4:]


def test_a_forks_actions_see_the_context_a_first_run_gives_them(tmp_path):
    """Behaviour change, pinned: before the stepper a fork's application was built by
    `initialize_from`, so a node executed in a fork saw `__context.state_initializer` set (Burr's
    MapStates then made its sub-applications `initialize_from` it too); a first run's and a
    resume's never do. Now a fork's node sees what a first run's sees."""

    @action(reads=["x"], writes=["info"])
    def probe(state: State, __context: ApplicationContext) -> State:
        return state.update(info=[state["x"], __context.state_initializer is None,
                                  __context.state_persister is not None, __context.sequence_id])

    graph = GraphBuilder().with_actions(probe=probe).with_transitions().build()
    p = rewind.Pipeline("adv-probe", graph, "probe")
    with Rewind(str(tmp_path / "r.db")) as rw:
        run = rw.run(p, {"x": 1})
        fork = rw.fork(run.id, at="probe", edit={"x": 2})
        assert rw.state_at(run.steps[-1])["info"] == [1, True, True, 0]
        assert rw.state_at(fork.steps[-1])["info"] == [2, True, True, 0]
