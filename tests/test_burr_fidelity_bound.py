"""Apps built around values bound with `.bind()` (issue 10): Burr's tool-calling example (an LLM
client and a tool function per node), typed-state (`@action.pydantic`, Burr's and Rewind's, with
a bound client) and streaming-overview (a streaming action bound twice, `wipe(keep=...)`). Each
runs through the same three checks as tests/test_burr_fidelity.py; then a bound client keys
the cache, a bound function's code edit is a miss, and streaming steps meter their tokens.
"""

import threading
import types
from typing import Any, Callable, Generator, List, Optional, Tuple

import pytest
from burr.core import State, default, when
from burr.core.action import action, streaming_action
from burr.core.graph import GraphBuilder
from pydantic import BaseModel

import rewind
from rewind import RewindError
from tests.burr_apps import CALLS, App
from tests.test_burr_fidelity import (
    assert_same_trajectory, burr_trajectory, check_edit, check_matches_burr, check_no_edit_fork,
    run_turns,
)


@pytest.fixture(autouse=True)
def clean_calls():
    CALLS.clear()
    yield


@pytest.fixture
def rw(tmp_path):
    handle = rewind.Rewind(str(tmp_path / "rewind.db"))
    yield handle
    handle.close()


# --- an LLM client and tools bound with .bind(), as tool-calling and typed-state do ------------

TOOL_KEYWORDS = {"query_weather": ("weather",), "order_coffee": ("coffee", "latte"),
                 "text_wife": ("text",)}
TOOL_ARGUMENTS = {
    "query_weather": lambda text: {"latitude": 37.77, "longitude": -122.42},
    "order_coffee": lambda text: {"size": "large", "coffee_preparation": "latte", "any_modifications": None},
    "text_wife": lambda text: {"message": "running late"},
    "fallback": lambda text: {"response": text},
}


def _offline_chat(messages: list, tools: Optional[list]) -> dict:
    content = rewind.llm.chat(messages)
    if tools is None:
        return {"content": content, "tool_call": None}
    ask = messages[-1]["content"].lower()
    name = next((t for t, words in TOOL_KEYWORDS.items() if t in tools and any(w in ask for w in words)),
                "fallback")
    return {"content": content, "tool_call": {"name": name, "arguments": TOOL_ARGUMENTS[name](content)}}


class OfflineLLMClient:
    """Stands in for `openai.Client()`: an object holding a session, bound into actions."""

    rewind_key = "offline-llm-client/v1"  # how a client may name itself to a cache key

    def __init__(self):
        self._session = threading.Lock()  # like an HTTP pool: no deterministic encoding

    def chat(self, messages: list, tools: Optional[list] = None) -> dict:
        with self._session:
            return _offline_chat(messages, tools)


class BareLLMClient:
    """The same client as a user would write it, with no `rewind_key`."""

    def __init__(self):
        self._session = threading.Lock()

    def chat(self, messages: list, tools: Optional[list] = None) -> dict:
        with self._session:
            return _offline_chat(messages, tools)


def weather_tool(latitude: float, longitude: float) -> dict:
    """Queries the weather for a given latitude and longitude."""
    return {"forecast": f"sunny at {latitude:.2f},{longitude:.2f}", "temperature_c": 21}


def weather_tool_edited(latitude: float, longitude: float) -> dict:
    """Queries the weather for a given latitude and longitude."""
    return {"forecast": f"foggy at {latitude:.2f},{longitude:.2f}", "temperature_c": 14}


weather_tool_edited.__name__ = weather_tool_edited.__qualname__ = "weather_tool"  # same tool, new code


def order_coffee_tool(size: str, coffee_preparation: str, any_modifications: Optional[str] = None) -> dict:
    extra = f" with {any_modifications}" if any_modifications else ""
    return {"action": f"Ordered a {size} {coffee_preparation}{extra}"}


def text_wife_tool(message: str) -> dict:
    return {"action": f"Texted wife: {message}"}


def fallback_tool(response: str) -> dict:
    return {"response": response}


@action(reads=[], writes=["query"])
def process_input(state: State, query: str) -> State:
    CALLS.append("process_input")
    return state.update(query=query)


@action(reads=["query"], writes=["tool_parameters", "tool"])
def select_tool(state: State, llm_client: Any) -> State:
    CALLS.append("select_tool")
    reply = llm_client.chat([{"role": "system", "content": "Use exactly one of the supplied tools."},
                             {"role": "user", "content": state["query"]}], tools=list(TOOL_ARGUMENTS))
    call = reply["tool_call"]
    return state.update(tool=call["name"], tool_parameters=call["arguments"])


@action(reads=["tool_parameters"], writes=["raw_response"])
def call_tool(state: State, tool_function: Callable) -> State:
    CALLS.append("call_tool")
    return state.update(raw_response=tool_function(**state["tool_parameters"]))


@action(reads=["query", "raw_response"], writes=["final_output"])
def format_results(state: State, llm_client: Any) -> State:
    CALLS.append("format_results")
    reply = llm_client.chat([{"role": "user", "content": f"The original question was: {state['query']}. "
                                                         f"The data is: {state['raw_response']}."}])
    return state.update(final_output=reply["content"])


def tool_calling_app(weather: Callable = weather_tool, client: Any = None) -> App:
    client = client if client is not None else OfflineLLMClient()
    tools = {"query_weather": weather, "text_wife": text_wife_tool,
             "order_coffee": order_coffee_tool, "fallback": fallback_tool}
    graph = (
        GraphBuilder()
        .with_actions(process_input, select_tool=select_tool.bind(llm_client=client),
                      format_results=format_results.bind(llm_client=client),
                      **{name: call_tool.bind(tool_function=fn) for name, fn in tools.items()})
        .with_transitions(
            ("process_input", "select_tool"),
            *[("select_tool", name, when(tool=name)) for name in tools],
            (list(tools), "format_results"),
            ("format_results", "process_input"),
        )
        .build()
    )
    return App("tool-calling", graph, "process_input", {},
               [({"query": "What's the weather like in San Francisco?"}, ["format_results"])],
               mid="select_tool", edit_at="select_tool", edit={"query": "Please order me a large latte"},
               executed_after_edit=["select_tool", "order_coffee", "format_results"])


# --- typed-state: @action.pydantic (Burr's) and rewind.action.pydantic -------------------------

class Post(BaseModel):
    topic: str
    hook: str
    body: str
    key_takeaways: List[str] = []


class ApplicationState(BaseModel):
    transcript: Optional[str] = None
    post: Optional[Post] = None


def get_youtube_transcript(state: ApplicationState, youtube_url: str) -> ApplicationState:
    CALLS.append("get_youtube_transcript")
    _, _, video_id = youtube_url.partition("?v=")
    state.transcript = f"ts=0.0 - video {video_id} introduces Burr ts=4.2 - state machines for agents"
    return state


def generate_post(state: ApplicationState, llm_client: Any) -> ApplicationState:
    CALLS.append("generate_post")
    text = llm_client.chat([{"role": "system", "content": "Write a social media post."},
                            {"role": "user", "content": state.transcript}])["content"]
    state.post = Post(topic="Burr", hook=text.split(".")[0], body=text, key_takeaways=[text[:40]])
    return state


def _own_copy(fn: Callable) -> Callable:
    """A twin of `fn`, so Burr's decorator and Rewind's each own one function object."""
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    twin.__annotations__, twin.__qualname__ = dict(fn.__annotations__), fn.__qualname__
    return twin


def typed_state_app(flavor: str) -> App:
    pydantic_action = action.pydantic if flavor == "burr" else rewind.action.pydantic
    get = pydantic_action(reads=[], writes=["transcript"])(_own_copy(get_youtube_transcript))
    gen = pydantic_action(reads=["transcript"], writes=["post"])(_own_copy(generate_post))
    graph = (
        GraphBuilder()
        .with_actions(get_youtube_transcript=get,
                      generate_post=gen.bind(llm_client=OfflineLLMClient()))
        .with_transitions(("get_youtube_transcript", "generate_post"),
                          ("generate_post", "get_youtube_transcript"))
        .build()
    )
    url = "https://www.youtube.com/watch?v=hqutVJyd3TI"
    return App(f"typed-state-{flavor}", graph, "get_youtube_transcript", {},
               [({"youtube_url": url}, ["generate_post"])],
               mid="generate_post", edit_at="generate_post",
               edit={"transcript": "ts=0.0 - Hamilton builds dataflows"},
               executed_after_edit=["generate_post"])


# --- streaming-overview: a streaming action bound twice, wipe(keep=...), two turns ------------

MODES = {"answer_question": "text", "generate_code": "code", "unknown": "text"}
STREAM_HALT = ["answer_question", "generate_code", "prompt_for_more", "unsafe_response"]


@action(reads=[], writes=["chat_history", "prompt"])
def process_prompt(state: State, prompt: str) -> Tuple[dict, State]:
    CALLS.append("process_prompt")
    result = {"chat_item": {"role": "user", "content": prompt, "type": "text"}}
    return result, state.wipe(keep=["prompt", "chat_history"]).append(
        chat_history=result["chat_item"]).update(prompt=prompt)


@action(reads=["prompt"], writes=["safe"])
def check_safety(state: State) -> Tuple[dict, State]:
    CALLS.append("check_safety")
    result = {"safe": "unsafe" not in state["prompt"]}
    return result, state.update(safe=result["safe"])


@action(reads=["prompt"], writes=["mode"])
def choose_mode(state: State) -> Tuple[dict, State]:
    CALLS.append("choose_mode")
    ask = f"Pick one of {', '.join(MODES)} for: {state['prompt']}"
    content = rewind.llm.chat([{"role": "user", "content": ask}])
    mode = content.lower()
    if mode not in MODES:  # the offline model never answers one word: decide by keyword
        prompt = state["prompt"]
        mode = "generate_code" if "code" in prompt else "answer_question" if "?" in prompt else "unknown"
    return {"mode": mode}, state.update(mode=mode)


@streaming_action(reads=["prompt", "chat_history", "mode"], writes=["response", "chat_history"])
def chat_response(state: State, prepend_prompt: str) -> Generator[Tuple[dict, Optional[State]], None, None]:
    CALLS.append("chat_response")
    *earlier, last = state["chat_history"]
    history = [*earlier, {"role": last["role"], "content": f"{prepend_prompt}: {last['content']}"}]
    text = rewind.llm.chat([{"role": c["role"], "content": c["content"]} for c in history])
    for word in text.split(" "):
        yield {"response": {"content": word, "type": MODES[state["mode"]], "role": "assistant"}}, None
    result = {"response": {"content": text, "type": MODES[state["mode"]], "role": "assistant"}}
    yield result, state.update(**result).append(chat_history=result["response"])


@action(reads=["prompt", "chat_history"], writes=["response", "chat_history"])
def prompt_for_more(state: State) -> Tuple[dict, State]:
    CALLS.append("prompt_for_more")
    result = {"response": {"content": "Please clarify?", "type": "text", "role": "assistant"}}
    return result, state.update(**result).append(chat_history=result["response"])


@action(reads=["prompt", "chat_history"], writes=["response", "chat_history"])
def stream_unsafe_response(state: State) -> Tuple[dict, State]:
    CALLS.append("unsafe_response")
    result = {"response": {"content": "I can't respond to that.", "type": "text", "role": "assistant"}}
    return result, state.update(**result).append(chat_history=result["response"])


def streaming_app() -> App:
    graph = (
        GraphBuilder()
        .with_actions(
            prompt=process_prompt, check_safety=check_safety, unsafe_response=stream_unsafe_response,
            decide_mode=choose_mode, prompt_for_more=prompt_for_more,
            generate_code=chat_response.bind(prepend_prompt="Respond with *only* code"),
            answer_question=chat_response.bind(prepend_prompt="Please answer the following question"),
        )
        .with_transitions(
            ("prompt", "check_safety", default),
            ("check_safety", "decide_mode", when(safe=True)),
            ("check_safety", "unsafe_response", default),
            ("decide_mode", "generate_code", when(mode="generate_code")),
            ("decide_mode", "answer_question", when(mode="answer_question")),
            ("decide_mode", "prompt_for_more", default),
            (STREAM_HALT, "prompt"),
        )
        .build()
    )
    prompts = ["Please write code for fizzbuzz", "What is the capital of France?"]
    return App("streaming", graph, "prompt", {"chat_history": []},
               [({"prompt": p}, STREAM_HALT) for p in prompts],
               mid="check_safety", mid_occurrence=2,
               edit_at="decide_mode", edit_occurrence=2, edit_turn=1,
               edit={"prompt": "Please write code for a web server"},
               executed_after_edit=["decide_mode", "generate_code"])



BOUND_APPS = {
    "tool-calling": tool_calling_app,
    "typed-state-burr": lambda: typed_state_app("burr"),
    "typed-state-rewind": lambda: typed_state_app("rewind"),
    "streaming": streaming_app,
}


@pytest.mark.parametrize("name", list(BOUND_APPS))
def test_state_matches_burr_after_every_step(rw, name):
    check_matches_burr(rw, BOUND_APPS[name]())


@pytest.mark.parametrize("name", list(BOUND_APPS))
def test_no_edit_fork_calls_nothing_and_matches_every_hash(rw, name):
    check_no_edit_fork(rw, BOUND_APPS[name]())


@pytest.mark.parametrize("name", list(BOUND_APPS))
def test_edit_reexecutes_exactly_the_dependent_steps(rw, name):
    check_edit(rw, BOUND_APPS[name]())


def test_bound_client_keys_the_cache_and_a_bound_function_code_edit_is_a_miss(rw):
    first = run_turns(rw, tool_calling_app())
    assert first.status == "halted", first.error
    assert first.total_tokens > 0
    CALLS.clear()
    # a new client of the same kind, the same tools: an identical re-run is free
    again = run_turns(rw, tool_calling_app(client=OfflineLLMClient()))
    assert again.status == "halted", again.error
    assert CALLS == [] and again.total_tokens == 0
    assert [s.output_hash for s in again.steps] == [s.output_hash for s in first.steps]
    # the weather tool's code changed: its node is a miss, and what reads its output re-runs
    edited = tool_calling_app(weather=weather_tool_edited)
    changed = run_turns(rw, edited)
    assert changed.status == "halted", changed.error
    assert [(s.node, s.status) for s in changed.steps] == [
        ("process_input", "cached"), ("select_tool", "cached"),
        ("query_weather", "executed"), ("format_results", "executed"),
    ]
    assert_same_trajectory(rw, changed, burr_trajectory(edited.graph, edited.entrypoint,
                                                         edited.state, edited.turns))


def test_unkeyable_bound_object_is_keyed_or_refused_when_the_pipeline_is_built(rw):
    app = tool_calling_app(client=BareLLMClient())
    try:
        pipeline = app.pipeline()
    except RewindError as refused:  # refused before any node runs, naming node and param
        assert "select_tool" in str(refused) and "llm_client" in str(refused)
        assert CALLS == []
        return
    run = run_turns(rw, app, pipeline)  # or keyed (by its type): then it must run all the way
    assert run.status == "halted", f"bound BareLLMClient: run {run.status}: {run.error}"
    assert_same_trajectory(rw, run, burr_trajectory(app.graph, app.entrypoint, app.state, app.turns))


def test_streaming_action_meters_its_tokens(rw):
    run = run_turns(rw, streaming_app())
    assert run.status == "halted", run.error
    answers = [s for s in run.steps if s.node in ("generate_code", "answer_question")]
    assert [s.node for s in answers] == ["generate_code", "answer_question"]
    assert all(s.tokens > 0 for s in answers), [(s.node, s.tokens) for s in answers]


# --- the same features with no runtime inputs, so each shows on its own ------------------------

def test_bound_client_and_tools_run_on_state_alone(rw):
    """Issue 10, item 3: `.bind(llm_client=client)` / `.bind(tool_function=fn)` with no `inputs`."""
    client = OfflineLLMClient()
    graph = (
        GraphBuilder()
        .with_actions(select_tool=select_tool.bind(llm_client=client),
                      query_weather=call_tool.bind(tool_function=weather_tool),
                      fallback=call_tool.bind(tool_function=fallback_tool),
                      format_results=format_results.bind(llm_client=client))
        .with_transitions(("select_tool", "query_weather", when(tool="query_weather")),
                          ("select_tool", "fallback", default),
                          (["query_weather", "fallback"], "format_results"))
        .build()
    )
    app = App("bound-on-state", graph, "select_tool", {"query": "What's the weather in Paris?"},
              [(None, None)], mid="query_weather", edit_at="select_tool", edit={}, executed_after_edit=[])
    check_matches_burr(rw, app)
    check_no_edit_fork(rw, app)


@action.pydantic(reads=["transcript"], writes=["post"])
def summarize_transcript(state: ApplicationState) -> ApplicationState:
    CALLS.append("summarize_transcript")
    text = rewind.llm.chat([{"role": "user", "content": f"Summarize: {state.transcript}"}])
    state.post = Post(topic="Burr", hook=text.split(".")[0], body=text)
    return state


def test_pydantic_action_writing_outside_its_reads_runs_on_state_alone(rw):
    """Issue 10, item 5: Burr's `model_from_state` asks `"post" in state` for a declared write."""
    graph = GraphBuilder().with_actions(summarize=summarize_transcript).with_transitions().build()
    app = App("pydantic-on-state", graph, "summarize", {"transcript": "ts=0.0 - Burr in five minutes"},
              [(None, None)], mid="summarize", edit_at="summarize",
              edit={"transcript": "ts=0.0 - Hamilton in five minutes"}, executed_after_edit=["summarize"])
    check_matches_burr(rw, app)
    check_edit(rw, app)
