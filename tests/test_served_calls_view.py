"""The step view marks a served model call and shows what its reply was beyond text (issue 37):
a call answered from the model-call cache is titled `served` with a line saying no request went
out, and a reply that is a tool call shows the call and its stop reason instead of "(no text)".
Pure view functions on the calls of real runs (the local tool-call server of
test_served_calls_exact is the network edge)."""

from __future__ import annotations

import pytest

from rewind import Rewind
from rewind_ui.calls_view import SERVED, call_reply, call_title

from tests.test_served_calls_exact import PIPELINES, SERVER, ToolServer


@pytest.fixture
def rw(tmp_path):
    server = ToolServer()
    SERVER["url"] = server.base_url
    handle = Rewind(str(tmp_path / "view.db"), pipelines=list(PIPELINES.values()))
    yield handle
    handle.close()
    server.close()


@pytest.mark.parametrize("kind", ["pick", "pick_stream", "pick_responses", "pick_responses_stream"])
def test_a_served_call_is_marked_and_its_tool_call_shown(rw, kind):
    run = rw.run(PIPELINES[kind], {"question": "What is the weather in Paris?", "note": "a"})
    fork = rw.fork(run.id, at="pick", edit={"note": "b"})
    sent, served = run.step("pick").calls[0], fork.step("pick").calls[0]

    assert "served" not in call_title(0, sent)
    assert call_title(0, served).endswith(" · served")
    assert call_reply(sent)["served"] == "" and call_reply(served)["served"] == SERVED
    for call in (sent, served):
        reply = call_reply(call)
        assert reply["tool_calls"] == ['get_weather({"city": "Paris"})']
        assert reply["stop"] == ("tool_calls" if kind in ("pick", "pick_stream") else "completed")


def test_a_call_recorded_without_its_raw_reply_shows_no_tool_calls():
    old = {"api": "chat.completions", "model": "m", "response_text": "hi", "prompt_tokens": 1,
           "completion_tokens": 1}
    assert call_reply(old) == {"tool_calls": [], "stop": None, "served": ""}
    assert call_title(1, old) == "Call 2 · chat.completions · m"


def _draw(calls):
    from rewind_ui import textview

    textview.show_calls(calls)


def test_the_step_view_draws_the_served_mark_and_the_tool_call(rw):
    from streamlit.testing.v1 import AppTest

    run = rw.run(PIPELINES["pick"], {"question": "What is the weather in Paris?", "note": "a"})
    fork = rw.fork(run.id, at="pick", edit={"note": "b"})
    app = AppTest.from_function(_draw, args=(fork.step("pick").calls,), default_timeout=30).run()
    assert not app.exception
    assert [e.label.endswith(" · served") for e in app.expander] == [True]
    texts = [t.value for t in app.text]
    assert 'tool call: get_weather({"city": "Paris"})' in texts and "(no text)" not in texts
    captions = [c.value for c in app.caption]
    assert any("served from the recording" in c for c in captions)
    assert any("stop: tool" in c for c in captions)
