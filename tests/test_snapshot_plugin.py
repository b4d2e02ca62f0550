"""The pytest plugin (`rewind.testing.plugin`) on small pipelines, through pytester.

Each test writes a pipeline into pytester's directory, records a run and snapshots it in this
process, edits the pipeline's code the way a user would, then runs pytest on the snapshot with
`-p rewind.testing.plugin` (so nothing depends on the entry point being installed). The user
modules are dropped from `sys.modules` after the snapshot and no bytecode is written, so the
inner pytest imports the edited code.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import urllib.request

import openai  # noqa: F401  (imported before pytester snapshots sys.modules: one openai per process)
import pytest

from rewind import Rewind
from rewind.testing import snapshot
from tests.test_demo_over_http import free_port, wait_until_serving

pytest_plugins = ["pytester"]

PLUGIN = ("-p", "no:rewind", "-p", "rewind.testing.plugin", "-p", "no:cacheprovider")  # the module itself, not the installed entry point
USER_MODULES = ("prompts", "pipe", "noisy")

PROMPTS = '''
SYSTEM = "You are a careful writer. Answer in three short sentences."
HEADER = "Summary"
'''

PIPE = '''
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, action

import prompts


@action(reads=["topic"], writes=["draft"])
def draft(state, temperature: float = 0.0):
    text = rewind.llm.chat([{"role": "system", "content": prompts.SYSTEM},
                            {"role": "user", "content": "Write about " + state["topic"]}],
                           model="sim-small", temperature=temperature)
    return state.update(draft=text)


@action(reads=["draft"], writes=["final"])
def polish(state):
    return state.update(final=prompts.HEADER + ":\\n" + state["draft"])


graph = (GraphBuilder().with_actions(draft=draft, polish=polish)
         .with_transitions(("draft", "polish")).build())
pipeline = Pipeline(name="tiny", graph=graph, entrypoint="draft")
'''

NOISY = '''
import random

from burr.core.graph import GraphBuilder

from rewind import Pipeline, action

TEXT = "the tide comes in twice a day and goes out twice a day along the whole coast of the bay"


@action(reads=["topic"], writes=["note"])
def note(state):
    return state.update(note=TEXT + " ref " + str(random.randrange(10**9)))


graph = GraphBuilder().with_actions(note=note).build()
pipeline = Pipeline(name="noisy", graph=graph, entrypoint="note")
'''


@pytest.fixture
def project(pytester, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # an edit of the same size in the
    # same second must not be hidden by a stale .pyc
    pytester.makepyfile(prompts=PROMPTS, pipe=PIPE, noisy=NOISY)
    pytester.syspathinsert()
    for name in USER_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield pytester
    for name in USER_MODULES:
        sys.modules.pop(name, None)


def take(pytester, module: str = "pipe", state: dict = None, repeats: int = 2) -> str:
    """Run the module's pipeline, snapshot it under snaps/, and forget the user modules."""
    mod = importlib.import_module(module)
    try:
        with Rewind(str(pytester.path / "runs.db")) as rw:
            run = rw.run(mod.pipeline, state or {"topic": "tides"})
            assert run.status == "completed", run.error
            path = snapshot(rw, run.id, pytester.path / "snaps" / f"{module}.json", repeats=repeats)
    finally:
        for name in USER_MODULES:
            sys.modules.pop(name, None)
    return str(path)


def edit(pytester, module: str, old: str, new: str) -> None:
    path = pytester.path / f"{module}.py"
    text = path.read_text()
    assert old in text
    assert len(old) != len(new)  # a different size: no cache of the old source survives
    path.write_text(text.replace(old, new))


def replay_tests(pytester, *args: str):
    return pytester.runpytest(*PLUGIN, "snaps", *args)


def test_a_snapshot_passes_on_unchanged_code(project):
    path = take(project)
    doc = json.loads(open(path).read())
    assert doc["pipeline"]["spec"] == "pipe:pipeline"
    assert [s["node"] for s in doc["steps"]] == ["draft", "polish"]
    result = replay_tests(project, "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*snaps/pipe.json::replay PASSED*"])


def test_editing_a_prompt_constant_fails_at_that_node_naming_it_with_the_diff(project):
    take(project)
    edit(project, "prompts", "You are a careful writer.", "You are a terse, blunt writer.")
    result = replay_tests(project)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "diverged at node `draft` (step 1 of 2)" in out
    assert "draft ran again because `prompts.SYSTEM` changed" in out
    assert "model call not in the snapshot: chat.completions model='sim-small'" in out
    assert "-You are a careful writer. Answer in three short sentences." in out
    assert "+You are a terse, blunt writer. Answer in three short sentences." in out
    assert "--rewind-record=new" in out
    assert "`polish`" not in out  # the replay stopped at the first divergence


def test_an_output_constant_edit_shows_the_text_diff_of_the_output(project):
    take(project)
    edit(project, "prompts", 'HEADER = "Summary"', 'HEADER = "Abstract of it"')
    result = replay_tests(project)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "diverged at node `polish` (step 2 of 2)" in out
    assert "polish ran again because `prompts.HEADER` changed" in out
    assert "deterministic node: its output hash changed" in out
    assert "output `final`:" in out
    assert "-Summary:" in out and "+Abstract of it:" in out


def test_record_new_through_serve_llm_passes_and_rewrites_the_snapshot(project, monkeypatch, tmp_path):
    path = take(project)
    before = open(path).read()
    edit(project, "prompts", "You are a careful writer.", "You are a terse, blunt writer.")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "rewind", "serve-llm", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_serving(base, server)
        monkeypatch.setenv("OPENAI_BASE_URL", f"{base}/v1")
        result = replay_tests(project, "--rewind-record=new")
        with urllib.request.urlopen(f"{base}/_simulator/stats", timeout=5) as r:
            stats = json.load(r)
    finally:
        server.terminate()
        server.wait(timeout=10)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*rewind snapshots rewritten*", "*rewrote *pipe.json*draft*"])
    assert stats["chat_requests"] >= 1  # the new call went over HTTP to serve-llm
    after = open(path).read()
    assert after != before
    doc = json.loads(after)
    draft = doc["steps"][0]
    assert "terse, blunt" in draft["calls"][0]["messages"][0]["content"]
    assert draft["units"]["prompts.SYSTEM"] != json.loads(before)["steps"][0]["units"]["prompts.SYSTEM"]

    monkeypatch.delenv("OPENAI_BASE_URL")  # offline again: the rewritten snapshot replays green
    replay_tests(project).assert_outcomes(passed=1)
    assert open(path).read() == after


def test_a_nondeterministic_node_passes_within_the_noise_band(project):
    path = take(project, "noisy", repeats=3)
    audit = json.loads(open(path).read())["steps"][0]["audit"]
    assert audit["stable"] is False and len(audit["baseline"]) == 3
    assert audit["unstable_fields"] == ["note"]
    # a code change that leaves the text alone: the node re-runs, its jitter is within noise
    edit(project, "noisy", "def note(state):\n", "def note(state):  # reviewed\n")
    result = replay_tests(project, "-rA")
    result.assert_outcomes(passed=1)


def test_a_nondeterministic_node_fails_beyond_the_noise_band(project):
    take(project, "noisy", repeats=3)
    edit(project, "noisy", "the tide comes in twice a day and goes out twice a day",
         "error: upstream unavailable")
    result = replay_tests(project)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "diverged at node `note`" in out
    assert "`noisy.TEXT` changed" in out
    assert "beyond the noise band of 3 recorded samples" in out
    assert "+error: upstream unavailable along the whole coast" in out


def test_a_metric_hook_judges_a_node_instead_of_the_noise_band(project):
    take(project, "noisy", repeats=3)
    edit(project, "noisy", "the tide comes in twice a day and goes out twice a day",
         "error: upstream unavailable")
    project.makeconftest('''
def ends_with_a_ref(recorded, replayed):
    return " ref " in replayed["note"]

def pytest_rewind_metric(node, path):
    return ends_with_a_ref if node == "note" else None
''')
    replay_tests(project).assert_outcomes(passed=1)


def test_a_missing_model_call_fails_naming_the_request(project):
    take(project)
    edit(project, "pipe", "    return state.update(draft=text)\n",
         "    title = rewind.llm.chat([{'role': 'user', 'content': 'Give it a title: ' + text}],\n"
         "                            model='sim-small')\n"
         "    return state.update(draft=title + text)\n")
    result = replay_tests(project)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "diverged at node `draft`" in out
    assert "draft ran again because `pipe.draft` changed" in out
    assert "model call not in the snapshot: chat.completions model='sim-small'" in out
    assert "Give it a title: " in out


def test_record_mode_all_rerecords_every_call_and_keeps_an_unchanged_file(project):
    path = take(project)
    before = open(path).read()
    result = replay_tests(project, "--rewind-record=all")
    result.assert_outcomes(passed=1)
    assert open(path).read() == before  # same behaviour, same bytes: nothing to review
    assert "rewrote" not in result.stdout.str()


def test_the_rewind_replay_fixture_hands_the_replayed_run_to_a_test(project):
    take(project)
    edit(project, "prompts", 'HEADER = "Summary"', 'HEADER = "Abstract of it"')
    project.makepyfile(test_uses_replay='''
def test_replayed_outputs(rewind_replay):
    result = rewind_replay("snaps/pipe.json")
    assert not result.ok
    assert result.first_divergence.node == "polish"
    assert result.node("draft").action == "served"
    assert result.outputs("polish")["final"].startswith("Abstract of it:")

def test_check_raises_with_the_report(rewind_replay):
    import pytest
    with pytest.raises(AssertionError, match="diverged at node `polish`"):
        rewind_replay("snaps/pipe.json").check()
''')
    project.runpytest(*PLUGIN, "test_uses_replay.py").assert_outcomes(passed=2)


def test_a_bad_record_mode_is_a_usage_error(project):
    take(project)
    result = replay_tests(project, "--rewind-record=sometimes")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--rewind-record*invalid choice*"])
