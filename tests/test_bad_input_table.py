"""Every bad input of issue 12 (point 7), with the error it gets, on both backends: a
`RewindError` subclass naming what was wrong, and nothing written."""

from __future__ import annotations

import pytest

from rewind import InvalidRequest, NotFound, Rewind, UnhashableValue

import shapes


def _deep(n: int):
    value: object = "bottom"
    for _ in range(n):
        value = {"x": value}
    return value


BAD = [
    # (what, call, error, the message names)
    ("10k-deep state", lambda rw, r: rw.run(shapes.linear(), {"topic": _deep(10_000)}),
     UnhashableValue, "topic"),
    ("5000-digit integer in state", lambda rw, r: rw.run(shapes.linear(), {"topic": 10**5000}),
     UnhashableValue, "topic"),
    ("5000-digit integer in an edit", lambda rw, r: rw.fork(r.id, at="draft", edit={"plan": 10**5000}),
     UnhashableValue, "plan"),
    ("10k-deep edit", lambda rw, r: rw.fork(r.id, at="draft", edit={"plan": _deep(10_000)}),
     UnhashableValue, "plan"),
    ("NaN in state", lambda rw, r: rw.run(shapes.linear(), {"topic": float("nan")}),
     UnhashableValue, "topic"),
    ("lone surrogate in a key", lambda rw, r: rw.run(shapes.linear(), {"to\ud800pic": 1}),
     InvalidRequest, "surrogate"),
    ("offset 10**30", lambda rw, r: rw.list_runs(offset=10**30), InvalidRequest, "offset"),
    ("1 MB search", lambda rw, r: rw.list_runs(search="x" * 1_000_000), InvalidRequest, "search"),
    ("purge_cache(NaN)", lambda rw, r: rw.purge_cache(float("nan")), InvalidRequest, "older_than_days"),
    ("unknown run", lambda rw, r: rw.get_run("nosuchrun"), NotFound, "nosuchrun"),
    ("unknown node", lambda rw, r: rw.fork(r.id, at="nosuchnode"), NotFound, "nosuchnode"),
    ("a field the node does not read", lambda rw, r: rw.fork(r.id, at="draft", edit={"topic": 1}),
     InvalidRequest, "topic"),
    ("an unknown param", lambda rw, r: rw.fork(r.id, at="plan", params={"nope": 1}),
     InvalidRequest, "nope"),
    ("occurrence 0", lambda rw, r: rw.fork(r.id, at="plan", occurrence=0), InvalidRequest, "occurrence"),
    ("occurrence True", lambda rw, r: rw.fork(r.id, at="plan", occurrence=True), InvalidRequest, "occurrence"),
    ("halt on an unknown node", lambda rw, r: rw.run(shapes.linear(), {"topic": "t"}, halt_after=["x"]),
     InvalidRequest, "x"),
    ("halt_after as a string", lambda rw, r: rw.run(shapes.linear(), {"topic": "t"}, halt_after="plan"),
     InvalidRequest, "halt_after"),
    ("inputs not a dict", lambda rw, r: rw.run(shapes.linear(), {"topic": "t"}, inputs=[1]),
     InvalidRequest, "inputs"),
    ("resume of a completed run", lambda rw, r: rw.resume(r.id), InvalidRequest, r"completed"),
    ("repeats=-2", lambda rw, r: rw.audit(r.id, repeats=-2), InvalidRequest, "repeats"),
]


def _counts(rw) -> dict:
    return {t: rw.store.query(f"SELECT COUNT(*) FROM {t}")[0][0]
            for t in ("runs", "nodes", "cache", "blobs", "burr_state")}


@pytest.mark.parametrize("what,call,error,names", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_a_named_error_and_writes_nothing(store_url, what, call, error, names):
    rw = Rewind(store_url, pipelines=[shapes.linear()])
    run = rw.run(shapes.linear(), {"topic": "good"})
    before = _counts(rw)
    with pytest.raises(error) as e:
        call(rw, run)
    assert names in str(e.value), str(e.value)
    assert e.value.exit_code == 2
    assert _counts(rw) == before
    rw.close()
