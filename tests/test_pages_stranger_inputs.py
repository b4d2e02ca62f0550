"""What a stranger typed into the dashboard that its own tests had not (AppTest, a real store).

Seen in a real browser: a recorded integer past 2**53 shown in a number input was rounded, and
after editing another field Streamlit reset it to 0, so the fork was recorded with
`edit: {"n": 6, "big": 0}` and the node really ran on 0. JSON nested 5,000 deep on the Fork
page or in Start a run showed a RecursionError traceback (the Fork page lost its Replay button).
"""

from __future__ import annotations

import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, action
from tests.test_pages import app, button, goto, ok, texts

BIG = 2**53 + 1  # the first integer a JavaScript number cannot hold


@action(reads=["n", "big", "items"], writes=["total"])
def s_calc(state):
    return state.update(total=state["n"] + state["big"] + len(state["items"]))


@action(reads=["total"], writes=["shown"])
def s_show(state):
    return state.update(shown=str(state["total"]))


PIPELINE = Pipeline(
    name="strangerui",
    graph=GraphBuilder().with_actions(calc=s_calc, show=s_show).with_transitions(("calc", "show")).build(),
    entrypoint="calc",
    sample_state={"n": 5, "big": BIG, "items": [1]},
)
DEEP = "[" * 5000 + "]" * 5000


@pytest.fixture
def rw(tmp_path, monkeypatch):
    url = str(tmp_path / "ui.db")
    monkeypatch.setenv("REWIND_DB", url)
    rewind.register_pipeline(PIPELINE)
    handle = rewind.Rewind(url)
    yield handle
    handle.close()


@pytest.fixture
def root(rw):
    run = rw.run(PIPELINE, {"n": 5, "big": BIG, "items": [1]})
    assert run.status == "completed"
    return run


def _fork_page(root):
    at = ok(app(state={"fork_run": root.id, "fork_node": "calc"}).run())
    return goto(at, "fork")


def test_a_big_integer_is_edited_as_exact_text_and_left_alone_by_an_edit_of_another_field(rw, root):
    at = _fork_page(root)
    key = f"fk:{root.id}:calc:edit:"
    assert not [w for w in at.number_input if w.key == key + "big"], \
        "a number input cannot hold 2**53 + 1 in the browser"
    big = at.text_area(key=key + "big")
    assert big.value == str(BIG)
    at.number_input(key=key + "n").set_value(6)
    ok(at.run())
    button(at, "Replay").click()
    ok(at.run())
    fork = rw.list_runs(limit=1)[0]
    assert fork.parent_id == root.id
    assert fork.edit == {"n": 6}, fork.edit
    full = rw.get_run(fork.id)
    assert rw.state_at(full.steps[-1])["total"] == 6 + BIG + 1


def test_a_big_integer_edit_is_recorded_exactly(rw, root):
    at = _fork_page(root)
    at.text_area(key=f"fk:{root.id}:calc:edit:big").set_value(str(BIG + 2))
    ok(at.run())
    button(at, "Replay").click()
    ok(at.run())
    fork = rw.list_runs(limit=1)[0]
    assert fork.edit == {"big": BIG + 2}


def test_json_nested_too_deeply_on_the_fork_page_is_a_message_and_writes_nothing(rw, root):
    before = rw.count_runs()
    at = _fork_page(root)
    at.text_area(key=f"fk:{root.id}:calc:edit:items").set_value(DEEP)
    ok(at.run())  # no RecursionError traceback
    errors = texts(at.error)
    assert any("items" in e and "nested too deeply" in e for e in errors), errors
    button(at, "Replay").click()
    ok(at.run())
    assert any("Nothing was run or written" in e for e in texts(at.error))
    assert rw.count_runs() == before


def test_an_integer_json_cannot_parse_is_a_message(rw, root):
    at = _fork_page(root)
    at.text_area(key=f"fk:{root.id}:calc:edit:items").set_value("[" + "9" * 5000 + "]")
    ok(at.run())
    assert any("items" in e and "digits" in e for e in texts(at.error)), texts(at.error)


def test_start_a_run_with_json_nested_too_deeply_is_a_message(rw):
    from rewind_ui import runs_view

    state, problem = runs_view.parse_initial_state('{"items": ' + DEEP + "}", PIPELINE)
    assert state is None and "nested too deeply" in problem and "Nothing was run" in problem
    state, problem = runs_view.parse_initial_state('{"n": ' + "9" * 5000 + "}", PIPELINE)
    assert state is None and "digits" in problem


def test_a_big_integer_in_a_steps_state_is_shown_exactly(rw, root):
    at = ok(app(query={"run": root.id, "node": "calc"}).run())
    shown = [c.value for c in at.code]
    assert any(str(BIG) in c for c in shown), "st.json would show 2**53 + 1 as 2**53"
    assert not any(str(BIG) in str(j.value) for j in at.json)
