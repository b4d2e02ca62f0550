"""Issue 37, finding 3: a package a node's code imports inside a function enters its key the same
way in every process, from the code's own import statements, never from whatever happens to be
in `sys.modules` when the pipeline is built. Reproduced as a stranger saw it: a client factory
doing `import httpx` inside the function, recorded in one process and forked unchanged in a
fresh one where something else had imported the package first, re-ran the node ("`httpx`
changed"). Here each run is its own process; the package is imported before the pipeline is
built in one of them only (PRELOAD), and the no-edit fork must call nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# installed packages Rewind itself never imports (checked below, in a fresh process)
LAZY = ("yaml", "jinja2", "plotly")

PIPE = '''
import os
if os.environ.get("PRELOAD"):
    import {package}  # noqa: F401  (something else in the app imported it first)
import rewind
from burr.core.graph import GraphBuilder
from rewind import Pipeline, action
import helpers

@action(reads=["x"], writes=["y"])
def a(state):
    return state.update(y=helpers.client(state["x"]))

@action(reads=["y"], writes=["z"])
def b(state):
    return state.update(z=state["y"] + "!")

graph = GraphBuilder().with_actions(a=a, b=b).with_transitions(("a", "b")).build()
pipeline = Pipeline(name="p", graph=graph, entrypoint="a")
'''

# the three spellings of a lazy import: plain, from-import, dotted
HELPERS = {
    "plain": "def client(x):\n    import {package}\n    return x + ':' + {package}.__name__\n",
    "from": "def client(x):\n    from {package} import __name__ as n\n    return x + ':' + n\n",
    "dotted": ("def client(x):\n    import {package}.{sub} as m\n"
               "    return x + ':' + m.__name__.split('.')[0]\n"),
}
SUBMODULE = {"yaml": "constructor", "jinja2": "environment", "plotly": "io"}

DRIVER = '''
import json, sys
import rewind, pipe
from rewind.keys import describe_fingerprint
import helpers
rw = rewind.Rewind(sys.argv[2], pipelines=[pipe.pipeline])
run = rw.run(pipe.pipeline, {"x": "hi"}) if sys.argv[1] == "record" else rw.fork(sys.argv[3], at="a")
print(json.dumps({"id": run.id, "status": str(run.status), "tokens": run.total_tokens,
                  "steps": [[s.node, str(s.status), s.reason] for s in run.steps],
                  "units": sorted(describe_fingerprint(helpers.client))}))
'''


def _py(root: str, *args: str, preload: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PRELOAD"}
    env["PYTHONPATH"] = os.pathsep.join([root, ROOT])
    if preload:
        env["PRELOAD"] = "1"
    out = subprocess.run([sys.executable, "driver.py", *args], cwd=root, env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "completed", got
    return got


def test_rewind_itself_leaves_these_packages_unimported():
    code = f"import sys, rewind; print([p for p in {LAZY!r} if p in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.stdout.strip() == "[]"  # else the test below would not test a lazy import


@pytest.mark.parametrize("package", LAZY)
@pytest.mark.parametrize("spelling", sorted(HELPERS))
@pytest.mark.parametrize("recorded_preloaded", [False, True], ids=["lazy-then-loaded", "loaded-then-lazy"])
def test_a_no_edit_fork_in_a_fresh_process_calls_nothing(tmp_path, package, spelling, recorded_preloaded):
    root = str(tmp_path)
    files = {"pipe.py": PIPE.format(package=package), "driver.py": DRIVER,
             "helpers.py": HELPERS[spelling].format(package=package, sub=SUBMODULE[package])}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    db = os.path.join(root, "r.db")
    run = _py(root, "record", db, preload=recorded_preloaded)
    assert [s[:2] for s in run["steps"]] == [["a", "executed"], ["b", "executed"]]
    fork = _py(root, "fork", db, run["id"], preload=not recorded_preloaded)
    assert [s[:2] for s in fork["steps"]] == [["a", "cached"], ["b", "cached"]], fork["steps"]
    # the package is in the key in both processes (upgrading it is a miss), by its distribution
    assert run["units"] == fork["units"]
    assert any(u.lower() in (package, "pyyaml") for u in run["units"]), run["units"]
