"""Issue 37, finding 4: a value keeps its exact class, a class made at run time included, or is
refused naming the field and the class. instructor hands a node an instance of a subclass of the
user's pydantic model that it makes at run time under the model's own name (functools.wraps
copies `__module__`, `__name__`, `__qualname__`); stored by that name it came back as the user's
base class, so a served step handed downstream nodes another class than a real execution."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap

import pytest

from rewind.errors import UnhashableValue
from rewind.store import serde

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = textwrap.dedent('''
    import functools
    from pydantic import BaseModel, create_model

    class Topic(BaseModel):
        title: str
        score: int = 0

    class Schema:  # what instructor mixes in (its OpenAISchema)
        @classmethod
        def openai_schema(cls):
            return {"name": cls.__name__}

    def wrap(model):
        """instructor's openai_schema: a subclass made at run time under the model's own name"""
        return functools.wraps(model, updated=())(
            create_model(model.__name__, __base__=(model, Schema)))

    def with_field(model):
        return functools.wraps(model, updated=())(
            create_model(model.__name__, __base__=model, extra_note=(str, "")))
''')


@pytest.fixture
def models(tmp_path, monkeypatch):
    (tmp_path / "topics_models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("topics_models", None)
    import topics_models

    yield topics_models
    sys.modules.pop("topics_models", None)


def test_a_class_made_at_run_time_comes_back_as_itself_in_this_process(models):
    Wrapped = models.wrap(models.Topic)
    value = Wrapped(title="tides", score=3)
    back = serde.decode(serde.encode(value, "topic"))
    assert type(back) is Wrapped  # not models.Topic
    assert back == value and back.openai_schema() == {"name": "Topic"}
    # the user's own class by the same name still comes back as itself
    assert type(serde.decode(serde.encode(models.Topic(title="x"), "t"))) is models.Topic


def test_a_fresh_process_makes_the_class_again_from_its_bases(models, tmp_path):
    Wrapped = models.wrap(models.Topic)
    data = serde.encode(Wrapped(title="tides", score=3), "topic")
    (tmp_path / "value.bin").write_bytes(data)
    code = textwrap.dedent('''
        import json, sys
        from rewind.store import serde
        import topics_models
        v = serde.decode(open(sys.argv[1], "rb").read())
        t = type(v)
        print(json.dumps([t.__qualname__, t is topics_models.Topic,
                          isinstance(v, topics_models.Topic), isinstance(v, topics_models.Schema),
                          v.title, v.score, v.openai_schema(),
                          type(serde.decode(open(sys.argv[1], "rb").read())) is t]))
    ''')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT])}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "value.bin")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == ["Topic", False, True, True, "tides", 3, {"name": "Topic"}, True]


def test_the_same_value_encodes_to_the_same_bytes_in_every_process(models):
    # the encoding's address is part of a key (a value's form): it must not depend on the process
    a = serde.encode(models.wrap(models.Topic)(title="t"), "x")
    b = serde.encode(models.wrap(models.Topic)(title="t"), "x")  # another class object, same make
    assert a == b


def test_a_class_made_at_run_time_with_a_body_of_its_own_is_refused_by_name(models):
    value = models.with_field(models.Topic)(title="t", extra_note="n")
    with pytest.raises(UnhashableValue) as e:
        serde.encode(value, "plan.topic")
    assert "`plan.topic`" in str(e.value) and "topics_models.Topic" in str(e.value)
    assert "extra_note" in str(e.value)


def test_a_served_step_hands_downstream_the_class_a_real_execution_would(models, tmp_path):
    import rewind
    from burr.core.graph import GraphBuilder

    Wrapped = models.wrap(models.Topic)

    @rewind.action(reads=["q"], writes=["topic"])
    def extract(state):
        return state.update(topic=Wrapped(title=state["q"], score=len(state["q"])))

    @rewind.action(reads=["topic"], writes=["kind"])
    def inspect_(state):
        t = state["topic"]
        return state.update(kind=[type(t).__qualname__, isinstance(t, models.Schema), type(t) is Wrapped])

    graph = (GraphBuilder().with_actions(extract=extract, inspect=inspect_)
             .with_transitions(("extract", "inspect")).build())
    pipe = rewind.Pipeline(name="dyn", graph=graph, entrypoint="extract")
    rw = rewind.Rewind(str(tmp_path / "r.db"))
    run = rw.run(pipe, {"q": "tides"})
    assert run.status == "completed", run.steps[-1].error
    fork = rw.fork(run.id, at="inspect", params={})  # extract inherited, inspect re-reads it
    assert [s.status for s in fork.steps] == ["inherited", "cached"]
    again = rw.run(pipe, {"q": "tides"}, use_cache=True)  # extract served from the cache
    assert again.steps[0].status == "cached"
    assert rw.state_at(again.steps[1])["kind"] == ["Topic", True, True]
