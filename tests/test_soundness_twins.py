"""Values that canonical JSON spells alike but Python tells apart (1 and 1.0, a list and a
tuple, a dict in another key order, int and str keys, Decimal('1.0') and Decimal('1.00'), a
date and its ISO string, numpy's int64 and int, 0.0 and -0.0) share a canonical hash, as the
hashing rules say, but never a cache key: a node whose output shows the difference (a repr,
an f-string, a prompt built by iterating a dict) is run again, as plain Burr would run it, for
a state field, a fork's edit, a param and a runtime input (a stranger's find: 12 of 12 served
the twin's output). Equal values in the same form still hit."""

from __future__ import annotations

import datetime
import decimal

import numpy as np
import pytest
from burr.core import ApplicationBuilder
from burr.core.graph import GraphBuilder

from rewind import Pipeline, Rewind, action
from rewind.keys import canonical_hash

TWINS = [
    (1, 1.0), ([1, 2], (1, 2)), ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ({1: "x"}, {"1": "x"}),
    (decimal.Decimal("1.0"), decimal.Decimal("1.00")), (datetime.date(2024, 1, 2), "2024-01-02"),
    (np.int64(1), 1), (0.0, -0.0), ({"k": [1.0]}, {"k": [1]}), ({1, 2}, [1, 2]),
]


def shown(v) -> str:
    return f"{type(v).__name__}:{v!r}:{list(v) if isinstance(v, dict) else ''}"


@action(reads=["v"], writes=["r"])
def show(state, p=None):
    return state.update(r=shown(state["v"]) + ("" if p is None else "|" + shown(p)))


@action(reads=["r"], writes=["s"])
def after(state, __context=None):
    return state.update(s=state["r"].upper())


def pipeline() -> Pipeline:
    graph = (GraphBuilder().with_actions(show=show, after=after)
             .with_transitions(("show", "after")).build())
    return Pipeline(name="twins", graph=graph, entrypoint="show")


def burr_r(v, p=None) -> str:
    app = (ApplicationBuilder().with_graph(pipeline().graph).with_entrypoint("show")
           .with_state(v=v).build())
    if p is not None:
        return shown(v) + "|" + shown(p)
    app.step()
    return app.state["r"]


@pytest.mark.parametrize("a,b", TWINS, ids=[f"{shown(a)}~{shown(b)}" for a, b in TWINS])
def test_a_twin_in_state_or_an_edit_runs_again(tmp_path, a, b):
    assert canonical_hash(a) == canonical_hash(b)  # the hashing rules are unchanged
    with Rewind(str(tmp_path / "r.db")) as rw:
        first = rw.run(pipeline(), {"v": a})
        assert first.status == "completed", first.error
        assert first.step("show").outputs["r"] == burr_r(a)
        again = rw.run(pipeline(), {"v": a})
        assert [str(s.status) for s in again.steps] == ["cached", "cached"]
        twin = rw.run(pipeline(), {"v": b})
        assert str(twin.step("show").status) == "executed", twin.step("show").reason
        assert twin.step("show").outputs["r"] == burr_r(b)
        with Rewind(str(tmp_path / "fresh.db")) as fresh:  # no entry for the twin yet
            parent = fresh.run(pipeline(), {"v": a})
            fork = fresh.fork(parent.id, at="show", edit={"v": b})
            assert str(fork.step("show").status) == "executed"
            assert "`v`" in fork.step("show").reason, fork.step("show").reason
        fork = rw.fork(first.id, at="show", edit={"v": b})  # served: the twin's own entry
        assert fork.step("show").outputs["r"] == burr_r(b)
        same = rw.fork(first.id, at="show")
        assert [str(s.status) for s in same.steps] == ["cached", "cached"]
        assert same.step("show").outputs["r"] == burr_r(a)


@pytest.mark.parametrize("a,b", [(0, 0.0), ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ([1], (1,))],
                         ids=["int-float", "dict-order", "list-tuple"])
def test_a_twin_param_runs_again(tmp_path, a, b):
    with Rewind(str(tmp_path / "r.db")) as rw:
        first = rw.run(pipeline(), {"v": "x"})
        one = rw.fork(first.id, at="show", params={"p": a})
        assert one.step("show").outputs["r"] == burr_r("x", a)
        two = rw.fork(first.id, at="show", params={"p": b})
        assert str(two.step("show").status) == "executed", two.step("show").reason
        assert two.step("show").outputs["r"] == burr_r("x", b)
        assert str(rw.fork(first.id, at="show", params={"p": a}).step("show").status) == "cached"
