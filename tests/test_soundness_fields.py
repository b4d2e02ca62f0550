"""Values whose canonical spelling is their fields (a dataclass, a pydantic model, a NamedTuple,
a dict or str subclass, a ContextVar's default) must key the user's code they carry too.

Found by a stranger running plain Burr beside Rewind across fresh processes: such a value in a
module global, a `.bind()` argument, a helper's default, a list, or a class-based action's
attribute was keyed by its fields alone, so editing its class's method (or a helper the method
calls), a ClassVar, a pydantic private attribute, an excluded field or an attribute set outside
the fields was served stale. Each case: run on v1; fork on v1 in a new process (a hit: nothing
process-specific is keyed); edit to v2 and fork in a new process: it must re-run and equal
plain Burr on v2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DRIVER = textwrap.dedent('''
    import json, os, sys
    sys.path.insert(0, sys.argv[2])
    import rewind, app
    from burr.core import ApplicationBuilder
    pipeline = rewind.Pipeline(name="p", graph=app.graph, entrypoint="make")
    with rewind.Rewind(sys.argv[1]) as rw:
        if sys.argv[3] == "run":
            run = rw.run(pipeline, getattr(app, "STATE", {"topic": "bees"}))
            open(os.path.join(sys.argv[2], "run_id"), "w").write(run.id)
        else:
            rw.register(pipeline)
            run = rw.fork(open(os.path.join(sys.argv[2], "run_id")).read(), at="make")
        ours = rw.state_at(run.steps[-1])["out"]
    burr = ApplicationBuilder().with_graph(app.graph).with_entrypoint("make").with_state(
        **getattr(app, "STATE", {"topic": "bees"})).build()
    print(json.dumps([str(run.steps[-1].status), ours, burr.run(halt_after=["make"])[2]["out"]]))
''')


def _app(expr: str, imports: str, bind: str = "") -> str:
    return (f"from burr.core.graph import GraphBuilder\nfrom rewind import action\n{imports}\n"
            f"@action(reads=['topic'], writes=['out'])\ndef make(state{', cfg' if bind else ''}):\n"
            f"    return state.update(out={expr})\n"
            f"graph = GraphBuilder().with_actions(make=make{f'.bind(cfg={bind})' if bind else ''})"
            ".with_transitions().build()\n")


_CLASS_ACTION = (
    "from burr.core.action import Action\nfrom burr.core.graph import GraphBuilder\n"
    "from cfgmod import C\n"
    "class Make(Action):\n    def __init__(self, cfg):\n        super().__init__()\n"
    "        self.cfg = cfg\n    @property\n    def reads(self): return ['topic']\n"
    "    @property\n    def writes(self): return ['out']\n"
    "    def run(self, state): return {'out': self.cfg.render(state['topic'])}\n"
    "    def update(self, result, state): return state.update(**result)\n"
    "graph = GraphBuilder().with_actions(make=Make(C())).with_transitions().build()\n")

DC, PYD = "from dataclasses import dataclass\n", "from pydantic import BaseModel\n"
RENDERS = "    def render(self, t):\n        return helpers.deco(self.p + t)\n"
H1 = {"helpers.py": "def deco(s):\n    return 'v1 ' + s\n"}
H2 = {"helpers.py": "def deco(s):\n    return 'v2 ' + s\n"}
DC_RENDERS = DC + "import helpers\n@dataclass\nclass C:\n    p: str = 'p '\n" + RENDERS
PYD_RENDERS = PYD + "import helpers\nclass C(BaseModel):\n    p: str = 'p '\n" + RENDERS
RENDER_CFG = 'CFG.render(state["topic"])'


def _both(before: str, after: str) -> tuple:
    return {"cfgmod.py": before}, {"cfgmod.py": after}


# name: (app.py, files on v1, files changed for v2)
CASES = {
    "a dataclass global's method's helper": (
        _app(RENDER_CFG, "from cfgmod import CFG"), {"cfgmod.py": DC_RENDERS + "CFG = C()\n", **H1}, H2),
    "a pydantic global's method's helper": (
        _app(RENDER_CFG, "from cfgmod import CFG"), {"cfgmod.py": PYD_RENDERS + "CFG = C()\n", **H1}, H2),
    "a pydantic model bound with .bind()": (
        _app('cfg.render(state["topic"])', "from cfgmod import C", bind="C()"),
        {"cfgmod.py": PYD_RENDERS, **H1}, H2),
    "a NamedTuple's own method": (
        _app(RENDER_CFG, "from cfgmod import CFG"), *_both(
            "from typing import NamedTuple\nclass C(NamedTuple):\n    p: str\n    def render(self, t):\n"
            "        return 'v1 ' + self.p + t\nCFG = C('p ')\n",
            "from typing import NamedTuple\nclass C(NamedTuple):\n    p: str\n    def render(self, t):\n"
            "        return 'v2 ' + self.p + t\nCFG = C('p ')\n")),
    "a dict subclass's method": (
        _app(RENDER_CFG, "from cfgmod import CFG"),
        {"cfgmod.py": "import helpers\nclass D(dict):\n    def render(self, t):\n"
                      "        return helpers.deco(self['p'] + t)\nCFG = D(p='p ')\n", **H1}, H2),
    "a str subclass's method": (
        _app(RENDER_CFG, "from cfgmod import CFG"),
        {"cfgmod.py": "import helpers\nclass S(str):\n    def render(self, t):\n"
                      "        return helpers.deco(self + t)\nCFG = S('p ')\n", **H1}, H2),
    "a dataclass as a helper's default": (
        _app('helpers2.fmt(state["topic"])', "import helpers2"),
        {"helpers2.py": "from cfgmod import C\ndef fmt(t, c=C()):\n    return c.render(t)\n",
         "cfgmod.py": DC_RENDERS, **H1}, H2),
    "a dataclass in a global list": (
        _app('STEPS[0].render(state["topic"])', "from cfgmod import STEPS"),
        {"cfgmod.py": DC_RENDERS + "STEPS = [C()]\n", **H1}, H2),
    "a dataclass held by a class-based action": (_CLASS_ACTION, {"cfgmod.py": DC_RENDERS, **H1}, H2),
    "an attribute outside a dataclass's fields": (
        _app('CFG.extra + state["topic"]', "from cfgmod import CFG"),
        {"cfgmod.py": DC + "from consts import P\n@dataclass\nclass C:\n    p: str = 'p '\n"
                      "    def __post_init__(self):\n        self.extra = P\nCFG = C()\n",
         "consts.py": "P = 'v1 '\n"}, {"consts.py": "P = 'v2 '\n"}),
    "a dataclass ClassVar": (
        _app('CFG.PRE + CFG.p + state["topic"]', "from cfgmod import CFG"), *_both(
            DC + "from typing import ClassVar\n@dataclass\nclass C:\n    PRE: ClassVar[str] = 'v1 '\n"
            "    p: str = 'p '\nCFG = C()\n",
            DC + "from typing import ClassVar\n@dataclass\nclass C:\n    PRE: ClassVar[str] = 'v2 '\n"
            "    p: str = 'p '\nCFG = C()\n")),
    "a pydantic private attribute": (
        _app('CFG._pre + state["topic"]', "from cfgmod import CFG"), *_both(
            "from pydantic import BaseModel, PrivateAttr\nclass S(BaseModel):\n    p: str = 'p '\n"
            "    _pre: str = PrivateAttr(default='v1 ')\nCFG = S()\n",
            "from pydantic import BaseModel, PrivateAttr\nclass S(BaseModel):\n    p: str = 'p '\n"
            "    _pre: str = PrivateAttr(default='v2 ')\nCFG = S()\n")),
    "a pydantic field excluded from its dump, bound with .bind()": (
        _app('cfg.pre + state["topic"]', "from cfgmod import S", bind="S()"), *_both(
            "from pydantic import BaseModel, Field\nclass S(BaseModel):\n    p: str = 'p '\n"
            "    pre: str = Field(default='v1 ', exclude=True)\n",
            "from pydantic import BaseModel, Field\nclass S(BaseModel):\n    p: str = 'p '\n"
            "    pre: str = Field(default='v2 ', exclude=True)\n")),
    "an attribute set on a dict subclass": (
        _app('CFG.pre + CFG["p"] + state["topic"]', "from cfgmod import CFG"),
        {"cfgmod.py": "from consts import X\nclass D(dict):\n    pass\nCFG = D(p='p ')\nCFG.pre = X\n",
         "consts.py": "X = 'v1 '\n"}, {"consts.py": "X = 'v2 '\n"}),
    "a dataclass held in state, its method called": (
        _app('state["cfg"].render(state["topic"])', "from cfgmod import C\nSTATE = {'topic': 'bees', 'cfg': C()}")
        .replace("reads=['topic']", "reads=['topic', 'cfg']"), {"cfgmod.py": DC_RENDERS, **H1}, H2),
    "a dataclass nested in a state value's field": (
        _app('state["cfg"].inner.render(state["topic"])',
             "from cfgmod import C, Outer\nSTATE = {'topic': 'bees', 'cfg': Outer(inner=C())}")
        .replace("reads=['topic']", "reads=['topic', 'cfg']"),
        {"cfgmod.py": DC_RENDERS + "@dataclass\nclass Outer:\n    inner: C\n", **H1}, H2),
    "a metaclass's __call__": (
        _app('C().p + state["topic"]', "from cfgmod import C"),
        {"cfgmod.py": "from meta import M\nclass C(metaclass=M):\n    pass\n",
         "meta.py": "class M(type):\n    def __call__(cls, *a, **k):\n        o = super().__call__(*a, **k)\n"
                    "        o.p = 'v1 '\n        return o\n"},
        {"meta.py": "class M(type):\n    def __call__(cls, *a, **k):\n        o = super().__call__(*a, **k)\n"
                    "        o.p = 'v2 '\n        return o\n"}),
    "a nested model's validator, through a field's type": (
        _app('M(items=[{"p": "p "}]).items[0].p + state["topic"]', "from cfgmod import M"),
        {"cfgmod.py": "from typing import List\nfrom pydantic import BaseModel\nfrom inner import I\n"
                      "class M(BaseModel):\n    items: List[I]\n",
         "inner.py": "from pydantic import BaseModel, field_validator\nclass I(BaseModel):\n    p: str\n"
                     "    @field_validator('p')\n    @classmethod\n    def _v(cls, v):\n        return 'v1 ' + v\n"},
        {"inner.py": "from pydantic import BaseModel, field_validator\nclass I(BaseModel):\n    p: str\n"
                     "    @field_validator('p')\n    @classmethod\n    def _v(cls, v):\n        return 'v2 ' + v\n"}),
    "an Annotated validator from another module": (
        _app('M(p="p ").p + state["topic"]', "from cfgmod import M"),
        {"cfgmod.py": "from pydantic import BaseModel\nfrom kinds import Shout\nclass M(BaseModel):\n    p: Shout\n",
         "kinds.py": "from typing import Annotated\nfrom pydantic import AfterValidator\nimport helpers\n"
                     "Shout = Annotated[str, AfterValidator(helpers.deco)]\n", **H1}, H2),
    "a jinja2 filter from another module": (
        _app('T.render(t=state["topic"])', "from tpl import T"),
        {"tpl.py": "import jinja2, helpers\nENV = jinja2.Environment()\nENV.filters['deco'] = helpers.deco\n"
                   "T = ENV.from_string('{{ t | deco }}')\n", **H1}, H2),
    "a jinja2 DictLoader's template from a constant": (
        _app('ENV.get_template("p").render(t=state["topic"])', "from tpl import ENV"),
        {"tpl.py": "import jinja2\nfrom consts import P\nENV = jinja2.Environment(loader=jinja2.DictLoader({'p': P}))\n",
         "consts.py": "P = 'v1 {{ t }}'\n"}, {"consts.py": "P = 'v2 {{ t }}'\n"}),
    "a ContextVar's default": (
        _app('CV.get() + state["topic"]', "from ctx import CV"),
        {"ctx.py": "import contextvars\nCV = contextvars.ContextVar('p', default='v1 ')\n"},
        {"ctx.py": "import contextvars\nCV = contextvars.ContextVar('p', default='v2 ')\n"}),
}


def _write(project: str, files: dict) -> None:
    for name, text in files.items():
        with open(os.path.join(project, name), "w") as f:
            f.write(text)


def _process(project: str, mode: str) -> list:
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, "driver.py", os.path.join(project, "r.db"), project, mode],
                         capture_output=True, text=True, cwd=project, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_code_a_value_carries_beyond_its_fields_is_keyed(tmp_path, case):
    app, before, after = CASES[case]
    project = str(tmp_path)
    _write(project, {"driver.py": DRIVER, "app.py": app, **before})
    status, ours, burrs = _process(project, "run")
    assert status == "executed" and ours == burrs
    status, ours, burrs = _process(project, "fork")
    assert status == "cached" and ours == burrs, f"{case}: unchanged code missed in a new process"
    _write(project, after)
    status, ours, burrs = _process(project, "fork")
    assert ours == burrs, f"{case}: the fork served {ours!r}, plain Burr computes {burrs!r}"
    assert status == "executed"


def test_a_class_edited_under_a_value_in_state_is_named_as_the_reason(tmp_path):
    from dataclasses import dataclass

    from rewind import Pipeline, Rewind, action
    from burr.core.graph import GraphBuilder

    @dataclass
    class Card:
        p: str = "p "

        def render(self, t):
            return "v1 " + self.p + t

    @action(reads=["topic", "card"], writes=["out"])
    def make(state):
        return state.update(out=state["card"].render(state["topic"]))

    graph = GraphBuilder().with_actions(make=make).with_transitions().build()
    with Rewind(str(tmp_path / "r.db")) as rw:
        run = rw.run(Pipeline("card", graph, "make"), {"topic": "bees", "card": Card()})
        assert rw.fork(run.id, at="make").steps[-1].status == "cached"
        Card.render = lambda self, t: "v2 " + self.p + t
        step = rw.fork(run.id, at="make").steps[-1]
        assert (step.status, rw.state_at(step)["out"]) == ("executed", "v2 p bees")
        assert "the code of class" in step.reason and "Card" in step.reason, step.reason
