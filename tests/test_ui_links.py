"""Dashboard links and filters under Streamlit's AppTest: a diff link that names one side keeps
it (and fills only the other), and the Runs page's Status filter offers every run status.
Each test gets its own SQLite file through `REWIND_DB`, as in tests/test_pages.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from burr.core.graph import GraphBuilder
from streamlit.testing.v1 import AppTest

import rewind
from rewind import Pipeline, action

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TIMEOUT = 120


@action(reads=["question"], writes=["plan"])
def l_plan(state, temperature: float = 0.0):
    text = rewind.llm.chat([{"role": "user", "content": "Plan: " + state["question"]}],
                           model="sim-small", temperature=temperature)
    return state.update(plan=text)


@action(reads=["plan"], writes=["answer"])
def l_answer(state):
    return state.update(answer=state["plan"][:40])


PIPELINE = Pipeline(
    name="linktest",
    graph=GraphBuilder().with_actions(plan=l_plan, answer=l_answer)
    .with_transitions(("plan", "answer")).build(),
    entrypoint="plan",
    sample_state={"question": "Why is the sky blue?"},
)


@pytest.fixture
def rw(tmp_path, monkeypatch):
    url = str(tmp_path / "ui.db")
    monkeypatch.setenv("REWIND_DB", url)
    rewind.register_pipeline(PIPELINE)
    handle = rewind.Rewind(url)
    yield handle
    handle.close()


@pytest.fixture
def runs(rw):
    """Two roots and a fork of the older one: the default pair (newest fork) is (old, fork),
    so a link naming `other` must not be replaced by it."""
    old = rw.run(PIPELINE, {"question": "Why is the sky blue?"})
    other = rw.run(PIPELINE, {"question": "Why is the sea blue?"})
    other_fork = rw.fork(other.id, at="plan", params={"temperature": 0.5})
    fork = rw.fork(old.id, at="plan", params={"temperature": 0.9})
    return old, other, other_fork, fork


def opened(query: dict) -> AppTest:
    """The Diff page opened by a link `/diff?<query>`, as the first visit of a session."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for k, v in query.items():
        at.query_params[k] = v
    at.switch_page("pages/diff.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_diff_link_with_only_a_keeps_a_and_pairs_it_with_its_fork(runs):
    old, other, other_fork, fork = runs
    at = opened({"a": other.id})
    assert at.session_state["diff_a"] == other.id
    assert at.session_state["diff_b"] == other_fork.id
    assert at.query_params["a"] == other.id and at.query_params["b"] == other_fork.id  # shareable


def test_diff_link_with_only_b_keeps_b_and_pairs_it_with_its_parent(runs):
    old, other, other_fork, fork = runs
    at = opened({"b": other_fork.id})
    assert at.session_state["diff_a"] == other.id
    assert at.session_state["diff_b"] == other_fork.id


def test_diff_link_with_only_a_to_a_run_without_forks_keeps_a(runs):
    old, other, other_fork, fork = runs
    at = opened({"a": other_fork.id})  # no fork of its own: the newest other run
    assert at.session_state["diff_a"] == other_fork.id
    assert at.session_state["diff_b"] == fork.id


def test_runs_page_status_filter_offers_every_run_status(rw):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    options = at.selectbox(key="flt_status").options
    assert [s.value for s in rewind.RunStatus] == options[1:]
    assert "halted" in options


def test_an_empty_rewind_db_is_named_on_the_page_not_taken_for_rewind_db(tmp_path, monkeypatch):
    """As in the CLI and the API: an empty REWIND_DB is an error the page names, not ./rewind.db."""
    (tmp_path / ".streamlit").mkdir()  # the loopback setting Streamlit reads from the cwd
    (tmp_path / ".streamlit" / "config.toml").write_text(
        (Path(APP).parent / ".streamlit" / "config.toml").read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REWIND_DB", "")
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception
    shown = [e.value.replace("\\", "") for e in at.error]  # markdown-escaped on the page
    assert any("REWIND_DB is set but empty" in text for text in shown), shown
    assert not (tmp_path / "rewind.db").exists()
