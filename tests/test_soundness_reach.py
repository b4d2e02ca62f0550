"""What a node's key must also hold, found by a stranger's tests beside plain Burr: an object
of the user's class given with `.bind()` (it was known by its type name only, so two
differently configured objects shared one entry), a file read through a symlink that is
re-pointed, `os.environb`, and the model chosen in settings (`REWIND_MODEL`) that a model call
naming no model gets. Each was served stale before."""

from __future__ import annotations

import os

import pytest

from burr.core import ApplicationBuilder
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, action


class Formatter:
    def __init__(self, prefix):
        self.prefix = prefix

    def render(self, text):
        return self.prefix + text


@action(reads=["topic"], writes=["out"])
def make(state, fmt):
    return state.update(out=fmt.render(state["topic"]))


def _one_node(name: str, node) -> tuple:
    graph = GraphBuilder().with_actions(make=node).with_transitions().build()
    return graph, Pipeline(name=name, graph=graph, entrypoint="make")


def _burr(graph, **state):
    app = ApplicationBuilder().with_graph(graph).with_entrypoint("make").with_state(**state).build()
    return app.run(halt_after=["make"])[2]


def _hit_then_rerun(tmp_path, name: str, node, change) -> tuple:
    """Run a one-node pipeline, check a no-edit fork hits, `change()`, fork again: (the new
    fork's step, its `out`, plain Burr's `out` now, the first run's `out`)."""
    graph, pipeline = _one_node(name, node)
    with Rewind(str(tmp_path / "r.db")) as rw:
        run = rw.run(pipeline, {"topic": "bees"})
        assert rw.fork(run.id, at="make").steps[-1].status == "cached"
        change()
        step = rw.fork(run.id, at="make").steps[-1]
        return (step, rw.state_at(step)["out"], _burr(graph, topic="bees")["out"],
                rw.state_at(run.steps[-1])["out"])


def test_objects_bound_with_bind_are_keyed_by_what_they_hold(tmp_path):
    with Rewind(str(tmp_path / "r.db")) as rw:
        for prefix in ("v1 ", "v2 ", "v1 "):
            graph, pipeline = _one_node("bind", make.bind(fmt=Formatter(prefix)))
            run = rw.run(pipeline, {"topic": "bees"})
            assert rw.state_at(run.steps[-1])["out"] == _burr(graph, topic="bees")["out"] == prefix + "bees"
        assert run.steps[-1].status == "cached"  # the same configuration again: the same key


def test_a_file_read_through_a_repointed_symlink_reruns(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v1.txt").write_text("v1 ")
    (tmp_path / "v2.txt").write_text("v2 ")
    os.symlink("v1.txt", tmp_path / "current.txt")

    @action(reads=["topic"], writes=["out"])
    def reads_link(state):
        with open("current.txt") as f:
            return state.update(out=f.read() + state["topic"])

    graph, pipeline = _one_node("link", reads_link)
    with Rewind(str(tmp_path / "r.db")) as rw:
        run = rw.run(pipeline, {"topic": "bees"})
        os.remove(tmp_path / "current.txt")
        os.symlink("v2.txt", tmp_path / "current.txt")
        fork = rw.fork(run.id, at="make")
        assert fork.steps[-1].status == "executed" and "current.txt" in fork.steps[-1].reason
        assert rw.state_at(fork.steps[-1])["out"] == _burr(graph, topic="bees")["out"] == "v2 bees"


def test_a_variable_read_through_os_environb_reruns(tmp_path, monkeypatch):
    monkeypatch.setenv("REWIND_TEST_GREETING", "v1 ")

    @action(reads=["topic"], writes=["out"])
    def reads_bytes(state):
        return state.update(out=os.environb[b"REWIND_TEST_GREETING"].decode() + state["topic"])

    step, ours, burrs, _ = _hit_then_rerun(
        tmp_path, "environb", reads_bytes, lambda: monkeypatch.setenv("REWIND_TEST_GREETING", "v2 "))
    assert step.status == "executed" and "REWIND_TEST_GREETING" in step.reason
    assert ours == burrs == "v2 bees"


def test_the_model_chosen_in_settings_is_part_of_a_model_calls_key(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("REWIND_MODEL", "sim-small")

    @action(reads=["topic"], writes=["out"])
    def asks(state):
        return state.update(out=rewind.llm.chat([{"role": "user", "content": state["topic"]}]))

    step, ours, burrs, before = _hit_then_rerun(
        tmp_path, "model", asks, lambda: monkeypatch.setenv("REWIND_MODEL", "sim-large"))
    assert step.status == "executed"
    assert ours == burrs != before


def test_the_fork_plan_says_what_the_fork_will_find(tmp_path, monkeypatch):
    """`plan_fork` once said "stays cached, 0 tokens" for nodes the fork then re-ran because a
    file or an environment variable they read had changed, or the model endpoint had."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompt.txt").write_text("v1 ")
    monkeypatch.setenv("REWIND_TEST_TONE", "calm")

    @action(reads=["topic"], writes=["a"])
    def reads_file(state):
        with open("prompt.txt") as f:
            return state.update(a=f.read() + state["topic"])

    @action(reads=["a"], writes=["b"])
    def reads_env(state):
        return state.update(b=state["a"] + os.environ["REWIND_TEST_TONE"])

    graph = (GraphBuilder().with_actions(first=reads_file, second=reads_env)
             .with_transitions(("first", "second")).build())
    pipeline = Pipeline("planned", graph, "first")
    with Rewind(str(tmp_path / "r.db")) as rw:
        run = rw.run(pipeline, {"topic": "bees"})
        assert rw.plan_fork(run.id, at="first").nodes("cached") == ["first", "second"]
        monkeypatch.setenv("REWIND_TEST_TONE", "loud")
        plan = rw.plan_fork(run.id, at="first")
        assert plan.nodes("cached") == ["first"]
        assert any("REWIND_TEST_TONE" in r.reason for r in plan.rows if r.node == "second")
        (tmp_path / "prompt.txt").write_text("v2 ")
        plan = rw.plan_fork(run.id, at="first")
        assert "first" not in plan.nodes("cached")
        fork = rw.fork(run.id, at="first")
        assert [s.status for s in fork.steps] == ["executed", "executed"]


_READS = {  # how the node reads `data/a.txt` (or lists `data/`), and the edit that must re-run it
    "os.open and os.read": ("os.read(os.open('data/a.txt', os.O_RDONLY), 100).decode()", "edit"),
    "linecache.getline": ("__import__('linecache').getline('data/a.txt', 1)", "edit"),
    "open(..., 'r+')": ("open('data/a.txt', 'r+').read()", "edit"),
    "os.listdir": ("'|'.join(sorted(os.listdir('data')))", "add"),
    "glob.glob": ("'|'.join(sorted(__import__('glob').glob('data/*.txt')))", "add"),
    "Path.iterdir": ("'|'.join(sorted(p.name for p in __import__('pathlib').Path('data').iterdir()))", "add"),
}


@pytest.mark.parametrize("how", sorted(_READS))
def test_a_file_read_or_a_folder_listed_another_way_reruns_when_it_changes(tmp_path, monkeypatch, how):
    expr, change = _READS[how]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("v1\n")
    scope = {"os": os}
    exec(f"def reads(state):\n    return state.update(out={expr} + state['topic'])\n", scope)
    node = action(reads=["topic"], writes=["out"])(scope["reads"])
    target = ("a.txt", "v2\n") if change == "edit" else ("b.txt", "new")
    step, ours, burrs, _ = _hit_then_rerun(
        tmp_path, "reads", node, lambda: (tmp_path / "data" / target[0]).write_text(target[1]))
    assert step.status == "executed", how
    assert ours == burrs


def test_a_package_looking_up_its_version_inside_a_step_lists_nothing(tmp_path, monkeypatch):
    """`importlib.metadata` lists every `sys.path` entry, the working directory among them, when
    a package imported inside a step asks its own version: that listing is not the step's input
    (before, a file appearing in the project made every such step miss)."""
    import importlib.metadata

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))

    @action(reads=["topic"], writes=["out"])
    def asks_version(state):
        return state.update(out=importlib.metadata.version("apache-burr") and state["topic"])

    graph, pipeline = _one_node("version", asks_version)
    with Rewind(str(tmp_path / "r.db")) as rw:
        run = rw.run(pipeline, {"topic": "bees"})
        assert "." not in run.steps[-1].files
        (tmp_path / "new_file.txt").write_text("x")
        assert rw.fork(run.id, at="make").steps[-1].status == "cached"


def test_file_functions_a_module_took_for_itself_still_record(tmp_path):
    """`from os import listdir` / `from io import open as OPEN` in a module imported after
    Rewind: the patches were installed at the first step, so such a module kept the originals
    and its reads were never keyed (a stranger's find). In a fresh process, as a user's app is."""
    import subprocess
    import sys
    import textwrap

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("v1")
    (tmp_path / "mod.py").write_text(textwrap.dedent("""
        from os import listdir
        from io import open as OPEN
        def names():
            return "|".join(sorted(listdir("docs")))
        def first():
            with OPEN("docs/a.txt") as f:
                return f.read()
    """))
    (tmp_path / "drive.py").write_text(textwrap.dedent("""
        import sys
        sys.path.insert(0, ".")
        import rewind, mod
        from burr.core.graph import GraphBuilder
        @rewind.action(reads=["topic"], writes=["out"])
        def make(state):
            return state.update(out=mod.names() + mod.first() + state["topic"])
        g = GraphBuilder().with_actions(make=make).with_transitions().build()
        with rewind.Rewind("r.db") as rw:
            if sys.argv[1] == "run":
                print(rw.run(rewind.Pipeline("p", g, "make"), {"topic": "x"}).id)
            else:
                rw.register(rewind.Pipeline("p", g, "make"))
                print(rw.fork(sys.argv[2], at="make").steps[-1].status)
    """))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def drive(*args) -> str:
        out = subprocess.run([sys.executable, "drive.py", *args], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.strip().splitlines()[-1]

    run_id = drive("run")
    assert drive("fork", run_id) == "cached"
    (tmp_path / "docs" / "b.txt").write_text("new")
    assert drive("fork", run_id) == "executed"  # a new file in the folder it lists
    assert drive("fork", run_id) == "cached"
    (tmp_path / "docs" / "a.txt").write_text("v2")
    assert drive("fork", run_id) == "executed"  # the file it opened
