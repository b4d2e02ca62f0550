"""Async nodes sharing one bound `AsyncOpenAI` client (Burr's multi-modal-chatbot and
streaming-fastapi shape), over real HTTP to the simulator server: plain Burr's `aiterate` runs
every node on one event loop, so the client's kept-alive connections stay usable; Rewind ran
each node on a fresh loop (`asyncio.run`), and the second node failed with "Event loop is
closed" (found by a stranger). Also from inside a running loop (a notebook)."""

from __future__ import annotations

import asyncio
import copy

import openai
import pytest
from burr.core import ApplicationBuilder
from burr.core.action import action
from burr.core.graph import GraphBuilder

from rewind import Pipeline, Rewind
from rewind.model.server import start_in_thread


@pytest.fixture(scope="module")
def base_url():
    server, url = start_in_thread()
    try:
        yield url + "/v1" if not url.endswith("/v1") else url
    finally:
        server.stop()


async def _ask(client, text: str) -> str:
    r = await client.chat.completions.create(model="sim-small", temperature=0,
                                             messages=[{"role": "user", "content": text}])
    return r.choices[0].message.content


@action(reads=["topic"], writes=["outline"])
async def outline(state, llm_client):
    return state.update(outline=await _ask(llm_client, f"outline {state['topic']}"))


@action(reads=["outline"], writes=["draft"])
async def draft(state, llm_client):
    return state.update(draft=await _ask(llm_client, f"draft from {state['outline'][:40]}"))


@action(reads=["draft"], writes=["final"])
async def polish(state, llm_client):
    return state.update(final=await _ask(llm_client, f"polish {state['draft'][:40]}"))


def _graph(client):
    return (GraphBuilder()
            .with_actions(outline=outline.bind(llm_client=client), draft=draft.bind(llm_client=client),
                          polish=polish.bind(llm_client=client))
            .with_transitions(("outline", "draft"), ("draft", "polish")).build())


def _client(base_url):
    return openai.AsyncOpenAI(base_url=base_url, api_key="sk-not-a-real-key")


async def _plain_burr(base_url) -> list:
    app = ApplicationBuilder().with_graph(_graph(_client(base_url))).with_entrypoint(
        "outline").with_state(topic="wasps").build()
    states = []
    async for _, _, st in app.aiterate(halt_after=["polish"]):
        states.append({k: v for k, v in copy.deepcopy(st.get_all()).items() if not k.startswith("__")})
    return states


def _ours(tmp_path, base_url, name: str) -> list:
    with Rewind(str(tmp_path / f"{name}.db")) as rw:
        run = rw.run(Pipeline(name, _graph(_client(base_url)), "outline"), {"topic": "wasps"})
        assert run.status == "completed", run.error
        return [{k: v for k, v in rw.state_at(s).items() if not k.startswith("__")} for s in run.steps]


def test_async_nodes_sharing_one_client_run_as_under_burr(tmp_path, base_url):
    assert _ours(tmp_path, base_url, "shared") == asyncio.run(_plain_burr(base_url))


def test_the_same_from_inside_a_running_event_loop(tmp_path, base_url):
    async def notebook_cell():
        return _ours(tmp_path, base_url, "notebook")

    assert asyncio.run(notebook_cell()) == asyncio.run(_plain_burr(base_url))
