"""Issue 37, offline: an app written on the `anthropic` SDK runs with no key against the offline
simulator served over HTTP (`rewind serve-llm`), its tokens the simulator's own count; a stream
read without `include_usage` is estimated as the simulator counts (an o200k count, OpenAI's chat
accounting), so it equals what the same request reports when usage is asked for; and a run of
a pipeline that calls no model never imports the openai SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import openai
import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind.model.metering import StepMeter, metering
from rewind.model.server import start_in_thread

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def sim_url():
    server, url = start_in_thread()
    yield url
    server.stop()


def test_an_anthropic_app_runs_offline_against_serve_llm(sim_url, tmp_path):
    import anthropic

    base = sim_url[:-3] if sim_url.endswith("/v1") else sim_url

    @rewind.action(reads=["topic"], writes=["plan"])
    def plan(state):
        client = anthropic.Anthropic(api_key="offline", base_url=base)
        r = client.messages.create(model="sim-small", max_tokens=200, system="Plan the research.",
                                   messages=[{"role": "user", "content": state["topic"]}])
        return state.update(plan=r.content[0].text)

    @rewind.action(reads=["plan"], writes=["steps"])
    def steps(state):
        client = anthropic.Anthropic(api_key="offline", base_url=base)
        with client.messages.stream(model="sim-small", max_tokens=200,
                                    messages=[{"role": "user", "content": "Critique: " + state["plan"]}]) as s:
            return state.update(steps="".join(s.text_stream))

    graph = GraphBuilder().with_actions(plan=plan, steps=steps).with_transitions(("plan", "steps")).build()
    rw = rewind.Rewind(str(tmp_path / "r.db"))
    run = rw.run(rewind.Pipeline(name="claude-offline", graph=graph, entrypoint="plan"), {"topic": "tides"})
    assert run.status == "completed", run.steps[0].error
    for step in run.steps:
        [call] = step.calls
        assert call["api"] == "anthropic.messages" and call["usage_reported"] is True
        usage = call["usage"]
        assert step.tokens == usage["input_tokens"] + usage["output_tokens"] > 0  # the simulator's count
        assert call["response_text"] and call["stop_reason"] == "end_turn"
    assert "tides" in rw.state_at(run.steps[0])["plan"]


def test_a_stream_without_usage_is_estimated_as_the_server_counts(sim_url):
    client = openai.OpenAI(api_key="offline", base_url=sim_url)
    messages = [{"role": "system", "content": "Answer in three points."},
                {"role": "user", "content": "How do tides work, and why are there two a day?"}]
    told = client.chat.completions.create(model="sim-small", messages=messages, temperature=0).usage
    with metering(StepMeter()) as meter:
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="sim-small", messages=messages, temperature=0, stream=True) if c.choices)
    [call] = meter.calls
    assert text and call.usage_reported is False  # said so: the server sent no usage
    assert (call.prompt_tokens, call.completion_tokens) == (told.prompt_tokens, told.completion_tokens)


def test_a_run_that_calls_no_model_never_imports_openai(tmp_path):
    code = f"""
import json, sys
import rewind
from burr.core.graph import GraphBuilder

@rewind.action(reads=["x"], writes=["y"])
def a(state):
    return state.update(y=state["x"] * 2)

graph = GraphBuilder().with_actions(a=a).build()
rw = rewind.Rewind({str(tmp_path / 'r.db')!r})
run = rw.run(rewind.Pipeline(name="p", graph=graph, entrypoint="a"), {{"x": 2}})
fork = rw.fork(run.id, at="a", edit={{"x": 3}})
print(json.dumps([run.status, fork.status, "openai" in sys.modules]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["completed", "completed", False]


def test_start_up_paid_when_a_meter_opens_is_never_the_nodes_latency(tmp_path, monkeypatch):
    # a one-time hook (the HTTP capture's install: imports) that takes 10 s by the clock
    import time as time_module

    from rewind.model import metering as metering_module

    real, offset = time_module.perf_counter, [0.0]
    monkeypatch.setattr(time_module, "perf_counter", lambda: real() + offset[0])

    def slow_start_up():  # a hook returns the seconds of start-up it paid
        offset[0] += 10.0
        return 10.0

    monkeypatch.setattr(metering_module, "_on_open", [*metering_module._on_open, slow_start_up])

    @rewind.action(reads=["x"], writes=["y"])
    def a(state):
        return state.update(y=state["x"] + 1)

    graph = GraphBuilder().with_actions(a=a).build()
    run = rewind.Rewind(str(tmp_path / "r.db")).run(rewind.Pipeline(name="p", graph=graph, entrypoint="a"), {"x": 1})
    assert offset[0] == 10.0 and run.status == "completed"
    assert run.steps[0].latency_ms < 5000  # the 10 s of start-up were not charged to the node
