"""Tokens spent through the user's OWN openai clients inside a step (issue 11 point 3): metered
into the step exactly as the server reports them, and recorded one `ModelCall` per request on
`meter.calls`, with no change to the user's code. Against `python -m rewind serve-llm` over real
HTTP, sync and async, chat.completions and responses, with and without streaming."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request

import openai
import pytest

import rewind
from rewind import Rewind, llm
from rewind.model.metering import ModelCall, StepMeter, metering
from tests.test_cli import cli_env
from tests.test_demo_over_http import free_port, wait_until_serving

MSGS = [{"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "Explain the trade-offs of solar panels on urban rooftops."}]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "rewind", "serve-llm", "--port", str(port)],
                              env=cli_env(tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_serving(base, server)
        yield base + "/v1"
    finally:
        server.terminate()
        server.wait(timeout=10)


def requests_served(base_url: str) -> int:
    with urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/_simulator/stats", timeout=5) as r:
        return json.load(r)["chat_requests"]


def own_client(base_url):
    return openai.OpenAI(api_key="user-key", base_url=base_url, max_retries=0)


def test_chat_completion_is_metered_as_reported(base_url):
    client = own_client(base_url)
    with metering(StepMeter(node="n")) as meter:
        r = client.chat.completions.create(model="sim-small", messages=MSGS, temperature=0)
    assert (meter.prompt_tokens, meter.completion_tokens) == (r.usage.prompt_tokens, r.usage.completion_tokens)
    assert meter.model_calls == 1 and len(meter.calls) == 1
    call = meter.calls[0]
    assert isinstance(call, ModelCall)
    assert call.api == "chat.completions" and call.model == "sim-small"
    assert call.messages == MSGS and call.params == {"temperature": 0}
    assert call.response_text == r.choices[0].message.content
    assert call.usage_reported and call.latency_ms > 0 and call.error is None
    assert json.loads(json.dumps(call.to_dict()))["response_text"] == call.response_text


def test_streamed_chat_with_usage_is_metered_as_reported(base_url):
    client = own_client(base_url)
    with metering(StepMeter()) as meter:
        stream = client.chat.completions.create(model="sim-small", messages=MSGS, temperature=0,
                                                stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
    usage = chunks[-1].usage
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert (meter.prompt_tokens, meter.completion_tokens) == (usage.prompt_tokens, usage.completion_tokens)
    [call] = meter.calls
    assert call.response_text == text and call.usage_reported
    assert call.params["stream"] is True


def test_streamed_chat_without_usage_is_counted_and_marked(base_url):
    client = own_client(base_url)
    reported = client.chat.completions.create(model="sim-small", messages=MSGS, temperature=0).usage
    with metering(StepMeter()) as meter:
        for _ in client.chat.completions.create(model="sim-small", messages=MSGS, temperature=0, stream=True):
            pass
    [call] = meter.calls
    assert call.usage_reported is False
    # the o200k count is the simulator's own accounting, so it equals what it would report
    assert (call.prompt_tokens, call.completion_tokens) == (reported.prompt_tokens, reported.completion_tokens)


def test_responses_api_sync_and_streamed(base_url):
    client = own_client(base_url)
    with metering(StepMeter()) as meter:
        r = client.responses.create(model="sim-small", input="Explain tides in French.",
                                    instructions="Be formal.", temperature=0)
        events = list(client.responses.create(model="sim-small", input="Explain tides in French.",
                                              instructions="Be formal.", temperature=0, stream=True))
    done = next(e for e in events if e.type == "response.completed").response
    assert meter.prompt_tokens == r.usage.input_tokens + done.usage.input_tokens
    assert meter.completion_tokens == r.usage.output_tokens + done.usage.output_tokens
    first, second = meter.calls
    assert first.api == second.api == "responses"
    assert first.messages[0] == {"role": "system", "content": "Be formal."}
    assert first.response_text == r.output_text == second.response_text
    assert "Respectueusement soumis." in r.output_text  # formal, in French: the instructions were read


def test_async_clients_are_metered(base_url):
    async def calls():
        client = openai.AsyncOpenAI(api_key="user-key", base_url=base_url, max_retries=0)
        with metering(StepMeter()) as meter:
            r = await client.chat.completions.create(model="sim-large", messages=MSGS, temperature=0)
            stream = await client.chat.completions.create(
                model="sim-large", messages=MSGS, temperature=0, stream=True,
                stream_options={"include_usage": True})
            usage = None
            async for chunk in stream:
                usage = chunk.usage or usage
            resp = await client.responses.create(model="sim-large", input="hello", temperature=0)
        await client.close()
        return meter, r, usage, resp

    meter, r, usage, resp = asyncio.run(calls())
    assert meter.prompt_tokens == r.usage.prompt_tokens + usage.prompt_tokens + resp.usage.input_tokens
    assert meter.completion_tokens == (r.usage.completion_tokens + usage.completion_tokens
                                       + resp.usage.output_tokens)
    assert [c.api for c in meter.calls] == ["chat.completions", "chat.completions", "responses"]


def test_nothing_is_recorded_outside_a_step_and_failures_are_recorded(base_url):
    client = own_client(base_url)
    client.chat.completions.create(model="sim-small", messages=MSGS, temperature=0)  # no meter: no-op
    with metering(StepMeter()) as meter:
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="sim-small", messages=[{"content": "no role"}])
    [call] = meter.calls  # recorded from the wire: the status and what the server said
    assert call.error.startswith("HTTP 400") and "must be an object with a 'role'" in call.error
    assert meter.tokens == 0


def test_rewind_llm_chat_is_recorded_once(base_url, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    llm.reset()
    try:
        with metering(StepMeter()) as meter:
            text = llm.chat(MSGS)
        [call] = meter.calls
        assert call.response_text == text and meter.tokens == call.tokens > 0
    finally:
        llm.reset()


def test_a_pipeline_node_with_its_own_client_meters_its_step(base_url, tmp_path):
    client = own_client(base_url)
    seen = {}

    @rewind.action(reads=["topic"], writes=["answer"])
    def answer(state):
        r = client.chat.completions.create(
            model="sim-small", temperature=0,
            messages=[{"role": "user", "content": f"Explain {state['topic']} in 3 bullet points."}])
        seen["usage"] = r.usage
        return state.update(answer=r.choices[0].message.content)

    from burr.core.graph import GraphBuilder

    pipe = rewind.Pipeline("own-client", GraphBuilder().with_actions(answer=answer).build(), "answer")
    before = requests_served(base_url)
    with Rewind(str(tmp_path / "own.db")) as rw:
        run = rw.run(pipe, {"topic": "tides"})
        assert run.status == "completed", run.error
        [step] = run.steps
        assert (step.prompt_tokens, step.completion_tokens) == (
            seen["usage"].prompt_tokens, seen["usage"].completion_tokens)
        assert step.prompt_tokens > 0
    assert requests_served(base_url) == before + 1
