"""The model-call cache (issue 11): a node that re-executes because an unrelated read changed
makes no HTTP request for a model call whose request did not change, and pays nothing for it;
a changed request goes out; a side-effect node's calls are never replayed. Against a real
`python -m rewind serve-llm`, with the node's own `openai.OpenAI` client."""

from __future__ import annotations

import openai
import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind

from tests.test_model_calls import base_url, requests_served  # noqa: F401  (the fixture)

URL = {"base": None}


def _client():
    return openai.OpenAI(api_key="user-key", base_url=URL["base"], max_retries=0)


@rewind.action(reads=["question", "style"], writes=["answer"])
def answer(state):
    text = _client().chat.completions.create(  # the request depends on the question only
        model="sim-small", messages=[{"role": "user", "content": state["question"]}],
    ).choices[0].message.content
    return state.update(answer=f"[{state['style']}] {text}")


@rewind.action(reads=["answer"], writes=["receipt"], determinism="side-effect")
def send(state):
    text = _client().chat.completions.create(
        model="sim-small", messages=[{"role": "user", "content": "Confirm: " + state["answer"][:20]}],
    ).choices[0].message.content
    return state.update(receipt=text[:40])


PIPELINE = Pipeline("calls", GraphBuilder().with_actions(answer=answer, send=send)
                    .with_transitions(("answer", "send")).build(), "answer")


@pytest.fixture
def rw(tmp_path, base_url):  # noqa: F811
    URL["base"] = base_url
    handle = Rewind(str(tmp_path / "calls.db"), pipelines=[PIPELINE])
    yield handle
    handle.close()


def test_an_unchanged_request_of_a_re_executed_node_makes_no_http_request(rw, base_url):  # noqa: F811
    run = rw.run(PIPELINE, {"question": "Why is the sky blue?", "style": "plain"})
    assert run.status == "completed", run.error
    paid = run.step("answer").tokens
    assert paid > 0
    before = requests_served(base_url)
    fork = rw.fork(run.id, at="answer", edit={"style": "formal"})
    step = fork.step("answer")
    assert step.status == "executed" and "`style` changed" in step.reason
    assert requests_served(base_url) == before  # answered from the model-call cache
    assert step.tokens == 0 and step.tokens_saved == paid and step.cost == paid
    assert "served from the model-call cache" in step.reason
    assert step.outputs["answer"].startswith("[formal] ")
    assert step.outputs["answer"][len("[formal] "):] == run.step("answer").outputs["answer"][len("[plain] "):]
    assert fork.step("send").status == "dry-run"


def test_a_changed_request_goes_to_the_model(rw, base_url):  # noqa: F811
    run = rw.run(PIPELINE, {"question": "Why is the sky blue?", "style": "plain"})
    before = requests_served(base_url)
    fork = rw.fork(run.id, at="answer", edit={"question": "Why is grass green?"})
    assert requests_served(base_url) == before + 1
    assert fork.step("answer").tokens > 0


def test_a_side_effect_nodes_calls_are_never_replayed(rw, base_url):  # noqa: F811
    rw.run(PIPELINE, {"question": "q1", "style": "plain"})
    before = requests_served(base_url)
    second = rw.run(PIPELINE, {"question": "q1", "style": "plain"})  # answer: a node-cache hit
    assert second.step("answer").status == "cached"
    assert second.step("send").status == "executed"
    assert requests_served(base_url) == before + 1  # send asked the model again


def test_use_cache_false_sends_every_call(rw, base_url):  # noqa: F811
    rw.run(PIPELINE, {"question": "q2", "style": "plain"})
    before = requests_served(base_url)
    rw.run(PIPELINE, {"question": "q2", "style": "plain"}, use_cache=False)
    assert requests_served(base_url) == before + 2


def test_tool_calls_are_recorded_on_the_step(tmp_path):
    from rewind.pipelines.research import pipeline as demo

    rw = Rewind(str(tmp_path / "tools.db"))
    run = rw.run(demo, {"question": "How do Python generators work?"}, use_cache=False)
    tools = rw.get_run(run.id).step("research").tools
    assert tools and all(t["name"] == "rewind.pipelines.corpus.search" for t in tools)
    assert all(t["error"] is None and t["cached"] is False and t["latency_ms"] >= 0 for t in tools)
    assert tools[0]["args"]["args"] and tools[0]["result"] is not None


def test_a_hit_is_not_served_across_model_endpoints(tmp_path, base_url):  # noqa: F811
    """Outputs a node got from one endpoint are no answer on another (the session's Settings)."""
    from rewind.pipelines.research import pipeline as demo

    rw = Rewind(str(tmp_path / "endpoints.db"))
    question = {"question": "How do Python generators work?"}
    first = rw.run(demo, question)                       # the in-process simulator
    assert rw.run(demo, question).step("plan").status == "cached"
    before = requests_served(base_url)
    with rewind.llm.session_settings(base_url=base_url):  # serve-llm over HTTP: another endpoint
        other = rw.run(demo, question)
    plan = other.step("plan")
    assert plan.status == "executed" and "another model endpoint" in plan.reason
    assert requests_served(base_url) > before
    assert other.step("research").status == "cached"      # a node that calls no model still hits
    assert first.step("plan").status == "executed"
