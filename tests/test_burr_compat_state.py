"""Pins `burr_compat.state_values`: a Burr `State` keeps its values in one plain dict that
reads may use directly (no copy, no Mapping-protocol call per key). A Burr upgrade that
changes where the values live fails here by name."""

from __future__ import annotations

from burr.core import State

from rewind.engine import burr_compat


def test_state_values_is_the_dict_the_state_holds():
    state = State({"a": 1, "b": [2, 3]})
    values = burr_compat.state_values(state)
    assert type(values) is dict
    assert values == state.get_all() == {"a": 1, "b": [2, 3]}
    assert values is burr_compat.state_values(state)  # not a copy
    assert values["b"] is state["b"]


def test_a_new_state_holds_a_new_dict_so_old_views_stay_right():
    state = State({"a": 1})
    before = burr_compat.state_values(state)
    after = state.update(a=2, c=3)
    assert before == {"a": 1}  # Burr copies on update: a view never changes under a reader
    assert burr_compat.state_values(after) == {"a": 2, "c": 3}
    assert burr_compat.state_values(after.wipe(delete=["c"])) == {"a": 2}


def test_a_state_like_mapping_without_the_dict_is_copied():
    class Other(dict):
        pass

    assert burr_compat.state_values(Other(x=1)) == {"x": 1}
