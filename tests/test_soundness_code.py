"""Every edit a node depends on is a miss, in a new process, and nothing else is (issue 11).

A temp project holds user modules and a prompt file; each run is a fresh `python run.py`
subprocess against the same database, as a user editing code and re-running would do.
Status checks need only `code_fingerprint`; the prompt file and the reasons need the engine to
call `filewatch.track_reads`/`changed` and `describe_fingerprint`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import rewind
from rewind.keys import filewatch
from rewind.keys import changed_units, code_fingerprint, describe_fingerprint
from rewind.keys import canonical_hash, param_hash

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FILES = {
    "prompts.py": 'SYSTEM = "You are terse."\n',
    "textutil.py": textwrap.dedent('''\
        def squash(text):
            return " ".join(text.split())
    '''),
    "helpers.py": textwrap.dedent('''\
        import textutil

        def clean(text):
            return textutil.squash(text).lower()
    '''),
    "cyc_a.py": textwrap.dedent('''\
        import cyc_b

        def start(text):
            return cyc_b.middle(text, 2)

        def finish(text):
            return text + "!"
    '''),
    "cyc_b.py": textwrap.dedent('''\
        import cyc_a

        def middle(text, n):
            return cyc_a.finish(text * n) if n else cyc_a.start(text)
    '''),
    "kact.py": textwrap.dedent('''\
        from burr.core.action import Action

        TAG = "[t1]"

        def decorate(text):
            return TAG + " " + text

        class Tagger(Action):
            @property
            def reads(self):
                return ["q"]

            @property
            def writes(self):
                return ["f"]

            def run(self, state, **run_kwargs):
                return {"f": decorate(state["q"])}

            def update(self, result, state):
                return state.update(**result)
    '''),
    "prompts/answer.txt": "Answer in one line.\n",
    "app.py": textwrap.dedent('''\
        import cyc_a
        import helpers
        import prompts
        from burr.core.graph import GraphBuilder
        from helpers import clean
        from kact import Tagger
        from rewind import Pipeline, action

        @action(reads=["q"], writes=["a"])
        def use_attr(state):
            return state.update(a=prompts.SYSTEM + " " + state["q"])

        @action(reads=["q"], writes=["b"])
        def use_helper(state):
            return state.update(b=helpers.clean(state["q"]))

        @action(reads=["q"], writes=["c"])
        def use_from_import(state):
            return state.update(c=clean(state["q"]) + "?")

        @action(reads=["q"], writes=["d"])
        def use_file(state):
            with open("prompts/answer.txt", encoding="utf-8") as f:
                return state.update(d=f.read().strip() + " " + state["q"])

        @action(reads=["q"], writes=["e"])
        def use_cycle(state):
            return state.update(e=cyc_a.start(state["q"]))

        NODES = ["use_attr", "use_helper", "use_from_import", "use_file", "use_cycle", "tagger"]
        graph = (
            GraphBuilder()
            .with_actions(use_attr=use_attr, use_helper=use_helper, use_from_import=use_from_import,
                          use_file=use_file, use_cycle=use_cycle, tagger=Tagger())
            .with_transitions(*zip(NODES, NODES[1:]))
            .build()
        )
        pipeline = Pipeline(name="sound", graph=graph, entrypoint="use_attr")
    '''),
    "run.py": textwrap.dedent('''\
        import json, sys
        import rewind
        import app
        rw = rewind.Rewind(sys.argv[1])
        run = rw.run(app.pipeline, {"q": "  Hello   There "})
        print(json.dumps({"status": run.status, "error": run.error,
                          "steps": {s.node: [s.status, s.reason] for s in run.steps}}))
    '''),
}

# (what is edited, file, old text, new text, the nodes that must run again, the unit named)
EDITS = [
    ("module attribute", "prompts.py", "terse", "verbose", {"use_attr"}, "prompts.SYSTEM"),
    ("transitive helper", "textutil.py", '" ".join', '"_".join', {"use_helper", "use_from_import"},
     "textutil.squash"),
    ("helper cycle", "cyc_a.py", 'text + "!"', 'text + "?"', {"use_cycle"}, "cyc_a.finish"),
    ("class constant", "kact.py", '"[t1]"', '"[t2]"', {"tagger"}, "kact.TAG"),
    ("class helper", "kact.py", 'TAG + " "', 'TAG + ": "', {"tagger"}, "kact.decorate"),
    ("class method", "kact.py", 'decorate(state["q"])', 'decorate(state["q"].upper())', {"tagger"},
     "kact.Tagger.run"),
    ("prompt file", "prompts/answer.txt", "one line", "two lines", {"use_file"}, "prompts/answer.txt"),
]
NODES = ["use_attr", "use_helper", "use_from_import", "use_file", "use_cycle", "tagger"]


def _write(root, name, text):
    path = os.path.join(root, *name.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run_project(root, db) -> dict:
    """`python run.py DB` in a new process (its own hash seed); the JSON it printed last."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, ROOT]), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONHASHSEED": "random"}
    out = subprocess.run([sys.executable, "run.py", db], cwd=root, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "completed", got
    return got


def run_edits(root, files: dict, edits: list) -> dict:
    """Write `files` under `root`, run the project once, unchanged, then once after each edit
    `(what, file, old, new, ...)` applied on top of the last: {"first", "unchanged", what...}."""
    for name, text in files.items():
        _write(root, name, text)
    db = os.path.join(root, "rewind.db")
    results = {"first": run_project(root, db), "unchanged": run_project(root, db)}
    for what, name, old, new, *_ in edits:
        path = os.path.join(root, *name.split("/"))
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert old in text, (name, old)
        _write(root, name, text.replace(old, new))
        results[what] = run_project(root, db)
    return results


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Runs the project once, unchanged, then once per edit (each in a new process)."""
    results = run_edits(str(tmp_path_factory.mktemp("project")), FILES, EDITS)
    return {what: got["steps"] for what, got in results.items()}


def test_first_run_executes_everything_and_an_unchanged_rerun_hits(project):
    assert {n: s for n, (s, _r) in project["first"].items()} == {n: "executed" for n in NODES}
    assert {n: s for n, (s, _r) in project["unchanged"].items()} == {n: "cached" for n in NODES}


@pytest.mark.parametrize("edit", [e for e in EDITS if e[0] != "prompt file"], ids=lambda e: e[0])
def test_a_code_edit_reruns_exactly_the_nodes_that_reach_it(project, edit):
    what, _name, _old, _new, nodes, _unit = edit
    statuses = {n: s for n, (s, _r) in project[what].items()}
    assert statuses == {n: ("executed" if n in nodes else "cached") for n in NODES}


def test_an_edited_prompt_file_is_a_miss(project):
    """Needs the engine to wrap each step in `filewatch.track_reads()` and check
    `filewatch.changed(files)` before serving a hit."""
    statuses = {n: s for n, (s, _r) in project["prompt file"].items()}
    assert statuses == {n: ("executed" if n == "use_file" else "cached") for n in NODES}


@pytest.mark.parametrize("edit", EDITS, ids=lambda e: e[0])
def test_the_reason_names_the_edited_unit(project, edit):
    """Needs the engine to store `describe_fingerprint` units and name `changed_units`."""
    what, _name, _old, _new, nodes, unit = edit
    for node in nodes:
        status, reason = project[what][node]
        assert status == "executed" and unit in reason, (node, reason)


# --- the fingerprint itself, in-process -----------------------------------------------------


def _project_modules(tmp_path, monkeypatch):
    for name, text in FILES.items():
        if name.endswith(".py"):
            _write(str(tmp_path), name, text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("app", "prompts", "helpers", "textutil", "cyc_a", "cyc_b", "kact"):
        sys.modules.pop(name, None)
    import app

    return app


def test_describe_names_every_unit_the_node_reaches(tmp_path, monkeypatch):
    app = _project_modules(tmp_path, monkeypatch)
    assert "prompts.SYSTEM" in describe_fingerprint(app.use_attr)
    helper_units = describe_fingerprint(app.use_helper)
    assert {"app.use_helper", "helpers.clean", "textutil.squash"} <= set(helper_units)
    assert {"cyc_a.start", "cyc_a.finish", "cyc_b.middle"} <= set(describe_fingerprint(app.use_cycle))
    tagger = describe_fingerprint(sys.modules["kact"].Tagger)
    assert {"kact.Tagger", "kact.Tagger.run", "kact.decorate", "kact.TAG", "apache-burr"} <= set(tagger)
    # rebinding a unit in this process is seen too, and named
    before = describe_fingerprint(app.use_attr)
    code = code_fingerprint(app.use_attr)
    monkeypatch.setattr(sys.modules["prompts"], "SYSTEM", "changed")
    assert code_fingerprint(app.use_attr) != code
    assert changed_units(before, describe_fingerprint(app.use_attr)) == ["prompts.SYSTEM"]


def test_fingerprints_are_the_same_in_every_process(tmp_path):
    for name, text in FILES.items():
        _write(str(tmp_path), name, text)
    script = ("import json, app, kact; from rewind.keys.fingerprint import code_fingerprint as f; "
              "print(json.dumps([f(getattr(app, n)) for n in app.NODES[:-1]] + [f(kact.Tagger)]))")
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT]),
               "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path), env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        outs.add(out.stdout.strip())
    assert len(outs) == 1


def test_installed_packages_key_by_version_and_rewind_is_not_followed():
    import openai

    def calls_openai(state):
        return openai.OpenAI

    units = describe_fingerprint(calls_openai)
    assert units["openai"] == canonical_hash(openai.__version__)
    from rewind.pipelines import research

    assert all(u.startswith("rewind.pipelines.research.") for u in describe_fingerprint(research.plan))


def test_the_fast_path_stays_cheap():
    from rewind.pipelines import research

    code_fingerprint(research.plan)
    started = time.perf_counter()
    for _ in range(2000):
        code_fingerprint(research.plan)
    assert (time.perf_counter() - started) / 2000 < 50e-6


def test_param_hash_keeps_canonical_hashes_and_keys_everything_else():
    for value in ({"a": 1}, [1, 2.5, "x"], (1, 2), {3, 1}, b"x", None):
        assert param_hash(value, "p") == canonical_hash(value, "p")

    def helper(x):
        return x + 1

    class Keyed:
        rewind_key = "v1"

    class Method:
        def rewind_key(self):
            return {"model": "m"}

    class Plain:
        pass

    assert param_hash(helper) == param_hash(helper)
    assert param_hash(Keyed()) == param_hash(Keyed()) != param_hash(Method())
    assert param_hash(Plain()) == param_hash(Plain())  # same type, no memory address
    assert param_hash([helper, Plain()]) == param_hash([helper, Plain()])
    for bad in (float("nan"), {"x": float("inf")}, "\ud800"):
        with pytest.raises(rewind.UnhashableValue, match="`p"):
            param_hash(bad, "p")


# --- files read -----------------------------------------------------------------------------


def test_track_reads_records_files_read_under_the_root_on_this_thread_only(tmp_path):
    (tmp_path / "p.txt").write_text("hello")
    (tmp_path / "q.txt").write_text("other")
    (tmp_path / "out.txt").write_text("")
    seen_elsewhere = {}

    def other_thread():
        with open(tmp_path / "q.txt") as f:
            seen_elsewhere["q"] = f.read()

    with filewatch.track_reads(str(tmp_path)) as reads:
        with open(tmp_path / "p.txt") as f:
            f.read()
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "r.txt").write_text("r")
        (tmp_path / "sub" / "r.txt").read_bytes()
        with open(tmp_path / "out.txt", "w") as f:
            f.write("written, not read")
        try:
            open(tmp_path / "missing.txt")
        except FileNotFoundError:
            pass
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        open(__file__).close()  # outside the root
    assert seen_elsewhere == {"q": "other"}
    assert set(reads.files) == {"p.txt", "sub/r.txt", "missing.txt"}
    assert reads.files["missing.txt"] == filewatch.MISSING
    assert filewatch.changed(reads.files, str(tmp_path)) == []
    (tmp_path / "p.txt").write_text("hello!")
    (tmp_path / "missing.txt").write_text("now here")
    assert filewatch.changed(reads.files, str(tmp_path)) == ["missing.txt", "p.txt"]
