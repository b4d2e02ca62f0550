"""The Batch page under Streamlit's AppTest: the fork plan, a run with its flip table (a diff
link per fork) and both charts, and bad JSON refused before anything is forked.

Until the page is in the shell's navigation it is run here as the shell runs it (inside
`run_app`), by setting the shell's flag around the page script.
"""

from __future__ import annotations

import pytest
from page_script import page_script
from streamlit.testing.v1 import AppTest

import rewind

from test_batch import make_runs

SCRIPT = page_script("batch")


@pytest.fixture
def page(tmp_path, monkeypatch):
    url = str(tmp_path / "rewind.db")
    monkeypatch.setenv("REWIND_DB", url)
    monkeypatch.setenv("REWIND_PIPELINES", "test_batch_pipeline:pipeline")
    with rewind.Rewind(url) as rw:
        make_runs(rw)
    at = AppTest.from_string(SCRIPT, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    return at, url


def _choose(at, pipeline="batch-test", node="judge"):
    at.selectbox(key="batch_pipeline").select(pipeline).run()
    at.selectbox(key="batch_at").select(node).run()
    return at


def test_plan_then_run_shows_flips_links_and_charts(page):
    at, url = page
    _choose(at)
    at.text_area(key="batch_params:batch-test:judge").input('{"threshold": 20}').run()
    at.button[0].click().run()  # Plan
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Runs"] == "30" and metrics["Reach the node"] == "27"
    assert any("judge" in md.value and "summarize" in md.value for md in at.markdown)
    at.button[1].click().run()  # Run batch
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Changed"] == "4" and metrics["Same"] == "23" and metrics["Skipped"] == "3"
    table = at.dataframe[0].value
    assert len(table) == 4 and set(table["Outcome"]) == {"changed"}
    assert all(link.startswith("/diff?a=") and "&b=" in link for link in table["Diff"])
    assert len(at.get("plotly_chart")) == 2
    with rewind.Rewind(url) as rw:
        assert rw.count_runs() == 30 + 27


def test_bad_json_is_refused_and_nothing_is_forked(page):
    at, url = page
    _choose(at)
    at.text_area(key="batch_params:batch-test:judge").input('{"threshold": ').run()
    assert any("Params: invalid JSON" in e.value for e in at.error)
    with rewind.Rewind(url) as rw:
        assert rw.count_runs() == 30
