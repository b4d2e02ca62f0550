"""The app shell under AppTest: every page runs inside it (sidebar, navigation), also when
Streamlit's legacy `pages/` mode starts a page script directly, and the step picker says when
a deep link names a step the run does not have instead of silently opening another one."""

from __future__ import annotations

from pathlib import Path

import pytest
from burr.core.graph import GraphBuilder
from streamlit.testing.v1 import AppTest

import rewind
from rewind import Pipeline, action

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@action(reads=["x"], writes=["y"])
def s_first(state):
    return state.update(y=state["x"] + 1)


@action(reads=["y"], writes=["z"])
def s_second(state):
    return state.update(z=state["y"] * 2)


PIPELINE = Pipeline(name="uishell", graph=GraphBuilder().with_actions(first=s_first, second=s_second)
                    .with_transitions(("first", "second")).build(), entrypoint="first")


@pytest.fixture
def run(tmp_path, monkeypatch):
    url = str(tmp_path / "shell.db")
    monkeypatch.setenv("REWIND_DB", url)
    rewind.register_pipeline(PIPELINE)
    with rewind.Rewind(url) as rw:
        return rw.run(PIPELINE, {"x": 1})


def ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_every_page_runs_inside_the_shell(run):
    at = ok(AppTest.from_file(APP, default_timeout=60).run())
    for page, title in (("fork", "Fork & replay"), ("diff", "Diff"), ("settings", "Settings"), ("runs", "Runs")):
        at.switch_page(f"pages/{page}.py")
        ok(at.run())
        assert title in [t.value for t in at.title]
        assert [b.label for b in at.sidebar.button] == ["↻ Refresh data"], page


@pytest.mark.parametrize("page", ["runs", "fork"])
def test_a_deep_link_to_an_unknown_node_says_so(run, page):
    at = AppTest.from_file(APP, default_timeout=60)
    if page == "fork":
        ok(at.run())
        at.switch_page("pages/fork.py")
    at.query_params.update({"run": run.id, "node": "nowhere"})
    ok(at.run())
    warnings = [w.value for w in at.warning]
    assert any("no step nowhere in this run" in w and "showing first" in w for w in warnings), warnings
    key = "_w_sel_node" if page == "runs" else "_w_fork_node"
    assert at.selectbox(key=key).value == "first"
