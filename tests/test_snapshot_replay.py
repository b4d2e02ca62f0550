"""`rewind.testing` without pytest's collection: the file format, value types, a user's own
openai client (streamed or not), tool calls, refusals and the `rewind snapshot` / `replay`
commands. Pipelines are written into pytester's directory and replayed in this process."""

from __future__ import annotations

import importlib
import io
import json
import sys

import openai  # noqa: F401  (imported before pytester snapshots sys.modules)
import pytest

from rewind import Rewind
from rewind.testing import SnapshotError, load, replay, snapshot, snapshot_run

pytest_plugins = ["pytester"]

MODULES = ("kinds", "own_client", "tooly")

KINDS = '''
import datetime
from burr.core.graph import GraphBuilder
import rewind
from rewind import Pipeline, action

@action(reads=["topic"], writes=["pair", "when", "text"])
def shape(state):
    text = rewind.llm.chat([{"role": "user", "content": "Describe " + state["topic"]}], model="sim-small")
    return state.update(pair=(1, "a"), when=datetime.date(2024, 5, 17), text=text)

@action(reads=["pair", "when"], writes=["label"])
def label(state):
    return state.update(label=f"{state['pair'][1]}-{state['when'].isoformat()}")

graph = GraphBuilder().with_actions(shape=shape, label=label).with_transitions(("shape", "label")).build()
pipeline = Pipeline(name="kinds", graph=graph, entrypoint="shape")
'''

OWN_CLIENT = '''
import httpx2
import openai
from burr.core.graph import GraphBuilder
from rewind import Pipeline, action, sim

BASE = "http://simulator.rewind.invalid/v1"

def make_client():
    return openai.OpenAI(api_key="x", base_url=BASE, max_retries=0,
                         http_client=httpx2.Client(transport=httpx2.MockTransport(sim.handle_request)))

@action(reads=["topic"], writes=["plain", "streamed"])
def ask(state):
    client = make_client()
    msgs = [{"role": "user", "content": "Explain " + state["topic"]}]
    plain = client.chat.completions.create(model="sim-small", messages=msgs, temperature=0)
    stream = client.chat.completions.create(model="sim-small", messages=msgs, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    return state.update(plain=plain.choices[0].message.content, streamed=streamed)

graph = GraphBuilder().with_actions(ask=ask).build()
pipeline = Pipeline(name="own_client", graph=graph, entrypoint="ask")
'''

TOOLY = '''
from burr.core.graph import GraphBuilder
from rewind import Pipeline, action, tool

RUNS = []

@tool(name="tooly.lookup")
def lookup(word):
    RUNS.append(word)
    return {"word": word, "length": len(word)}

@action(reads=["word"], writes=["info"])
def define(state):
    return state.update(info=lookup(state["word"]))

graph = GraphBuilder().with_actions(define=define).build()
pipeline = Pipeline(name="tooly", graph=graph, entrypoint="define")
'''


@pytest.fixture
def project(pytester, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    pytester.makepyfile(kinds=KINDS, own_client=OWN_CLIENT, tooly=TOOLY)
    pytester.syspathinsert()
    for name in MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield pytester
    for name in MODULES:
        sys.modules.pop(name, None)


def forget() -> None:
    for name in MODULES:
        sys.modules.pop(name, None)


def record(pytester, module: str, state: dict, repeats: int = 1, runs: int = 1):
    """Run the pipeline `runs` times; (rw, last run) — the caller closes rw."""
    mod = importlib.import_module(module)
    rw = Rewind(str(pytester.path / "runs.db"))
    for _ in range(runs):
        run = rw.run(mod.pipeline, state)
    assert run.status == "completed", run.error
    return rw, run


def edit(pytester, module: str, old: str, new: str) -> None:
    path = pytester.path / f"{module}.py"
    text = path.read_text()
    assert old in text and len(old) != len(new)
    path.write_text(text.replace(old, new))
    forget()


def test_the_file_is_canonical_and_the_same_run_gives_the_same_bytes(project):
    rw, run = record(project, "kinds", {"topic": "tides"})
    with rw:
        a = snapshot(rw, run.id, project.path / "a.json")
        b = snapshot(rw, run.id, project.path / "b.json")
    forget()
    text = a.read_text()
    assert text == b.read_text() and text.endswith("}\n")
    doc = json.loads(text)
    assert text == json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert "latency" not in text and "created_at" not in text
    assert doc["format"] == "rewind-snapshot" and doc["version"] == 1
    shape = doc["steps"][0]
    # plain JSON stays plain; only what JSON cannot spell carries a type tag
    assert shape["outputs"]["pair"] == {"__rw__": "tuple", "v": [1, "a"]}
    assert shape["outputs"]["when"] == {"__rw__": "date", "v": "2024-05-17"}
    assert isinstance(shape["outputs"]["text"], str)
    assert shape["calls"][0]["messages"] == [{"role": "user", "content": "Describe tides"}]
    assert shape["audit"] == {"distinct": 1, "samples": 3, "stable": True}


def test_replayed_values_keep_their_python_types(project):
    rw, run = record(project, "kinds", {"topic": "tides"})
    with rw:
        path = snapshot(rw, run.id, project.path / "k.json")
    forget()
    edit(project, "kinds", "return state.update(label=f", "return state.update(label = f")
    result = replay(path).check()
    assert result.node("shape").action == "served"
    assert result.node("label").action == "executed" and result.node("label").verdict == "same"
    assert result.outputs("shape")["pair"] == (1, "a")
    assert result.outputs("label")["label"] == "a-2024-05-17"


def test_a_cache_hit_run_is_snapshotted_with_the_calls_of_the_run_that_executed(project):
    rw, run = record(project, "kinds", {"topic": "tides"}, runs=2)
    with rw:
        assert [s.status for s in run.steps] == ["cached", "cached"]
        doc = snapshot_run(rw, run.id, repeats=0)
    forget()
    assert doc["steps"][0]["calls"] and doc["steps"][0]["audit"] == {"samples": 0, "stable": None}
    edit(project, "kinds", 'content": "Describe " + state["topic"]}]',
         'content": "Describe " + state["topic"]}]  ')
    result = replay(doc).check()  # re-executed, its call served from the source run's record
    assert result.node("shape").action == "executed"


def test_a_users_own_openai_client_is_served_streamed_or_not_with_no_network(project):
    rw, run = record(project, "own_client", {"topic": "tides"})
    with rw:
        path = snapshot(rw, run.id, project.path / "c.json")
        step = run.steps[0]
        assert len(step.calls) == 2
    forget()
    # today's code talks to a port where nothing listens: only the snapshot can answer
    edit(project, "own_client", 'BASE = "http://simulator.rewind.invalid/v1"', 'BASE = "http://127.0.0.1:9/v1"')
    edit(project, "own_client", "http_client=httpx2.Client(transport=httpx2.MockTransport(sim.handle_request))",
         "http_client=httpx2.Client()")
    result = replay(path).check()
    ask = result.node("ask")
    assert ask.action == "executed" and ask.verdict == "same"
    assert ask.outputs["plain"] == ask.outputs["streamed"] != ""
    assert not ask.new_calls and not ask.dropped_calls


def test_tool_calls_are_served_and_a_new_one_fails_naming_the_tool(project):
    rw, run = record(project, "tooly", {"word": "tide"})
    with rw:
        path = snapshot(rw, run.id, project.path / "t.json")
    forget()
    assert load(path)["steps"][0]["tools"][0]["tool"] == "tooly.lookup"
    edit(project, "tooly", 'info=lookup(state["word"])', 'info=lookup(state["word"] )')
    result = replay(path).check()
    assert sys.modules["tooly"].RUNS == []  # served: the tool did not run
    edit(project, "tooly", 'info=lookup(state["word"] )', 'info=lookup(state["word"] + "s")')
    result = replay(path)
    assert not result.ok
    text = result.report()
    assert "diverged at node `define`" in text
    assert "tool call not in the snapshot: tooly.lookup" in text
    assert sys.modules["tooly"].RUNS == []
    # recording runs the tool and keeps its result
    recorded = replay(path, record="new")
    assert recorded.ok and sys.modules["tooly"].RUNS[0] == "tides"
    assert recorded.document["steps"][0]["tools"][0]["result"] == {"length": 5, "word": "tides"}


def test_refusals_name_the_file_and_what_to_do(project, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(SnapshotError, match="is not a Rewind snapshot"):
        load(bad)
    bad.write_text('{"format": "rewind-snapshot", "version": 99}')
    with pytest.raises(SnapshotError, match="version 99.*re-record it with `rewind snapshot`"):
        load(bad)
    bad.write_text("{not json")
    with pytest.raises(SnapshotError, match="not valid JSON"):
        load(bad)
    rw, run = record(project, "tooly", {"word": "tide"})
    with rw:
        rw.store.update_run(run.id, status="failed")
        with pytest.raises(SnapshotError, match=f"run {run.id} is failed: snapshot a completed or halted run"):
            snapshot_run(rw, run.id)
        with pytest.raises(SnapshotError, match="repeats must be a non-negative integer"):
            snapshot_run(rw, run.id, repeats=-1)


def _cli(argv: list) -> tuple:
    """The snapshot commands through a parser built as `rewind.cli` builds its own."""
    from rewind.cli import snapshot as commands
    from rewind.cli.parser import Parser

    p = Parser(prog="rewind")
    p.add_argument("--db", default=None)
    sub = p.add_subparsers(dest="command", parser_class=Parser)

    def add(name, fn, help, quiet=False):
        sp = sub.add_parser(name, help=help)
        sp.set_defaults(func=fn, prog="rewind")
        if quiet:
            sp.add_argument("-q", "--quiet", action="store_true")
        return sp

    commands.add_commands(add)
    args = p.parse_args(argv)
    out = io.StringIO()
    return args.func(args, out), out.getvalue()


def test_the_snapshot_and_replay_commands(project):
    rw, run = record(project, "tooly", {"word": "tide"})
    rw.close()
    target = project.path / "tests" / "rewind" / "tooly.json"
    code, out = _cli(["--db", str(project.path / "runs.db"), "snapshot", run.id, "--to", str(target),
                      "--repeats", "1", "-q", "--pipeline", "tooly:pipeline"])
    assert code == 0 and f"snapshot of run {run.id} (1 steps) written to {target}" in out
    assert load(target)["pipeline"]["spec"] == "tooly:pipeline"
    forget()
    code, out = _cli(["replay", str(target)])
    assert code == 0 and "replayed: 1 steps, no divergence" in out
    edit(project, "tooly", 'info=lookup(state["word"])', 'info=lookup(state["word"] + "s")')
    code, out = _cli(["replay", str(target)])
    assert code == 1 and "tool call not in the snapshot: tooly.lookup" in out
