"""Code a node reaches through values, not names: an edit there is a miss in a new process.

Found by running plain Burr beside Rewind on code nobody here wrote: a helper's default
argument bound to a constant (`def f(x, p=PROMPT)`), a compiled regex, a `string.Template`, a
configured instance of a user class, a dict of functions, helpers wrapped by
`functools.cache` / `lru_cache` or by the user's own `functools.wraps` decorator, and a builtin
bound to a constant (`"v1 {}".format`) were all served stale after an edit, because the
fingerprint knew such values only by their type (or, for a decorator, never saw its layer). Each case runs a one-node pipeline twice, each time in a
fresh process against one database, editing one module in between; plain Burr computes the
new value, and so must Rewind. Unchanged code hits in a new process (no spelling holds a
process's own addresses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DRIVER = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, sys.argv[2])
    import rewind, acts
    from burr.core import ApplicationBuilder
    from burr.core.graph import GraphBuilder
    graph = GraphBuilder().with_actions(a=acts.a).build()
    with rewind.Rewind(sys.argv[1]) as rw:
        run = rw.run(rewind.Pipeline(name="p", graph=graph, entrypoint="a"), {"x": "hello"})
        ours = rw.state_at(run.steps[0])["y"]
    app = ApplicationBuilder().with_graph(graph).with_entrypoint("a").with_state(x="hello").build()
    app.run(halt_after=["a"])
    print(json.dumps([str(run.steps[0].status), ours, app.state["y"]]))
''')

ACTS = '''from burr.core import action
import helpers
{own}

@action(reads=["x"], writes=["y"])
def a(state):
    return state.update(y={expr})
'''

_CLASS = "class F:\n    def __init__(self, p):\n        self.p = p\n    def render(self, x):\n        return self.p + x\n"

_BURR_SUB = (
    "from burr.core import ApplicationBuilder, action\nfrom burr.core.graph import GraphBuilder\n"
    "@action(reads=['x'], writes=['y'])\ndef sub(state):\n    return state.update(y='{v}' + state['x'])\n"
    "SUB = GraphBuilder().with_actions(sub=sub).build()\n"
    "def run_sub(x):\n    app = ApplicationBuilder().with_graph(SUB).with_entrypoint('sub')"
    ".with_state(x=x).build()\n    return app.run(halt_after=['sub'])[2]['y']\n")
_BURR_BOUND = (
    "from burr.core import ApplicationBuilder, action\n"
    "@action(reads=['x'], writes=['y'])\ndef tag(state, p):\n    return state.update(y=p + state['x'])\n"
    "BOUND = tag.bind(p='{v}')\n"
    "def run_bound(x):\n    app = ApplicationBuilder().with_actions(t=BOUND).with_transitions()"
    ".with_entrypoint('t').with_state(x=x).build()\n    return app.run(halt_after=['t'])[2]['y']\n")

# name: (the node's expression, helpers.py before, after, a line of the node's module before, after)
CASES = {
    "a helper's default argument": (
        'helpers.f(state["x"])',
        'P = "v1"\ndef f(x, p=P):\n    return p + x\n', 'P = "v2"\ndef f(x, p=P):\n    return p + x\n', "", ""),
    "a keyword-only default": (
        'helpers.f(state["x"])',
        'P = "v1"\ndef f(x, *, p=P):\n    return p + x\n', 'P = "v2"\ndef f(x, *, p=P):\n    return p + x\n', "", ""),
    "a compiled regex in another module": (
        'helpers.PAT.sub("Z", state["x"])',
        'import re\nPAT = re.compile("l")\n', 'import re\nPAT = re.compile("e")\n', "", ""),
    "a string.Template": (
        'helpers.T.substitute(v=state["x"])',
        'import string\nT = string.Template("v1 $v")\n', 'import string\nT = string.Template("v2 $v")\n', "", ""),
    "a configured instance of a user class": (
        'helpers.FMT.render(state["x"])', _CLASS + 'FMT = F("v1")\n', _CLASS + 'FMT = F("v2")\n', "", ""),
    "a dict of functions": (
        'helpers.H["k"](state["x"])',
        'def g(x):\n    return "v1" + x\nH = {"k": g}\n', 'def g(x):\n    return "v2" + x\nH = {"k": g}\n', "", ""),
    "a functools.lru_cache helper": (
        'helpers.g(state["x"])',
        'import functools\n@functools.lru_cache\ndef g(x):\n    return "v1" + x\n',
        'import functools\n@functools.lru_cache\ndef g(x):\n    return "v2" + x\n', "", ""),
    "a compiled regex in the node's module": (
        'PAT.sub("Z", state["x"])', "", "", 'import re\nPAT = re.compile("l")', 'import re\nPAT = re.compile("e")'),
    "an instance made in the node's module": (
        'FMT.render(state["x"])', _CLASS, _CLASS, 'FMT = helpers.F("v1")', 'FMT = helpers.F("v2")'),
    "a functools.cache helper in the node's module": (
        'g(state["x"])', "", "",
        'import functools\n@functools.cache\ndef g(x):\n    return "v1" + x',
        'import functools\n@functools.cache\ndef g(x):\n    return "v2" + x'),
    "a dict of functions in the node's module": (
        'H["k"](state["x"])', "", "",
        'def g(x):\n    return "v1" + x\nH = {"k": g}', 'def g(x):\n    return "v2" + x\nH = {"k": g}'),
    "a user decorator made with functools.wraps": (
        'helpers.greet(state["x"])',
        'import functools\ndef shout(f):\n    @functools.wraps(f)\n    def w(x):\n        return f(x).upper()\n'
        '    return w\n@shout\ndef greet(x):\n    return "hi " + x\n',
        'import functools\ndef shout(f):\n    @functools.wraps(f)\n    def w(x):\n        return f(x) + "!!"\n'
        '    return w\n@shout\ndef greet(x):\n    return "hi " + x\n', "", ""),
    "a builtin method bound to a constant": (
        'helpers.render(state["x"]) + helpers.lookup("k")',
        'render = "v1 {}".format\nlookup = {"k": "-a"}.get\n', 'render = "v2 {}".format\nlookup = {"k": "-b"}.get\n',
        "", ""),
    "a method bound to a slotted instance": (
        'helpers.render(state["x"])',
        'class F:\n    __slots__ = ("p",)\n    def __init__(self, p):\n        self.p = p\n'
        '    def render(self, x):\n        return self.p + x\nrender = F("v1").render\n',
        'class F:\n    __slots__ = ("p",)\n    def __init__(self, p):\n        self.p = p\n'
        '    def render(self, x):\n        return self.p + x\nrender = F("v2").render\n', "", ""),
    "a slotted instance": (
        'helpers.FMT.render(state["x"])',
        'class F:\n    __slots__ = ("p",)\n    def __init__(self, p):\n        self.p = p\n'
        '    def render(self, x):\n        return self.p + x\nFMT = F("v1")\n',
        'class F:\n    __slots__ = ("p",)\n    def __init__(self, p):\n        self.p = p\n'
        '    def render(self, x):\n        return self.p + x\nFMT = F("v2")\n', "", ""),
    # standard-library objects that are values, and code reached in less common ways
    "a deque": ('helpers.D[0] + state["x"]', 'import collections\nD = collections.deque(["v1"])\n',
                'import collections\nD = collections.deque(["v2"])\n', "", ""),
    "a read-only mapping proxy": (
        'helpers.M["k"] + state["x"]', 'import types\nM = types.MappingProxyType({"k": "v1"})\n',
        'import types\nM = types.MappingProxyType({"k": "v2"})\n', "", ""),
    "an operator.itemgetter": (
        'helpers.G({"a": "v1", "b": "v2"}) + state["x"]', 'import operator\nG = operator.itemgetter("a")\n',
        'import operator\nG = operator.itemgetter("b")\n', "", ""),
    "a textwrap.TextWrapper": (
        'helpers.W.fill(state["x"])', 'import textwrap\nW = textwrap.TextWrapper(initial_indent="v1 ")\n',
        'import textwrap\nW = textwrap.TextWrapper(initial_indent="v2 ")\n', "", ""),
    "a functools.cached_property": (
        'helpers.OBJ.p + state["x"]',
        'import functools\nclass C:\n    @functools.cached_property\n    def p(self):\n        return "v1"\nOBJ = C()\n',
        'import functools\nclass C:\n    @functools.cached_property\n    def p(self):\n        return "v2"\nOBJ = C()\n',
        "", ""),
    "a functools.singledispatch implementation": (
        'helpers.fmt(state["x"])',
        'import functools\n@functools.singledispatch\ndef fmt(x):\n    return "?"\n'
        '@fmt.register\ndef _(x: str):\n    return "v1" + x\n',
        'import functools\n@functools.singledispatch\ndef fmt(x):\n    return "?"\n'
        '@fmt.register\ndef _(x: str):\n    return "v2" + x\n', "", ""),
    "a jinja2 template built at import": (
        'helpers.T.render(x=state["x"])', 'import jinja2\nT = jinja2.Template("v1 {{ x }}")\n',
        'import jinja2\nT = jinja2.Template("v2 {{ x }}")\n', "", ""),
    "getattr on a module": ('getattr(helpers, "P") + state["x"]', 'P = "v1"\n', 'P = "v2"\n', "", ""),
    "vars of a module": ('vars(helpers)["P"] + state["x"]', 'P = "v1"\n', 'P = "v2"\n', "", ""),
    "importlib.import_module by name": (
        'importlib.import_module("helpers").P + state["x"]', 'P = "v1"\n', 'P = "v2"\n',
        "import importlib", "import importlib"),
    "globals() of the node's module": (
        'globals()["P"] + state["x"]', "", "", 'P = "v1"', 'P = "v2"'),
    # Burr objects built at import hold the user's functions (found running Burr's examples)
    "a Burr graph built at import, run by the node": (
        'helpers.run_sub(state["x"])',
        _BURR_SUB.format(v="v1"), _BURR_SUB.format(v="v2"), "", ""),
    "a bound Burr action held in a module": (
        'helpers.run_bound(state["x"])',
        _BURR_BOUND.format(v="v1"), _BURR_BOUND.format(v="v2"), "", ""),
}


def _run(project, db, helpers: str, own: str, expr: str) -> list:
    with open(os.path.join(project, "helpers.py"), "w") as f:
        f.write(helpers)
    with open(os.path.join(project, "acts.py"), "w") as f:
        f.write(ACTS.format(own=own, expr=expr))
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, os.path.join(project, "driver.py"), db, project],
                         capture_output=True, text=True, cwd=project, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def project(tmp_path):
    (tmp_path / "driver.py").write_text(DRIVER)
    return str(tmp_path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_edit_reached_through_a_value_is_a_miss_in_a_new_process(project, case):
    expr, before, after, own_before, own_after = CASES[case]
    db = os.path.join(project, "rewind.db")
    status, ours, burrs = _run(project, db, before, own_before, expr)
    assert status == "executed" and ours == burrs
    status, ours, burrs = _run(project, db, before, own_before, expr)
    assert status == "cached" and ours == burrs  # unchanged code: the same key in a new process
    status, ours, burrs = _run(project, db, after, own_after, expr)
    assert status == "executed", f"{case}: the edited code was served from the cache"
    assert ours == burrs


def test_objects_with_process_bound_parts_still_hit_in_a_new_process(project):
    """A lock, a logger and an open file in a user object are known by their type; the rest of
    the object by its values: an unchanged object is the same key in every process."""
    helpers = textwrap.dedent('''\
        import logging, re, sys, threading
        class Client:
            def __init__(self, name):
                self.lock = threading.Lock()
                self.log = logging.getLogger("client")
                self.out = sys.stdout
                self.pattern = re.compile("l+")
                self.name = name
            def render(self, x):
                return self.name + self.pattern.sub("L", x)
        CLIENT = Client("v1")
    ''')
    db = os.path.join(project, "rewind.db")
    expr = 'helpers.CLIENT.render(state["x"])'
    assert _run(project, db, helpers, "", expr)[0] == "executed"
    status, ours, burrs = _run(project, db, helpers, "", expr)
    assert status == "cached" and ours == burrs == "v1heLo"
    status, ours, burrs = _run(project, db, helpers.replace('Client("v1")', 'Client("v2")'), "", expr)
    assert status == "executed" and ours == burrs == "v2heLo"


def test_a_huge_object_graph_costs_a_bounded_walk():
    """A value of many parts is followed only so far: the fingerprint stays quick to compute."""
    import time

    from rewind.keys import code_fingerprint

    class Node:
        def __init__(self, i):
            self.i, self.children = i, []

    root = Node(0)
    root.children = [Node(i) for i in range(200_000)]
    glob = {"ROOT": root, "__name__": "user_module_for_a_test"}
    exec("def node(x):\n    return ROOT.i + x\n", glob)
    t0 = time.process_time()
    first = code_fingerprint(glob["node"])
    assert time.process_time() - t0 < 10  # bounded by _PARTS_MAX, not by 200,000 objects
    assert first == code_fingerprint(glob["node"])


def test_a_file_changed_once_is_served_again_and_raises_no_alarm(tmp_path, monkeypatch):
    """A node reading a file under the working directory re-runs when the file changes; the new
    output then replaces the entry, so the next identical run is a hit, and nothing calls the
    node nondeterministic (its key did not change: what it read did)."""
    import rewind
    from burr.core import action
    from burr.core.graph import GraphBuilder

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.json").write_text(json.dumps({"p": "v1"}))

    @action(reads=["x"], writes=["y"])
    def reads_config(state):
        with open("cfg.json") as f:
            return state.update(y=json.load(f)["p"] + state["x"])

    pipeline = rewind.Pipeline("cfg", GraphBuilder().with_actions(a=reads_config).build(), "a")
    with rewind.Rewind(str(tmp_path / "rewind.db")) as rw:
        assert rw.run(pipeline, {"x": "hello"}).steps[0].status == "executed"
        (tmp_path / "cfg.json").write_text(json.dumps({"p": "v2"}))
        rerun = rw.run(pipeline, {"x": "hello"})
        assert rerun.steps[0].status == "executed" and "cfg.json" in rerun.steps[0].reason
        assert "nondeterministic" not in rerun.steps[0].reason
        again = rw.run(pipeline, {"x": "hello"})
        assert again.steps[0].status == "cached"
        assert rw.state_at(again.steps[0])["y"] == "v2hello"
        assert rw.alarms() == []


ENV_HELPERS = '''import os

def greeting():
    return os.getenv("GREETING", "none")
'''


@pytest.mark.parametrize("where", ["node", "helper"])
def test_an_environment_variable_the_code_reads_is_rechecked_in_a_new_process(project, where):
    """os.environ / os.getenv read by the node or a helper in another module: a changed value
    (or one set or unset) re-runs the node, named in the reason; the same value hits."""
    expr = 'helpers.greeting() + " " + state["x"]' if where == "helper" else \
        '__import__("os").environ.get("GREETING", "none") + " " + state["x"]'
    db = os.path.join(project, "rewind.db")

    def run(value):
        env = {"GREETING": value} if value is not None else {}
        os.environ.pop("GREETING", None)
        os.environ.update(env)
        try:
            return _run(project, db, ENV_HELPERS, "", expr)
        finally:
            os.environ.pop("GREETING", None)

    assert run("v1") == ["executed", "v1 hello", "v1 hello"]
    assert run("v1") == ["cached", "v1 hello", "v1 hello"]
    assert run("v2") == ["executed", "v2 hello", "v2 hello"]
    assert run(None) == ["executed", "none hello", "none hello"]
    assert run(None) == ["cached", "none hello", "none hello"]


def test_environment_reads_of_rewind_and_installed_packages_are_not_part_of_a_step(tmp_path, monkeypatch):
    """The model settings and an SDK's API key are read by Rewind and by the package, not by the
    node: a rotated key does not make every node run again, and no key's hash is recorded."""
    import rewind
    from burr.core import action
    from burr.core.graph import GraphBuilder
    from rewind.keys import envwatch

    @action(reads=["q"], writes=["a"])
    def ask(state):
        return state.update(a=rewind.llm.chat([{"role": "user", "content": state["q"]}]))

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-first")
    monkeypatch.setenv("REWIND_PROVIDER", "simulator")
    pipeline = rewind.Pipeline("envkey", GraphBuilder().with_actions(ask=ask).build(), "ask")
    with rewind.Rewind(str(tmp_path / "rewind.db")) as rw:
        first = rw.run(pipeline, {"q": "why?"})
        assert first.steps[0].status == "executed", first.error
        entry = rw.store.cache_get("ask", first.steps[0].input_hash)
        assert "env" not in json.loads(entry["meta"])  # nothing the node's own code read
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-rotated")
        assert rw.run(pipeline, {"q": "why?"}).steps[0].status == "cached"
    with envwatch.track_env() as env:
        os.environ.get("HOME")  # this test module is user code: recorded, by hash only
    assert set(env) == {"HOME"} and env["HOME"] != os.environ["HOME"]


STABLE = {  # name: (helpers.py, the node's expression): unchanged code, the same key in any process
    "a set of user objects hashed by a string": (
        "class Tool:\n    def __init__(self, name):\n        self.name = name\n"
        "    def __hash__(self):\n        return hash(self.name)\n"
        "    def __eq__(self, other):\n        return isinstance(other, Tool) and other.name == self.name\n"
        'TOOLS = {Tool("search"), Tool("calc"), Tool("wiki"), Tool("news")}\n',
        'str(sorted(t.name for t in helpers.TOOLS)) + state["x"]'),
    "a dict keyed by functions": (
        'def parse_json(s):\n    return s\ndef parse_csv(s):\n    return s\n'
        'PARSERS = {parse_json: "json", parse_csv: "csv"}\n',
        'str(sorted(helpers.PARSERS.values())) + state["x"]'),
    "the environment imported by name": (
        "from os import environ\ndef greeting():\n    return environ.get('GREETING', 'hi')\n",
        'helpers.greeting() + state["x"]'),
    "a thread object": (
        "import threading\nMAIN = threading.main_thread()\n"
        "def is_main():\n    return threading.current_thread() is MAIN\n",
        'str(helpers.is_main()) + state["x"]'),
    "a MagicMock": (
        "from unittest import mock\nCLIENT = mock.MagicMock()\n"
        "def ping():\n    CLIENT.ping()\n    return 'pong'\n",
        'helpers.ping() + state["x"]'),
    "a proxy answering every attribute": (
        "class Anything:\n    def __getattr__(self, name):\n        return Anything()\n"
        "    def __call__(self, *a, **k):\n        return Anything()\n"
        "SETTINGS = Anything()\ndef touch():\n    SETTINGS.x\n    return 'ok'\n",
        'helpers.touch() + state["x"]'),
}


@pytest.mark.parametrize("case", sorted(STABLE))
def test_unchanged_code_holding_process_bound_values_hits_in_a_new_process(project, case, monkeypatch):
    """Found by a review of this change: sets and function-keyed dicts spelled in this process's
    order or addresses, the environment and a thread's ids taken apart, proxies followed for
    ever. An unrelated environment variable changing between the runs changes nothing."""
    helpers, expr = STABLE[case]
    db = os.path.join(project, "rewind.db")
    assert _run(project, db, helpers, "", expr)[0] == "executed"
    monkeypatch.setenv("SOME_UNRELATED_VARIABLE", "1")
    status, ours, burrs = _run(project, db, helpers, "", expr)
    assert status == "cached" and ours == burrs
