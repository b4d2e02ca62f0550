"""Two state fields holding one object (`update(b=state["a"])`), then one changed in place: the
one place where Rewind's state after a step is documented to differ from plain Burr's (README,
"Which Burr features work"). Rewind stores and serves each field as its own value, as Burr's own
fork from its persister loads them; in one plain Burr process the change reaches both. If either
side changes, this fails and the README row must be revisited."""

from burr.core import ApplicationBuilder, action
from burr.core.graph import GraphBuilder

import rewind


@action(reads=["a"], writes=["b"])
def alias(state):
    return state.update(b=state["a"])


@action(reads=["b"], writes=["c"])
def grow_b(state):
    state["b"].append("m")
    return state.update(c=len(state["b"]))


@action(reads=["a", "b", "c"], writes=["d"])
def read_both(state):
    return state.update(d=[list(state["a"]), list(state["b"])])


def graph():
    return (GraphBuilder().with_actions(alias=alias, grow_b=grow_b, read_both=read_both)
            .with_transitions(("alias", "grow_b"), ("grow_b", "read_both")).build())


def test_an_in_place_change_reaches_only_the_field_changed(tmp_path):
    app = ApplicationBuilder().with_graph(graph()).with_entrypoint("alias").with_state(a=[1]).build()
    *_, plain = app.run(halt_after=["read_both"])
    assert plain["d"] == [[1, "m"], [1, "m"]]  # plain Burr, one process: both fields changed

    with rewind.Rewind(str(tmp_path / "r.db")) as rw:
        run = rw.run(rewind.Pipeline(name="alias", graph=graph(), entrypoint="alias"), {"a": [1]})
        assert run.steps[-1].outputs["d"] == [[1], [1, "m"]]  # each field its own value
        assert rw.state_at(run.steps[-1])["a"] == [1]
        fork = rw.fork(run.id, at="alias")  # served from the cache: the same trajectory
        assert [s.status for s in fork.steps] == ["cached"] * 3
        assert fork.steps[-1].outputs["d"] == [[1], [1, "m"]]
