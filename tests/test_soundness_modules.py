"""Code a node reaches in ways a stranger found were not followed (cross-process, as a user's
app runs): a user module whose name is also a standard library module's (`chunk.py`,
`statistics.py`, `trace.py`), a user module held as a value (in a dict, as a default argument,
a class or instance attribute, a local alias), a pydantic field's default and default
factory, and files opened with `io.open_code` (`runpy.run_path`). Each is recorded in one
process, forked unchanged in a second (a hit), then edited and forked in a third (a miss,
with the edited output)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PIPE = '''
import rewind
from burr.core.graph import GraphBuilder
from rewind import Pipeline, action
{imports}

@action(reads=["x"], writes=["y"])
def a(state):
    x = state["x"]
{body}
    return state.update(y=y)

graph = GraphBuilder().with_actions(a=a).build()
pipeline = Pipeline(name="p", graph=graph, entrypoint="a")
'''

DRIVER = '''
import json, sys
import rewind, pipe
rw = rewind.Rewind(sys.argv[2], pipelines=[pipe.pipeline])
if sys.argv[1] == "record":
    run = rw.run(pipe.pipeline, {"x": "hello"})
else:
    run = rw.fork(sys.argv[3], at="a")
print(json.dumps({"id": run.id, "status": str(run.status), "error": run.error,
                  "a": [str(run.steps[0].status), run.steps[0].outputs.get("y")]}))
'''

PROMPTS_V1, PROMPTS_V2 = {"prompts.py": "SYSTEM = 'v1 '\n"}, {"prompts.py": "SYSTEM = 'v2 '\n"}
RENDERER = ("import prompts\nclass Renderer:\n    def __init__(self, m):\n        self.m = m\n"
            "    def render(self, t):\n        return self.m.SYSTEM + t\nR = Renderer(prompts)\n")

# (name, imports, body, v1 files, v2 edits, v2's output of `a`)
CASES = [
    ("stdlib-named module", "from chunk import split_text", "    y = split_text(x)",
     {"chunk.py": "def split_text(t):\n    return t.upper()\n"},
     {"chunk.py": "def split_text(t):\n    return t + ' v2'\n"}, "hello v2"),
    ("stdlib-named module, aliased", "import statistics as st", "    y = st.score(x)",
     {"statistics.py": "def score(t):\n    return len(t)\n"},
     {"statistics.py": "def score(t):\n    return len(t) * 100\n"}, 500),
    ("stdlib-named module, two deep", "import helpers", "    y = helpers.go(x)",
     {"helpers.py": "from trace import tag\ndef go(t):\n    return tag(t)\n",
      "trace.py": "def tag(t):\n    return '[v1]' + t\n"},
     {"trace.py": "def tag(t):\n    return '[v2]' + t\n"}, "[v2]hello"),
    ("modules in a dict", "import personas.pirate as pirate\nPERSONAS = {'pirate': pirate}",
     "    y = PERSONAS['pirate'].SYSTEM + x",
     {"personas/__init__.py": "", "personas/pirate.py": "SYSTEM = 'arr v1 '\n"},
     {"personas/pirate.py": "SYSTEM = 'arr v2 '\n"}, "arr v2 hello"),
    ("module local alias", "import prompts", "    p = prompts\n    y = p.SYSTEM + x",
     PROMPTS_V1, PROMPTS_V2, "v2 hello"),
    ("module class attribute", "import prompts\nclass Cfg:\n    mod = prompts",
     "    y = Cfg.mod.SYSTEM + x", PROMPTS_V1, PROMPTS_V2, "v2 hello"),
    ("module default argument", "import helpers", "    y = helpers.go(x)",
     {"helpers.py": "import prompts\ndef go(t, p=prompts):\n    return p.SYSTEM + t\n", **PROMPTS_V1},
     PROMPTS_V2, "v2 hello"),
    ("module instance attribute", "import helpers", "    y = helpers.R.render(x)",
     {"helpers.py": RENDERER, **PROMPTS_V1}, PROMPTS_V2, "v2 hello"),
    ("pydantic field default", "from models import Opts", "    y = Opts().tone + x",
     {"models.py": "from pydantic import BaseModel\nimport prompts\n"
                   "class Opts(BaseModel):\n    tone: str = prompts.SYSTEM\n", **PROMPTS_V1},
     PROMPTS_V2, "v2 hello"),
    ("pydantic default factory", "from models import Opts", "    y = Opts().tone + x",
     {"models.py": "from pydantic import BaseModel, Field\nimport prompts\n"
                   "class Opts(BaseModel):\n    tone: str = Field(default_factory=prompts.tone)\n",
      "prompts.py": "def tone():\n    return 'v1 '\n"},
     {"prompts.py": "def tone():\n    return 'v2 '\n"}, "v2 hello"),
    ("runpy.run_path", "import runpy", "    y = runpy.run_path('rule.py')['VALUE'] + x",
     {"rule.py": "VALUE = 'v1 '\n"}, {"rule.py": "VALUE = 'v2 '\n"}, "v2 hello"),
    ("io.open_code", "import io",
     "    with io.open_code('p.txt') as f:\n        y = f.read().decode() + x",
     {"p.txt": "v1 "}, {"p.txt": "v2 "}, "v2 hello"),
]


def _write(root: str, files: dict) -> None:
    for rel, text in files.items():
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        st = os.stat(path)  # a same-second edit must still look edited to the import system
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def _py(root: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, ROOT])}
    out = subprocess.run([sys.executable, "driver.py", *args], cwd=root, env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "completed", got
    return got


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_an_edit_reached_this_way_is_a_miss(tmp_path, case):
    _name, imports, body, v1, v2, want = case
    root = str(tmp_path)
    _write(root, {"pipe.py": PIPE.format(imports=imports, body=body), "driver.py": DRIVER, **v1})
    db = os.path.join(root, "r.db")
    run = _py(root, "record", db)
    assert run["a"][0] == "executed"
    same = _py(root, "fork", db, run["id"])
    assert same["a"] == ["cached", run["a"][1]], same  # nothing changed: a hit
    _write(root, v2)
    edited = _py(root, "fork", db, run["id"])
    assert edited["a"] == ["executed", want], edited
