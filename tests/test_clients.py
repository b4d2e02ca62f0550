"""Issue 37: every model client a real agent uses is metered to the server's own count, recorded
with its tool calls, and served back exactly. Each real SDK (openai, anthropic, google-genai,
litellm on its OpenAI and native Anthropic paths, langchain-openai, instructor, raw httpx)
talks to a local server speaking its wire format (tests/wire_servers.py), from inside a Rewind
node. For each: the step's tokens equal what the server counted; the call is recorded (api,
tool calls); a fork that edits a field the node reads but does not send re-runs the node, and
its model call is served from the recording: no request reaches the server, and the node's
output (tool call included) is the recorded one."""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm: no fetch at import

import httpx
import pytest
from burr.core.graph import GraphBuilder
from pydantic import BaseModel

import rewind
from wire_servers import WireServer

SERVER: dict = {}
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}


class Forecast(BaseModel):
    city: str
    days: int


def _url() -> str:
    return SERVER["url"]


def openai_chat(q):
    import openai

    r = openai.OpenAI(api_key="k", base_url=_url() + "/v1").chat.completions.create(
        model="gpt-x", messages=[{"role": "user", "content": q}])
    return r.choices[0].message.content


def openai_stream(q):
    import openai

    parts = openai.OpenAI(api_key="k", base_url=_url() + "/v1").chat.completions.create(
        model="gpt-x", messages=[{"role": "user", "content": q}], stream=True,
        stream_options={"include_usage": True})
    return "".join(c.choices[0].delta.content or "" for c in parts if c.choices)


def openai_tools(q):
    import openai

    r = openai.OpenAI(api_key="k", base_url=_url() + "/v1").chat.completions.create(
        model="gpt-x", messages=[{"role": "user", "content": q}], tools=[WEATHER_TOOL], tool_choice="required")
    call = r.choices[0].message.tool_calls[0].function
    return f"{call.name}{call.arguments}"


def openai_embeddings(q):
    import openai

    r = openai.OpenAI(api_key="k", base_url=_url() + "/v1").embeddings.create(
        model="embed-x", input=[q, q + " again"])
    return [d.embedding for d in r.data]


def anthropic_plain(q):
    import anthropic

    r = anthropic.Anthropic(api_key="k", base_url=_url()).messages.create(
        model="claude-x", max_tokens=100, system="Be brief.", messages=[{"role": "user", "content": q}])
    return r.content[0].text


def anthropic_stream(q):
    import anthropic

    with anthropic.Anthropic(api_key="k", base_url=_url()).messages.stream(
            model="claude-x", max_tokens=100, messages=[{"role": "user", "content": q}]) as s:
        return "".join(s.text_stream)


def anthropic_tools(q):
    import anthropic

    r = anthropic.Anthropic(api_key="k", base_url=_url()).messages.create(
        model="claude-x", max_tokens=100, messages=[{"role": "user", "content": q}],
        tools=[{"name": "get_weather", "input_schema": WEATHER_TOOL["function"]["parameters"]}])
    block = next(b for b in r.content if b.type == "tool_use")
    return f"{block.name}{sorted(block.input.items())}"


def anthropic_async(q):
    import anthropic

    async def go():
        client = anthropic.AsyncAnthropic(api_key="k", base_url=_url())
        r = await client.messages.create(model="claude-x", max_tokens=100, messages=[{"role": "user", "content": q}])
        await client.close()
        return r.content[0].text

    return asyncio.run(go())


def _gemini():
    from google import genai
    from google.genai import types

    return genai.Client(api_key="k", http_options=types.HttpOptions(base_url=_url()))


def google_plain(q):
    client = _gemini()  # held: a dropped genai Client closes its HTTP client
    return client.models.generate_content(model="gemini-x", contents=q).text


def google_stream(q):
    client = _gemini()
    return "".join(c.text or "" for c in client.models.generate_content_stream(model="gemini-x", contents=q))


def google_tools(q):
    from google.genai import types

    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", parameters=types.Schema(type="OBJECT", properties={
            "city": types.Schema(type="STRING"), "days": types.Schema(type="INTEGER")}))])
    client = _gemini()
    r = client.models.generate_content(model="gemini-x", contents=q,
                                       config=types.GenerateContentConfig(tools=[tool]))
    call = r.function_calls[0]
    return f"{call.name}{sorted(call.args.items())}"


def litellm_openai(q):
    import litellm

    r = litellm.completion(model="openai/gpt-x", api_base=_url() + "/v1", api_key="k",
                           messages=[{"role": "user", "content": q}])
    return r.choices[0].message.content


def litellm_anthropic(q):
    import litellm

    r = litellm.completion(model="anthropic/claude-x", api_base=_url() + "/v1/messages", api_key="k",
                           max_tokens=100, messages=[{"role": "user", "content": q}])
    return r.choices[0].message.content


def langchain_openai(q):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="gpt-x", base_url=_url() + "/v1", api_key="k", max_retries=0).invoke(q).content


def instructor_tools(q):
    import instructor
    import openai

    client = instructor.from_openai(openai.OpenAI(api_key="k", base_url=_url() + "/v1", max_retries=0))
    got = client.chat.completions.create(model="gpt-x", response_model=Forecast, max_retries=0,
                                         messages=[{"role": "user", "content": q}])
    return f"{type(got).__name__}{got.model_dump()}"


def raw_httpx(q):
    r = httpx.post(_url() + "/v1/chat/completions", json={"model": "gpt-x", "messages": [{"role": "user", "content": q}]})
    return r.json()["choices"][0]["message"]["content"]


def raw_httpx_async(q):
    async def go():
        async with httpx.AsyncClient() as c:
            r = await c.post(_url() + "/v1/chat/completions",
                             json={"model": "gpt-x", "messages": [{"role": "user", "content": q}]})
            return r.json()["choices"][0]["message"]["content"]

    return asyncio.run(go())


# (client, api recorded, tool call expected)
CLIENTS = [
    (openai_chat, "chat.completions", False), (openai_stream, "chat.completions", False),
    (openai_tools, "chat.completions", True), (openai_embeddings, "embeddings", False),
    (anthropic_plain, "anthropic.messages", False),
    (anthropic_stream, "anthropic.messages", False), (anthropic_tools, "anthropic.messages", True),
    (anthropic_async, "anthropic.messages", False), (google_plain, "google.generate_content", False),
    (google_stream, "google.stream_generate_content", False), (google_tools, "google.generate_content", True),
    (litellm_openai, "chat.completions", False), (litellm_anthropic, "anthropic.messages", False),
    (langchain_openai, "chat.completions", False), (instructor_tools, "chat.completions", True),
    (raw_httpx, "chat.completions", False), (raw_httpx_async, "chat.completions", False),
]


@pytest.fixture(scope="module")
def server():
    s = WireServer()
    SERVER["url"] = s.url
    yield s
    s.close()


def _pipeline(client) -> rewind.Pipeline:
    @rewind.action(reads=["question", "note"], writes=["answer"])
    def ask(state):
        return state.update(answer=client(state["question"]))

    @rewind.action(reads=["answer"], writes=["shout"])
    def after(state):
        return state.update(shout=str(state["answer"]).upper())

    graph = GraphBuilder().with_actions(ask=ask, after=after).with_transitions(("ask", "after")).build()
    return rewind.Pipeline(name=f"client-{client.__name__}", graph=graph, entrypoint="ask")


@pytest.mark.parametrize("client,api,tool", CLIENTS, ids=[c[0].__name__ for c in CLIENTS])
def test_a_client_is_metered_recorded_and_served_exactly(server, tmp_path, client, api, tool):
    rw = rewind.Rewind(str(tmp_path / "r.db"))
    pipe = _pipeline(client)
    before, counted_before = server.requests, server.counted()
    run = rw.run(pipe, {"question": "What is the weather in Paris this week?", "note": "a"})
    assert run.status == "completed", run.steps[0].error
    step = run.step("ask")
    made = server.requests - before
    assert made >= 1 and len(step.calls) == made, step.calls
    prompt = server.counted()[0] - counted_before[0]
    completion = server.counted()[1] - counted_before[1]
    assert step.tokens == prompt + completion, (step.tokens, prompt, completion)  # the server's own count
    call = step.calls[-1]
    assert call["api"] == api and call["usage_reported"] is True and not call["served"]
    assert bool(call["tool_calls"]) is tool
    if tool:
        assert call["tool_calls"][0]["name"] in ("get_weather", "Forecast")
    # the node re-runs (a field it reads changed) and asks the same: served, nothing sent
    fork = rw.fork(run.id, at="ask", edit={"note": "b"})
    assert fork.status == "completed", fork.steps[0].error
    assert server.requests - before == made
    assert fork.step("ask").status == "executed"
    assert rw.state_at(fork.step("ask"))["answer"] == rw.state_at(step)["answer"]
    assert fork.step("after").status == "cached"
    assert all(c["served"] for c in fork.step("ask").calls) and fork.step("ask").tokens == 0


def test_an_unknown_endpoint_is_recorded_with_its_usage_marked_unknown(server, tmp_path):
    def ollama_like(q):
        return httpx.post(_url() + "/api/generate", json={"model": "llama-x", "prompt": q}).json()["response"]

    rw = rewind.Rewind(str(tmp_path / "r.db"))
    run = rw.run(_pipeline(ollama_like), {"question": "Why is the sky blue?", "note": "a"})
    [call] = run.step("ask").calls
    assert call["api"] == "http:/api/generate" and call["model"] == "llama-x"
    assert call["usage_reported"] is False  # said so on the step: an o200k estimate, never 0
    assert call["prompt_tokens"] > 0 and call["completion_tokens"] > 0
    assert call["response_text"] == "generated for Why is the sky blue?"


def test_a_request_that_is_no_model_call_is_not_recorded(server, tmp_path):
    def weather_api(q):
        httpx.post(_url() + "/api/other", json={"city": "Paris"})  # a tool's HTTP call, not a model's
        return q

    rw = rewind.Rewind(str(tmp_path / "r.db"))
    run = rw.run(_pipeline(weather_api), {"question": "q", "note": "a"})
    assert run.step("ask").calls == [] and run.step("ask").tokens == 0
