"""Values set on a function and singledispatch registries are part of a node's key.

Seen by a stranger: with the helper in the node's own module, `helper.k = 2` changed to 5, an
attribute the action function set on itself (`n.k = 2`), or a `functools.singledispatch`
implementation changed from `v * 2` to `v * 5`, the next process was served the old output
(y = 6 where plain Burr computes 15). The same helpers in another module missed. And a
singledispatch helper in another module that had dispatched two types could not be keyed at
all: its dispatch cache (weak references) entered the key.

Each run is a fresh `python run.py` against one database, as a user editing code would do.
"""

from __future__ import annotations

import textwrap

import pytest

from test_soundness_code import _write, run_edits

FILES = {
    "dispatch_mod.py": textwrap.dedent('''\
        import functools

        @functools.singledispatch
        def scale(v):
            return v

        @scale.register(int)
        def _(v):
            return v * 2

        scale(1), scale("warm"), scale(1.5)  # the dispatch cache holds three types now
    '''),
    "attrs_app.py": textwrap.dedent('''\
        import functools

        from burr.core.graph import GraphBuilder

        import rewind
        from dispatch_mod import scale

        def helper(v):
            return v * helper.k

        helper.k = 2

        @functools.singledispatch
        def local_scale(v):
            return v

        @local_scale.register(int)
        def _(v):
            return v * 2

        @rewind.action(reads=["x"], writes=["attr_helper"])
        def attr_helper(state):
            return state.update(attr_helper=helper(state["x"]))

        @rewind.action(reads=["x"], writes=["attr_self"])
        def attr_self(state):
            return state.update(attr_self=state["x"] * attr_self.k)

        attr_self.k = 2

        @rewind.action(reads=["x"], writes=["dispatch_same"])
        def dispatch_same(state):
            return state.update(dispatch_same=local_scale(state["x"]))

        @rewind.action(reads=["x"], writes=["dispatch_other"])
        def dispatch_other(state):
            return state.update(dispatch_other=scale(state["x"]))

        NODES = ["attr_helper", "attr_self", "dispatch_same", "dispatch_other"]
        graph = (GraphBuilder().with_actions(**{n: globals()[n] for n in NODES})
                 .with_transitions(*zip(NODES, NODES[1:])).build())
        pipeline = rewind.Pipeline(name="attrs", graph=graph, entrypoint=NODES[0])
    '''),
    "run.py": textwrap.dedent('''\
        import json, sys
        import rewind
        import attrs_app as app
        rw = rewind.Rewind(sys.argv[1])
        run = rw.run(app.pipeline, {"x": 3})
        state = rw.state_at(run.steps[-1])
        print(json.dumps({"status": run.status, "error": run.error,
                          "state": {k: v for k, v in state.items() if k in app.NODES},
                          "ran": sorted(s.node for s in run.steps if s.status == "executed")}))
        rw.close()
    '''),
}

# (what is edited, file, old text, new text, the node that must run again)
EDITS = [
    ("an attribute of a same-module helper", "attrs_app.py", "helper.k = 2", "helper.k = 5", "attr_helper"),
    ("an attribute the action set on itself", "attrs_app.py", "attr_self.k = 2", "attr_self.k = 5", "attr_self"),
    ("a same-module singledispatch implementation", "attrs_app.py", "return v * 2", "return v * 5",
     "dispatch_same"),
    ("another module's singledispatch implementation", "dispatch_mod.py", "return v * 2",
     "return v * 5", "dispatch_other"),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return run_edits(str(tmp_path_factory.mktemp("attrs")), FILES, EDITS)


def test_an_unchanged_rerun_in_a_new_process_is_served_whole(runs):
    assert runs["first"]["ran"] == sorted(n for *_, n in EDITS)
    assert runs["first"]["state"] == {n: 6 for *_, n in EDITS}
    assert runs["unchanged"]["ran"] == [], "a key moved between two processes of the same code"
    assert runs["unchanged"]["state"] == runs["first"]["state"]


@pytest.mark.parametrize("what,name,old,new,node", EDITS, ids=[e[0] for e in EDITS])
def test_an_edit_of_what_a_function_holds_reruns_its_node_with_plain_burrs_result(
        runs, what, name, old, new, node):
    got = runs[what]
    assert got["ran"] == [node], f"{what}: served from the cache or ran more than {node}"
    assert got["state"][node] == 15  # 3 * 5, as plain Burr computes with the edited code


def test_an_attribute_set_again_in_the_same_process_changes_the_key(tmp_path, monkeypatch):
    for name, text in FILES.items():
        _write(str(tmp_path), name, text)
    monkeypatch.syspath_prepend(str(tmp_path))
    import attrs_app as app

    from rewind.keys import code_fingerprint, describe_fingerprint

    before = code_fingerprint(app.attr_helper), code_fingerprint(app.attr_self)
    monkeypatch.setattr(app.helper, "k", 5)
    monkeypatch.setattr(app.attr_self, "k", 5)
    after = code_fingerprint(app.attr_helper), code_fingerprint(app.attr_self)
    assert before[0] != after[0] and before[1] != after[1]
    assert "attrs_app.helper.k" in describe_fingerprint(app.attr_helper)
    assert "attrs_app.attr_self.k" in describe_fingerprint(app.attr_self)
