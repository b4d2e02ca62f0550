"""Issue 39: the Blame page under Streamlit's AppTest (a failed run of a pipeline with a fault at
a known step: the decisive step named, the chart, the table with a diff link per step, every
trial listed), and its pure view-model (rewind_ui/blame_view.py)."""

from __future__ import annotations

import pytest
from page_script import page_script
from streamlit.testing.v1 import AppTest

import rewind
from bench import blame_shapes as shapes
from rewind_ui import blame_view as view

SCRIPT = page_script("blame")


@pytest.fixture
def failed(tmp_path, monkeypatch):
    url = str(tmp_path / "rewind.db")
    monkeypatch.setenv("REWIND_DB", url)
    monkeypatch.setenv("REWIND_PIPELINES", "bench.blame_shapes:PIPELINE")
    shapes.reseed(0)
    with rewind.Rewind(url) as rw:
        run = shapes.failed_run(rw, shapes.PIPELINE)
    return url, run.id


def test_the_page_blames_a_run_and_names_the_decisive_step(failed):
    url, run_id = failed
    at = AppTest.from_string(SCRIPT, default_timeout=180)
    at.run()
    assert not at.exception, at.exception
    at.selectbox(key="blame_run").select(run_id).run()
    at.selectbox(key=f"blame_field:{run_id}").select("ok").run()
    at.text_input(key=f"blame_value:{run_id}:ok").input("true").run()
    at.number_input(key="blame_samples").set_value(16).run()
    at.selectbox(key="blame_strategy").select("each").run()
    at.button[0].click().run()
    assert not at.exception, at.exception
    assert any("decisive step" in s.value and "s2" in s.value for s in at.success), [e.value for e in at.error]
    assert {m.label for m in at.metric} >= {"Trials", "Tokens spent"}
    table = at.dataframe[0].value
    assert list(table["Verdict"])[:4] == ["recovers", "recovers", "decisive", "locked"]
    assert table["Diff"][2].startswith(f"/diff?a={run_id}&b=")
    with rewind.Rewind(url) as rw:  # every trial is a stored run of the handle
        assert rw.count_runs() == 1 + 6 * 16


def test_a_bad_value_is_one_message_and_runs_nothing(failed):
    url, run_id = failed
    at = AppTest.from_string(SCRIPT, default_timeout=120)
    at.run()
    at.selectbox(key="blame_run").select(run_id).run()
    at.text_input(key=f"blame_value:{run_id}:doomed").input("not json").run()
    at.button[0].click().run()
    assert not at.exception, at.exception
    assert any("not JSON" in e.value for e in at.error)
    with rewind.Rewind(url) as rw:
        assert rw.count_runs() == 1


def test_the_view_model(failed):
    url, run_id = failed
    with rewind.Rewind(url) as rw:
        run = rw.get_run(run_id)
        assert view.default_resample(run) == [f"s{i}" for i in range(6)]
        report = rw.blame(run_id, view.outcome("ok", view.EQUALS, "true"), samples=16, strategy="each")
    rows = view.table_rows(report)
    assert [r["Verdict"] for r in rows] == ["recovers", "recovers", "decisive", "locked", "locked", "locked"]
    assert len(view.trial_links(report)) == len(report.trial_runs) == 6 * 16
    fig = view.rate_chart(report)
    assert list(fig.data[0].x)[2] == "3. s2" and fig.data[0].marker.color[2] == view.VERDICT_COLORS["decisive"]
    spec = view.color_by_verdict({"nodes": [{"id": "s2"}, {"id": "s4"}], "edges": []}, report)
    assert [n["status"] for n in spec["nodes"]] == ["decisive", "locked"]
    assert not view.outcome("ok", view.NOT_EQUALS, "true")({"ok": True})
    with pytest.raises(ValueError, match="not JSON"):
        view.outcome("ok", view.EQUALS, "yes")
