"""A fork of a multi-turn chat whose edit changes how long a turn is (found by a stranger on
Burr's multi-modal chatbot): the fork replays every later turn as its own `run(halt_after=,
inputs=)` call, so it ends where plain Burr ends. Before, it stopped at the parent's step
count: a longer turn left the fork halted mid-turn (last node `decide_mode`, one message
short), a shorter one ran into a turn nobody asked for.

The app is `examples/multi-modal-chatbot/application.py` with the model calls made offline:
an unsafe prompt takes 4 steps to `response`, a safe one 6. The reference is plain Burr driven
turn by turn, the edit applied to its state just before the forked visit."""

from __future__ import annotations

import copy

import pytest
from burr.core import ApplicationBuilder, State, default, when
from burr.core.action import action
from burr.core.graph import GraphBuilder

from rewind import Pipeline, Rewind
from tests.test_burr_fidelity import Trajectory, assert_same_trajectory, visible

MODES = {"answer_question": "text", "generate_image": "image", "generate_code": "code"}
HALT = ["response"]
TURNS = ["Who was Aaron Burr, sir?", "draw a picture of a cat",
         "unsafe: how do I pick a lock?", "what is the capital of France"]


@action(reads=[], writes=["chat_history", "prompt"])
def process_prompt(state: State, prompt: str) -> State:
    item = {"role": "user", "content": prompt, "type": "text"}
    return state.wipe(keep=["prompt", "chat_history"]).append(chat_history=item).update(prompt=prompt)


@action(reads=[], writes=["has_openai_key"])
def check_openai_key(state: State) -> State:
    return state.update(has_openai_key=True)


@action(reads=["prompt"], writes=["safe"])
def check_safety(state: State) -> State:
    return state.update(safe="unsafe" not in state["prompt"])


@action(reads=["prompt"], writes=["mode"])
def choose_mode(state: State) -> State:
    text = state["prompt"].lower()
    mode = ("generate_image" if "picture" in text else "generate_code" if "code" in text
            else "answer_question" if "?" in text or "what" in text else "unknown")
    return state.update(mode=mode)


@action(reads=["prompt", "chat_history"], writes=["response"])
def prompt_for_more(state: State) -> State:
    return state.update(response={"content": "Please clarify?", "type": "text", "role": "assistant"})


@action(reads=["prompt", "chat_history", "mode"], writes=["response"])
def chat_response(state: State, prepend_prompt: str) -> State:
    asked = f"{prepend_prompt}: {state['chat_history'][-1]['content']}"
    content = f"[{len(state['chat_history'])} messages] answer to {asked!r}"
    return state.update(response={"content": content, "type": MODES[state["mode"]], "role": "assistant"})


@action(reads=["prompt", "chat_history", "mode"], writes=["response"])
def image_response(state: State) -> State:
    url = f"https://images.example/{abs(hash(state['prompt'])) % 10_000}.png"
    return state.update(response={"content": url, "type": "image", "role": "assistant"})


@action(reads=["response", "mode", "safe", "has_openai_key"], writes=["chat_history"])
def response(state: State) -> State:
    if not state["safe"]:
        item = {"role": "assistant", "content": "I'm sorry, I can't respond to that.", "type": "error"}
    else:
        item = state["response"]
    return state.append(chat_history=item)


def chatbot_graph():
    return (
        GraphBuilder()
        .with_actions(
            prompt=process_prompt, check_openai_key=check_openai_key, check_safety=check_safety,
            decide_mode=choose_mode, generate_image=image_response,
            generate_code=chat_response.bind(prepend_prompt="Respond with only code"),
            answer_question=chat_response.bind(prepend_prompt="Please answer the following question"),
            prompt_for_more=prompt_for_more, response=response,
        )
        .with_transitions(
            ("prompt", "check_openai_key", default),
            ("check_openai_key", "check_safety", when(has_openai_key=True)),
            ("check_openai_key", "response", default),
            ("check_safety", "decide_mode", when(safe=True)),
            ("check_safety", "response", default),
            ("decide_mode", "generate_image", when(mode="generate_image")),
            ("decide_mode", "generate_code", when(mode="generate_code")),
            ("decide_mode", "answer_question", when(mode="answer_question")),
            ("decide_mode", "prompt_for_more", default),
            (["generate_image", "answer_question", "generate_code", "prompt_for_more"], "response"),
            ("response", "prompt", default),
        )
        .build()
    )


def burr_with_edit(graph, turns: list, at: str = "", occurrence: int = 0, edit=None) -> Trajectory:
    """Plain Burr, one `step(inputs=)` loop per turn halting after `response`; `edit` written
    into its state just before the `occurrence`-th visit of `at` (what a fork there changes)."""
    app = (ApplicationBuilder().with_graph(graph).with_entrypoint("prompt")
           .with_state(chat_history=[]).build())
    out, seen = Trajectory([], []), 0
    for text in turns:
        out.halted = False
        while app.get_next_action() is not None:
            if app.get_next_action().name == at:
                seen += 1
                if seen == occurrence:
                    app.update_state(app.state.update(**edit))
            step = app.step(inputs={"prompt": text})
            out.nodes.append(step[0].name)
            out.states.append(copy.deepcopy(visible(app.state.get_all())))
            if step[0].name in HALT:
                out.halted = True
                break
    return out


@pytest.fixture
def recorded(store_url):
    """The four-turn chat recorded as Burr's example drives it: `run`, then `resume` per turn."""
    graph = chatbot_graph()
    with Rewind(store_url) as rw:
        run = rw.run(Pipeline("multi-modal-chatbot", graph, "prompt"), {"chat_history": []},
                     inputs={"prompt": TURNS[0]}, halt_after=HALT)
        for text in TURNS[1:]:
            assert run.status == "halted", run.error
            run = rw.resume(run.id, inputs={"prompt": text}, halt_after=HALT)
        yield rw, graph, rw.get_run(run.id)


def test_the_recorded_chat_is_plain_burrs(recorded):
    rw, graph, run = recorded
    assert run.status == "halted"
    assert_same_trajectory(rw, run, burr_with_edit(graph, TURNS))
    assert len(run.steps) == 6 + 6 + 4 + 6


def test_a_fork_whose_edit_lengthens_a_turn_still_runs_every_later_turn_to_its_end(recorded):
    rw, graph, run = recorded
    edit = {"prompt": "how do I pick a lock?"}  # turn 3 is now safe: 6 steps, not 4
    fork = rw.fork(run.id, at="check_safety", occurrence=3, edit=edit)
    expected = burr_with_edit(graph, TURNS, "check_safety", 3, edit)
    assert fork.status == "halted", fork.error
    assert len(expected.nodes) == 24 and expected.nodes[-1] == "response"
    assert_same_trajectory(rw, fork, expected)
    history = rw.state_at(fork.steps[-1])["chat_history"]
    assert len(history) == 8 and history[-2]["content"] == TURNS[3]


def test_a_fork_whose_edit_shortens_a_turn_stops_after_the_last_recorded_turn(recorded):
    rw, graph, run = recorded
    edit = {"prompt": "unsafe: who was Aaron Burr?"}  # turn 1 is now refused: 4 steps, not 6
    fork = rw.fork(run.id, at="check_safety", occurrence=1, edit=edit)
    expected = burr_with_edit(graph, TURNS, "check_safety", 1, edit)
    assert fork.status == "halted", fork.error
    assert len(expected.nodes) == 20
    assert_same_trajectory(rw, fork, expected)
    assert [s.node for s in fork.steps].count("prompt") == 4  # no fifth turn nobody asked for


def test_a_fork_of_such_a_fork_and_its_resume_go_on_turn_by_turn(recorded):
    rw, graph, run = recorded
    edit = {"prompt": "how do I pick a lock?"}
    fork = rw.fork(run.id, at="check_safety", occurrence=3, edit=edit)
    again = rw.fork(fork.id, at="decide_mode", occurrence=4)  # no edit: the fork, replayed
    assert again.status == "halted", again.error
    assert [s.node for s in again.steps] == [s.node for s in fork.steps]
    assert again.total_tokens == 0
    assert [s.output_hash for s in again.steps] == [s.output_hash for s in fork.steps]
    more = rw.resume(again.id, inputs={"prompt": "write code for a cat"}, halt_after=HALT)
    expected = burr_with_edit(graph, TURNS + ["write code for a cat"], "check_safety", 3, edit)
    assert more.status == "halted", more.error
    assert_same_trajectory(rw, rw.get_run(more.id), expected)


def test_a_fork_of_a_multi_turn_run_with_a_longer_loop_in_a_turn_feeds_each_turn_its_own_inputs(store_url):
    """Burr gives every step of a `run(inputs=)` call that call's inputs: when an edit makes a
    loop in turn 1 go round more often, the extra visits get turn 1's inputs, not turn 2's."""
    @action(reads=["n"], writes=["n", "log"])
    def grow(state: State, bonus: int) -> State:
        return state.update(n=state["n"] + bonus).append(log=bonus)

    @action(reads=["n"], writes=["n"])
    def rest(state: State) -> State:
        return state.update(n=0)

    graph = (GraphBuilder().with_actions(grow=grow, rest=rest)
             .with_transitions(("grow", "rest", when(n=6)), ("grow", "grow", default),
                               ("rest", "grow", default)).build())

    def burr(edit_n=None) -> Trajectory:
        app = ApplicationBuilder().with_graph(graph).with_entrypoint("grow").with_state(n=0, log=[]).build()
        out = Trajectory([], [])
        for bonus in (2, 3):
            first = True
            while True:
                if first and edit_n is not None and bonus == 2:
                    app.update_state(app.state.update(n=edit_n))
                first = False
                step = app.step(inputs={"bonus": bonus})
                out.nodes.append(step[0].name)
                out.states.append(copy.deepcopy(visible(app.state.get_all())))
                if step[0].name == "rest":
                    break
        return out

    with Rewind(store_url) as rw:
        run = rw.run(Pipeline("loops", graph, "grow"), {"n": 0, "log": []}, inputs={"bonus": 2},
                     halt_after=["rest"])
        run = rw.resume(run.id, inputs={"bonus": 3}, halt_after=["rest"])
        run = rw.get_run(run.id)
        assert_same_trajectory(rw, run, burr())
        fork = rw.fork(run.id, at="grow", occurrence=1, edit={"n": -6})  # turn 1: 6 grows, not 3
        assert fork.status == "halted", fork.error
        assert_same_trajectory(rw, fork, burr(edit_n=-6))
        assert rw.state_at(fork.steps[-1])["log"] == [2] * 6 + [3] * 2


def test_resuming_a_halted_chat_without_inputs_fails_as_burr_does_and_loses_nothing(recorded):
    """Burr's next `run(halt_after=)` without `inputs=` refuses `prompt`'s missing input. Before,
    the resume re-sent the last turn's message, and a resume with no halt either looped until
    the state no longer fit in the database."""
    rw, graph, run = recorded
    app = (ApplicationBuilder().with_graph(graph).with_entrypoint("prompt")
           .with_state(chat_history=[]).build())
    with pytest.raises(ValueError, match="missing required inputs") as burr_error:
        app.step()
    again = rw.resume(run.id, halt_after=HALT)
    assert again.status == "failed"
    assert "missing required inputs" in (again.error or ""), again.error
    assert str(burr_error.value).split(":")[0] in again.error
    assert [s.node for s in rw.get_run(run.id).steps if s.status != "failed"] == \
        [s.node for s in run.steps]
    done = rw.resume(run.id, inputs={"prompt": "write code for a cat"}, halt_after=HALT)
    assert done.status == "halted", done.error
    assert_same_trajectory(rw, rw.get_run(run.id), burr_with_edit(graph, TURNS + ["write code for a cat"]))
