"""Every value keeps its type and value through a node write, a downstream read, a no-edit fork
and a new handle; values with no deterministic encoding are refused before anything is
written; an integrity error means corruption, never a type the store could not spell (issue 11).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import fractions
import json
import pathlib
import uuid
import zoneinfo

import numpy as np
import pandas as pd
import pydantic
import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, RewindError, action
from rewind.store import serde
from rewind.keys import canonical_hash


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: tuple = (0, 0)


class Order(pydantic.BaseModel):
    item: str
    placed: datetime.date
    tags: frozenset = frozenset()


class Basket(pydantic.BaseModel):
    order: Order
    total: decimal.Decimal


Pair = collections.namedtuple("Pair", "left right")


class Money:
    """A user's own type, stored through `register_type`."""

    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __eq__(self, other) -> bool:
        return type(other) is Money and other.cents == self.cents

    def __repr__(self) -> str:
        return f"Money({self.cents})"


serde.register_type(Money, lambda m: {"cents": m.cents}, lambda d: Money(d["cents"]))


def expected() -> dict:
    """Every listed type, with values whose canonical hashes are all distinct."""
    return {
        "decimal": decimal.Decimal("1.50"),
        "decimal_exp": decimal.Decimal("1E+2"),
        "timedelta": datetime.timedelta(days=1, microseconds=3),
        "datetime": datetime.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone.utc),
        "zoned": datetime.datetime(2024, 6, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
        "date": datetime.date(2023, 5, 6),
        "time": datetime.time(7, 8, 9, 10),
        "bytes": b"\x00\xffbin",
        "set": {3, 1, 2},
        "frozenset": frozenset({"a", "b"}),
        "tuple": (4, (5, "six")),
        "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "enum": Color.RED,
        "int_enum": Level.HIGH,
        "path": pathlib.Path("data/in.txt"),
        "dataclass": Point(1, (2, 3)),
        "pydantic": Basket(order=Order(item="pen", placed=datetime.date(2020, 1, 1),
                                       tags=frozenset({"x"})), total=decimal.Decimal("9.99")),
        "namedtuple": Pair(1, "r"),
        "ndarray": np.arange(6, dtype=np.float32).reshape(2, 3),
        "ndarray_int": np.array([[1, 2], [3, 4]], dtype=np.int16),
        "np_int64": np.int64(7),
        "np_float64": np.float64(2.75),
        "np_float32": np.float32(1.25),
        "np_bool": np.bool_(True),
        "dataframe": pd.DataFrame({"a": [1, 2], "b": ["x", None], "c": [1.5, float("nan")]}),
        "int_keys": {1: "one", 2: "two"},
        "tuple_keys": {(1, 2): "pair"},
        "nested": [{"when": datetime.date(1999, 12, 31), "amount": decimal.Decimal("0.10")}],
        "user_type": Money(250),
        "counter": collections.Counter({"word": 3, 7: 1}),
        "ordered_dict": collections.OrderedDict([("z", 1), ("a", [2])]),
        "default_dict": collections.defaultdict(list, {"k": [1]}),
        "deque": collections.deque([1, (2, "x")], maxlen=5),
        "complex": complex(1.5, -2),
        "fraction": fractions.Fraction(1, 3),
        "range": range(2, 11, 3),
    }


def same(a, b) -> bool:
    """Equal in type and value, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, pd.DataFrame):
        return a.equals(b) and list(a.dtypes) == list(b.dtypes) and list(a.columns) == list(b.columns)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all())
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a == b
    if isinstance(a, (collections.defaultdict, collections.deque)) and (
            getattr(a, "default_factory", None) is not getattr(b, "default_factory", None)
            or getattr(a, "maxlen", None) != getattr(b, "maxlen", None)):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(k1, k2) for k1, k2 in zip(a, b)) and all(
            same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple, collections.deque)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):
        return a == b and all(type(x) in {type(y) for y in b} for x in a)
    if isinstance(a, datetime.datetime):
        return a == b and str(a.tzinfo) == str(b.tzinfo) and a.utcoffset() == b.utcoffset()
    if isinstance(a, pydantic.BaseModel):
        return all(same(getattr(a, k), getattr(b, k)) for k in type(a).model_fields)
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, decimal.Decimal):
        return str(a) == str(b)
    return a == b


FIELDS = sorted(expected())


@action(reads=["seed"], writes=FIELDS)
def make(state):
    return state.update(**expected())


@action(reads=FIELDS, writes=["ok"])
def check(state, salt: int = 0):
    want = expected()
    for k in FIELDS:
        assert same(state[k], want[k]), f"{k}: got {state[k]!r} ({type(state[k]).__name__})"
    return state.update(ok=True)


def typed_pipeline() -> Pipeline:
    graph = GraphBuilder().with_actions(make=make, check=check).with_transitions(("make", "check")).build()
    return Pipeline(name="typed", graph=graph, entrypoint="make")


def run_count(rw: Rewind) -> int:
    return rw.store.query("SELECT COUNT(*) FROM runs")[0][0]


def assert_outputs_typed(run) -> None:
    step = next(s for s in run.steps if s.node == "make")
    want = expected()
    for k in FIELDS:
        assert same(step.outputs[k], want[k]), (k, step.outputs[k])


def test_every_type_round_trips_through_runs_forks_and_a_new_handle(store_url):
    rw = Rewind(store_url)
    pipe = typed_pipeline()
    run = rw.run(pipe, {"seed": 1})
    assert run.status == "completed", run.error
    assert [s.status for s in run.steps] == ["executed", "executed"]
    assert_outputs_typed(run)

    fork = rw.fork(run.id, at="make")  # no edit: all from cache, no false integrity error
    assert fork.status == "completed", fork.error
    assert [s.status for s in fork.steps] == ["cached", "cached"]
    assert [s.output_hash for s in fork.steps] == [s.output_hash for s in run.steps]
    assert_outputs_typed(fork)

    downstream = rw.fork(run.id, at="check", params={"salt": 1})  # reads the stored values
    assert downstream.status == "completed", downstream.error
    assert downstream.steps[-1].status == "executed"

    fresh = Rewind(store_url)
    fresh.register(pipe)
    assert_outputs_typed(fresh.get_run(run.id))
    assert_outputs_typed(fresh.get_run(fork.id))
    again = fresh.fork(fork.id, at="check", params={"salt": 2})
    assert again.status == "completed", again.error
    assert again.steps[-1].status == "executed"
    assert fresh.fork(run.id, at="make").status == "completed"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), object(), {"k": object()}, "\ud800"],
                         ids=["nan", "inf", "object", "nested-object", "surrogate"])
def test_a_value_with_no_encoding_is_refused_and_writes_nothing(store_url, bad):
    rw = Rewind(store_url)
    pipe = typed_pipeline()
    run = rw.run(pipe, {"seed": 1})
    before = run_count(rw)
    with pytest.raises(RewindError, match="seed"):
        rw.run(pipe, {"seed": bad})
    with pytest.raises(RewindError, match="decimal"):
        rw.fork(run.id, at="check", edit={"decimal": bad})
    assert run_count(rw) == before


@action(reads=["seed"], writes=["as_tuple", "as_list", "as_date", "as_str", "int_key", "str_key",
                                "np_int", "py_int", "as_float", "as_int"])
def twins(state):
    return state.update(as_tuple=(1, 2), as_list=[1, 2], as_date=datetime.date(2024, 1, 2),
                        as_str="2024-01-02", int_key={1: "a"}, str_key={"1": "a"},
                        np_int=np.int64(3), py_int=3, as_float=1.0, as_int=1)


TWINS = {"as_tuple": (1, 2), "as_list": [1, 2], "as_date": datetime.date(2024, 1, 2),
         "as_str": "2024-01-02", "int_key": {1: "a"}, "str_key": {"1": "a"},
         "np_int": np.int64(3), "py_int": 3, "as_float": 1.0, "as_int": 1}


@action(reads=list(TWINS), writes=["ok"])
def check_twins(state, salt: int = 0):
    for k, v in TWINS.items():
        assert same(state[k], v), f"{k}: got {state[k]!r} ({type(state[k]).__name__})"
    return state.update(ok=True)


def test_values_that_hash_alike_keep_their_own_types(store_url):
    """Pairs with one canonical hash (a tuple and a list, a date and its ISO string, ...) must
    not share one stored copy. Needs the engine to key blobs by `serde.blob_ref`."""
    graph = (GraphBuilder().with_actions(twins=twins, check=check_twins)
             .with_transitions(("twins", "check")).build())
    pipe = Pipeline(name="twins", graph=graph, entrypoint="twins")
    rw = Rewind(store_url)
    run = rw.run(pipe, {"seed": 1})
    assert run.status == "completed", run.error
    fresh = Rewind(store_url)
    fresh.register(pipe)
    got = fresh.get_run(run.id).steps[0].outputs
    assert {k: same(got[k], v) for k, v in TWINS.items()} == {k: True for k in TWINS}
    again = fresh.fork(run.id, at="check", params={"salt": 1})
    assert again.status == "completed", again.error


# --- serde in-process -----------------------------------------------------------------------


def test_serde_round_trips_every_type_exactly_and_hashes_stay_put():
    for k, v in expected().items():
        data = serde.encode(v, k)
        back = serde.decode(data)
        assert same(back, v), (k, back)
        assert canonical_hash(back, k) == canonical_hash(v, k)
        assert serde.encode(back, k) == data  # deterministic: one value, one spelling


def test_serde_reads_what_earlier_versions_wrote():
    old = {
        b'{"__rw__":"datetime","v":"2024-01-02T03:04:05"}': datetime.datetime(2024, 1, 2, 3, 4, 5),
        b'{"__rw__":"date","v":"2024-01-02"}': datetime.date(2024, 1, 2),
        b'{"__rw__":"set","v":[1,2]}': {1, 2},
        b'{"__rw__":"bytes","v":"AAE="}': b"\x00\x01",
        b'{"__rw__":"tuple","v":[1,{"__rw__":"tuple","v":[2]}]}': (1, (2,)),
        b'{"a":[1,2.5,"x"]}': {"a": [1, 2.5, "x"]},
    }
    for data, value in old.items():
        assert same(serde.decode(data), value), data


def test_a_type_that_cannot_be_loaded_is_not_called_corruption():
    data = json.dumps({"__rw__": "dataclass", "cls": "no_such_module:Thing", "v": {}}).encode()
    with pytest.raises(serde.UndecodableValue, match="no_such_module.Thing") as e:
        serde.decode(data)
    assert not isinstance(e.value, rewind.IntegrityError)


def test_register_type_validates_and_names_what_it_refuses():
    with pytest.raises(rewind.InvalidRequest):
        serde.register_type("not a class", str, str)

    class Opaque:
        pass

    with pytest.raises(rewind.UnhashableValue, match="register_type"):
        serde.encode({"field": Opaque()}, "out")
    with pytest.raises(rewind.UnhashableValue, match="out"):
        canonical_hash(Opaque(), "out")
