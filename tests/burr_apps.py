"""Burr's own example apps (hello-world counter, simple chatbot, collatz, the pytest MapStates
example, test_parallelism's Input/MapStates), written the way Burr writes them, with their LLM
calls swapped for Rewind's offline model. The fidelity tests run each one under plain Burr and
under Rewind side by side. (The apps built around bound clients and tools, typed state and
streaming live in tests/test_burr_fidelity_bound.py.)

Every node function appends its name to CALLS when it really runs, so a test can tell a node
that executed from one served by the cache. Each factory returns an `App`: what to run, the turns
to drive it with, and where the tests fork it.
"""

import dataclasses
from typing import Any, Callable, Dict, Generator, List, Tuple

from burr.core import Action, ApplicationContext, State, default, expr, when
from burr.core.action import Input, Result, action
from burr.core.graph import Graph, GraphBuilder
from burr.core.parallelism import MapStates, RunnableGraph

import rewind

CALLS: list = []
SETTINGS = {"search_down": False}


@dataclasses.dataclass
class App:
    name: str
    graph: Graph
    entrypoint: str
    state: dict
    turns: list  # [(inputs, halt_after)]: one rw.run, then one rw.resume per later turn
    mid: str  # where the no-edit fork starts
    edit_at: str  # where the edit fork starts, with `edit`
    edit: dict
    executed_after_edit: list  # the nodes the edit must re-execute, in order
    mid_occurrence: int = 1
    edit_occurrence: int = 1
    edit_turn: int = 0  # the turn (index into `turns`) the edited node runs in

    def pipeline(self) -> rewind.Pipeline:
        return rewind.Pipeline(self.name, self.graph, self.entrypoint)


# --- hello-world counter: plain @action, rewind.action, and the class-based Counter ----------

@action(reads=["counter"], writes=["counter"])
def counter(state: State) -> State:
    CALLS.append("counter")
    return state.update(counter=state["counter"] + 1)


@rewind.action(reads=["counter"], writes=["counter"])
def rewind_counter(state: State) -> State:
    CALLS.append("counter")
    return state.update(counter=state["counter"] + 1)


class Counter(Action):
    """examples/hello-world-counter/application_classbased.py: a runtime input and __context."""

    @property
    def reads(self) -> list:
        return ["counter"]

    @property
    def writes(self) -> list:
        return ["counter"]

    @property
    def inputs(self) -> list:
        return ["increment_by", "__context"]  # __context must be declared to be injected

    def run(self, state: State, increment_by: int, __context: ApplicationContext) -> dict:
        CALLS.append("counter")
        assert __context.app_id  # Burr's context reaches the action; the count ignores it
        return {"counter": state["counter"] + increment_by}

    def update(self, result: dict, state: State) -> State:
        return state.update(**result)


def counter_app(flavor: str) -> App:
    node = {"burr": counter, "rewind": rewind_counter, "class": Counter()}[flavor]
    graph = (
        GraphBuilder()
        .with_actions(counter=node, result=Result("counter"))
        .with_transitions(("counter", "counter", expr("counter < 10")), ("counter", "result", default))
        .build()
    )
    inputs = {"increment_by": 1} if flavor == "class" else None
    return App(f"counter-{flavor}", graph, "counter", {"counter": 0}, [(inputs, None)],
               mid="counter", mid_occurrence=4, edit_at="counter", edit={"counter": 10},
               executed_after_edit=["counter", "result"])


# --- simple-chatbot-intro: State.append on a field the node does not read, halt_after turns --

CHAT_TURNS = ["Who was Aaron Burr, sir?", "Is this question unsafe?",
              "If you had libraries called Hamilton and Burr, what would they do?"]
CHAT_HALT = ["ai_response", "unsafe_response"]


@action(reads=[], writes=["prompt", "chat_history"])
def human_input(state: State, user_input: str) -> Tuple[dict, State]:
    CALLS.append("human_input")
    chat_item = {"content": user_input, "role": "user"}
    return {"prompt": user_input}, state.update(prompt=user_input).append(chat_history=chat_item)


@action(reads=["prompt"], writes=["safe"])
def safety_check(state: State) -> Tuple[dict, State]:
    CALLS.append("safety_check")
    safe = "unsafe" not in state["prompt"]
    return {"safe": safe}, state.update(safe=safe)


@action(reads=["chat_history"], writes=["response", "chat_history"])
def ai_response(state: State) -> Tuple[dict, State]:
    CALLS.append("ai_response")
    content = rewind.llm.chat(state["chat_history"])
    chat_item = {"content": content, "role": "assistant"}
    return {"response": content}, state.update(response=content).append(chat_history=chat_item)


@action(reads=[], writes=["response", "chat_history"])
def unsafe_response(state: State) -> Tuple[dict, State]:
    CALLS.append("unsafe_response")
    content = "I'm sorry, my overlords have forbidden me to respond."
    chat_item = {"content": content, "role": "assistant"}
    return {"response": content}, state.update(response=content).append(chat_history=chat_item)


def chatbot_app() -> App:
    graph = (
        GraphBuilder()
        .with_actions(human_input=human_input, ai_response=ai_response,
                      safety_check=safety_check, unsafe_response=unsafe_response)
        .with_transitions(
            ("human_input", "safety_check"),
            ("safety_check", "unsafe_response", when(safe=False)),
            ("safety_check", "ai_response", when(safe=True)),
            (["unsafe_response", "ai_response"], "human_input"),
        )
        .build()
    )
    edited = [{"content": "Who was Alexander Hamilton, sir?", "role": "user"}]
    return App("chatbot", graph, "human_input", {"chat_history": []},
               [({"user_input": m}, CHAT_HALT) for m in CHAT_TURNS],
               mid="safety_check", mid_occurrence=2,
               edit_at="ai_response", edit={"chat_history": edited},
               # safety_check reads only the recorded prompt of each turn: it stays cached
               executed_after_edit=["ai_response", "human_input", "unsafe_response",
                                    "human_input", "ai_response"])


# --- collatz (tests/integrations/test_burr_ray.py): __context, append to n_history ------------

@action(reads=["n"], writes=["n", "original_n"])
def initial(state: State, __context: ApplicationContext) -> State:
    CALLS.append("initial")
    return state.update(original_n=state["n"])


@action(reads=["n"], writes=["n", "n_history"])
def even(state: State) -> State:
    CALLS.append("even")
    return state.update(n=state["n"] // 2).append(n_history=state["n"])


@action(reads=["n"], writes=["n", "n_history"])
def odd(state: State) -> State:
    CALLS.append("odd")
    return state.update(n=3 * state["n"] + 1).append(n_history=state["n"])


def collatz_graph() -> Graph:
    return (
        GraphBuilder()
        .with_actions(initial, even, odd, result=Result("n_history"))
        .with_transitions(
            (["initial", "even"], "result", expr("n == 1")),
            (["initial", "even", "odd"], "even", expr("n % 2 == 0")),
            (["initial", "even", "odd"], "odd", expr("n % 2 != 0")),
        )
        .build()
    )


def collatz_nodes(n: int) -> list:
    """The even/odd steps Burr takes from n down to 1."""
    nodes = []
    while n != 1:
        nodes.append("even" if n % 2 == 0 else "odd")
        n = n // 2 if n % 2 == 0 else 3 * n + 1
    return nodes


def collatz_app() -> App:
    # 27 takes 111 steps: Burr's n_history ends with 111 entries
    return App("collatz", collatz_graph(), "initial", {"n": 27}, [(None, None)],
               mid="even", mid_occurrence=10, edit_at="odd", edit={"n": 7},
               executed_after_edit=collatz_nodes(7) + ["result"])


class ParallelCollatz(MapStates):
    """A recursive sub-application per item, as in Burr's ray test."""

    def states(self, state: State, context: ApplicationContext,
               inputs: Dict[str, Any]) -> Generator[State, None, None]:
        for item in state["ns"]:
            yield state.update(n=item)

    def action(self, state: State, inputs: Dict[str, Any]) -> RunnableGraph:
        return RunnableGraph(collatz_graph(), entrypoint="initial", halt_after=["result"])

    def reduce(self, state: State, results: Generator[State, None, None]) -> State:
        return state.update(counts={str(r["original_n"]): len(r["n_history"]) for r in results})

    @property
    def reads(self) -> list:
        return ["ns"]

    @property
    def writes(self) -> list:
        return ["counts"]


def parallel_collatz_app() -> App:
    graph = (
        GraphBuilder()
        .with_actions(parallel_collatz=ParallelCollatz(), final=Result("counts"))
        .with_transitions(("parallel_collatz", "final"))
        .build()
    )
    return App("parallel-collatz", graph, "parallel_collatz", {"ns": [6, 7, 9]}, [(None, None)],
               mid="parallel_collatz", edit_at="parallel_collatz", edit={"ns": [6, 7, 10]},
               executed_after_edit=["parallel_collatz", "final"])


# --- examples/pytest: MapStates over three hypotheses, an LLM call in each ---------------------

HYPOTHESES = ["Common cold", "Sprained ankle", "Broken arm"]


@action(reads=["audio"], writes=["transcription"])
def transcribe_audio(state: State) -> State:
    CALLS.append("transcribe_audio")
    return state.update(transcription=state["audio"])  # the example's audio is text already


@action(reads=["hypothesis", "transcription"], writes=["diagnosis"])
def run_hypothesis(state: State) -> State:
    CALLS.append("run_hypothesis")
    prompt = (f"Diagnosis hypothesis: {state['hypothesis']}\n\nTranscription:\n"
              f"```{state['transcription']}```\n\nAnswer 'yes', 'no' or 'unsure'.")
    return state.update(diagnosis=rewind.llm.chat([
        {"role": "system", "content": "You are a methodical doctor."},
        {"role": "user", "content": prompt},
    ]))


class MultipleHypotheses(MapStates):
    def action(self, state: State, inputs: Dict[str, Any]) -> Callable:
        return run_hypothesis

    def states(self, state: State, context: ApplicationContext,
               inputs: Dict[str, Any]) -> Generator[State, None, None]:
        for hypothesis in HYPOTHESES:
            yield state.update(hypothesis=hypothesis)

    def reduce(self, state: State, states: Generator[State, None, None]) -> State:
        outputs = [{"hypothesis": s["hypothesis"], "diagnosis": s["diagnosis"]} for s in states]
        return state.update(diagnosis_outputs=outputs)

    @property
    def reads(self) -> List[str]:
        return ["transcription"]

    @property
    def writes(self) -> List[str]:
        return ["diagnosis_outputs"]


@action(reads=["diagnosis_outputs"], writes=["final_diagnosis"])
def determine_diagnosis(state: State) -> State:
    CALLS.append("determine_diagnosis")
    possible = [d for d in state["diagnosis_outputs"] if d["diagnosis"].lower() == "yes"]
    if len(possible) == 1:
        return state.update(final_diagnosis=possible[0]["hypothesis"])
    if possible:
        return state.update(final_diagnosis="Need further clarification.")
    return state.update(final_diagnosis="Healthy individual")


def hypotheses_app() -> App:
    graph = (
        GraphBuilder()
        .with_actions(transcribe_audio=transcribe_audio, hypotheses=MultipleHypotheses(),
                      determine_diagnosis=determine_diagnosis, final=Result("final_diagnosis"))
        .with_transitions(("transcribe_audio", "hypotheses"),
                          ("hypotheses", "determine_diagnosis"), ("determine_diagnosis", "final"))
        .build()
    )
    audio = "Patient exhibits mucus dripping from nostrils and coughing."
    limp = "Patient has a limp and is unable to flex right ankle. Ankle is swollen."
    # the offline model never answers a bare "yes": the final diagnosis, and so `final`, stay put
    return App("hypotheses", graph, "transcribe_audio", {"audio": audio}, [(None, None)],
               mid="hypotheses", edit_at="hypotheses", edit={"transcription": limp},
               executed_after_edit=["hypotheses", "determine_diagnosis"])


# --- tests/core/test_parallelism.py: Input(), MapStates over a bound action, Result() ---------

@action(reads=["input_number", "number_to_add"], writes=["output_number"])
def simple_single_fn_subgraph(state: State, additional_number: int = 1,
                              identifying_number: int = 1000) -> State:
    CALLS.append("simple_single_fn_subgraph")
    return state.update(output_number=state["input_number"] + state["number_to_add"]
                        + additional_number + identifying_number)


class MapStatesSync(MapStates):
    def states(self, state: State, context: ApplicationContext,
               inputs: Dict[str, Any]) -> Generator[State, None, None]:
        for input_number in state["input_numbers_in_state"]:
            yield state.update(input_number=input_number, number_to_add=10)

    def action(self, state: State, inputs: Dict[str, Any]) -> Action:
        return simple_single_fn_subgraph.bind(identifying_number=0)

    def reduce(self, state: State, states: Generator[State, None, None]) -> State:
        new_state = state  # appends to a field it writes but does not read
        for output_state in states:
            new_state = new_state.append(output_numbers_in_state=output_state["output_number"])
        return new_state

    @property
    def reads(self) -> list:
        return ["input_numbers_in_state"]

    @property
    def writes(self) -> list:
        return ["output_numbers_in_state"]


def map_states_input_app() -> App:
    graph = (
        GraphBuilder()
        .with_actions(initial_action=Input("input_numbers_in_state"), map_action=MapStatesSync(),
                      final_action=Result("output_numbers_in_state"))
        .with_transitions(("initial_action", "map_action"), ("map_action", "final_action"))
        .build()
    )
    return App("map-states-input", graph, "initial_action", {},
               [({"input_numbers_in_state": [100, 200, 300]}, None)],
               mid="map_action", edit_at="map_action",
               edit={"input_numbers_in_state": [100, 200, 400]},
               executed_after_edit=["map_action", "final_action"])


# --- async actions ---------------------------------------------------------------------------

@action(reads=["topic"], writes=["outline"])
async def outline(state: State) -> State:
    CALLS.append("outline")
    return state.update(outline=rewind.llm.chat([{"role": "user", "content": f"Outline: {state['topic']}"}]))


@action(reads=["outline"], writes=["draft", "revisions"])
async def write_draft(state: State) -> State:
    CALLS.append("write_draft")
    return state.update(draft=f"Draft following: {state['outline']}").increment(revisions=1)


@action(reads=["draft"], writes=["stats"])
def count_words(state: State) -> State:
    CALLS.append("count_words")
    return state.update(stats={"words": len(state["draft"].split()), "chars": len(state["draft"])})


def async_app() -> App:
    graph = (
        GraphBuilder()
        .with_actions(outline=outline, write_draft=write_draft, count_words=count_words)
        .with_transitions(("outline", "write_draft"), ("write_draft", "count_words"))
        .build()
    )
    # revisions starts at 2: an increment that starts from nothing would end at 1, not 3
    return App("async", graph, "outline", {"topic": "wasps", "revisions": 2}, [(None, None)],
               mid="write_draft", edit_at="write_draft", edit={"outline": "1. nests 2. stings"},
               executed_after_edit=["write_draft", "count_words"])


# --- a research step that fails until its cause is fixed (for resume) -------------------------

@action(reads=["question"], writes=["plan", "log"])
def plan_search(state: State) -> State:
    CALLS.append("plan_search")
    plan = rewind.llm.chat([{"role": "user", "content": f"Plan a search for: {state['question']}"}])
    return state.update(plan=plan).append(log="planned")


@action(reads=["plan"], writes=["sources", "log"])
def fetch_sources(state: State) -> State:
    CALLS.append("fetch_sources")
    if SETTINGS["search_down"]:
        raise ConnectionError("search backend is down")
    return state.update(sources=[f"doc:{len(state['plan'])}", "doc:burr"]).append(log="fetched")


@action(reads=["question", "sources"], writes=["answer", "log"])
def write_answer(state: State) -> State:
    CALLS.append("write_answer")
    answer = rewind.llm.chat([{"role": "user", "content": f"{state['question']} {state['sources']}"}])
    return state.update(answer=answer).append(log="answered")


def flaky_research_app() -> App:
    graph = (
        GraphBuilder()
        .with_actions(plan_search, fetch_sources, write_answer)
        .with_transitions(("plan_search", "fetch_sources"), ("fetch_sources", "write_answer"))
        .build()
    )
    return App("flaky-research", graph, "plan_search", {"question": "Why do wasps sting?", "log": []},
               [(None, None)], mid="fetch_sources", edit_at="fetch_sources",
               edit={"plan": "search entomology papers"},
               executed_after_edit=["fetch_sources", "write_answer"])


# --- what Burr's update does with the whole state: deleting a field the node does not read,
# setting one it does not declare (a function action may; Burr keeps it) ------------------------

@action(reads=["topic"], writes=["draft", "scratch"])
def draft_notes(state: State) -> State:
    CALLS.append("draft_notes")
    return state.update(draft=f"notes on {state['topic']}", scratch=["tmp", state["topic"]])


@action(reads=["draft"], writes=["summary"])
def tidy_up(state: State) -> State:
    """Drops the scratch pad it never reads, as Burr apps clean up after themselves."""
    CALLS.append("tidy_up")
    return state.update(summary=state["draft"].upper()).wipe(delete=["scratch"])


@action(reads=["summary"], writes=["length"])
def tally(state: State) -> State:
    """Also records `words`, which it does not declare: Burr keeps it in the state."""
    CALLS.append("tally")
    return state.update(length=len(state["summary"]), words=len(state["summary"].split()))


@action(reads=["words"], writes=["verdict"])
def judge(state: State) -> State:
    CALLS.append("judge")
    return state.update(verdict="long" if state["words"] > 3 else "short")


@action(reads=["cfg"], writes=["count"])
def register_item(state: State) -> State:
    """Changes a field it only reads, in place: Burr's state shares the object, so the change
    is in the state after the step (the next node sees it)."""
    CALLS.append("register_item")
    state["cfg"]["items"].append("x")
    return state.update(count=len(state["cfg"]["items"]))


@action(reads=["cfg"], writes=["seen"])
def list_items(state: State) -> State:
    CALLS.append("list_items")
    return state.update(seen=list(state["cfg"]["items"]))


def in_place_app() -> App:
    graph = (
        GraphBuilder()
        .with_actions(register_item, list_items)
        .with_transitions(("register_item", "list_items"))
        .build()
    )
    return App("in-place", graph, "register_item", {"cfg": {"items": []}}, [(None, None)],
               mid="register_item", edit_at="register_item", edit={"cfg": {"items": ["a"]}},
               executed_after_edit=["register_item", "list_items"])


def whole_state_app() -> App:
    graph = (
        GraphBuilder()
        .with_actions(draft_notes, tidy_up, tally, judge)
        .with_transitions(("draft_notes", "tidy_up"), ("tidy_up", "tally"), ("tally", "judge"))
        .build()
    )
    return App("whole-state", graph, "draft_notes", {"topic": "wasps"}, [(None, None)],
               mid="tidy_up", edit_at="tidy_up", edit={"draft": "a much longer set of notes on wasps"},
               executed_after_edit=["tidy_up", "tally", "judge"])


# --- keep-unread: wipe(keep=) and subset naming fields the node neither reads nor writes ------
# (a stranger's find: Burr keeps `history`, which is in the whole state and in `keep`; the view
# the node ran on never held it, and Rewind deleted it)

@action(reads=["a"], writes=["k"])
def trim(state: State) -> State:
    CALLS.append("trim")
    return state.update(k=state["a"] * 10).wipe(keep=["a", "k", "history", "notes"])


@action(reads=["history"], writes=["n"])
def count_history(state: State) -> State:
    CALLS.append("count_history")
    return state.update(n=len(state["history"]))


@action(reads=["k"], writes=["m"])
def narrow(state: State) -> State:
    CALLS.append("narrow")
    return state.update(m=state["k"] + 1).subset("k", "m", "history", "n")


def keep_unread_app() -> App:
    graph = (
        GraphBuilder()
        .with_actions(trim, count_history, narrow)
        .with_transitions(("trim", "count_history"), ("count_history", "narrow"))
        .build()
    )
    return App("keep-unread", graph, "trim", {"a": 1, "history": ["h1", "h2"], "scratch": "x"},
               [(None, None)], mid="trim", edit_at="trim", edit={"a": 2},
               executed_after_edit=["trim", "narrow"])


APPS = {
    "counter-burr": lambda: counter_app("burr"),
    "counter-rewind": lambda: counter_app("rewind"),
    "counter-class": lambda: counter_app("class"),
    "chatbot": chatbot_app,
    "collatz": collatz_app,
    "parallel-collatz": parallel_collatz_app,
    "hypotheses": hypotheses_app,
    "map-states-input": map_states_input_app,
    "async": async_app,
    "flaky-research": flaky_research_app,
    "whole-state": whole_state_app,
    "in-place": in_place_app,
    "keep-unread": keep_unread_app,
}
