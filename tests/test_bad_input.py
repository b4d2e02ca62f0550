"""Bad and extreme input through the public API, on both backends: each is handled correctly or
refused with a clear `RewindError`, and nothing is half-written (row counts of every table are
the same before and after a refusal).

Malformed JSON typed into the CLI is the CLI's business; here: a 10 MB value, nesting 10,000
levels deep, lone surrogates and other odd Unicode, NaN and infinities, unknown runs and nodes,
and SQL metacharacters in every `list_runs` filter.
"""

from __future__ import annotations

import decimal
import os

import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, action
from rewind.errors import InvalidRequest, NotFound, RewindError
from rewind.keys import canonical_hash

TABLES = ("runs", "nodes", "blobs", "burr_state", "cache", "tool_cache", "edges")
TRIED: list = []  # every bad input tried, for the summary line






# --- the pipeline --------------------------------------------------------------------------------
@action(reads=["topic", "payload"], writes=["digest"])
def ingest(state, label: str = "x"):
    rewind.record_usage(5, 5)
    payload = state["payload"]
    return state.update(digest={"label": label, "type": type(payload).__name__,
                                "size": len(payload) if hasattr(payload, "__len__") else None})


@action(reads=["digest", "topic"], writes=["echo"])
def echo(state, depth: int = 0):
    if depth:  # writes a value nested `depth` levels deep
        v: list = []
        for _ in range(depth):
            v = [v]
        return state.update(echo=v)
    return state.update(echo=f"{state['topic']}:{state['digest']['size']}")


PIPELINE = Pipeline(
    name="badinput",
    graph=GraphBuilder().with_actions(ingest=ingest, echo=echo).with_transitions(("ingest", "echo")).build(),
    entrypoint="ingest",
)


def counts(rw: Rewind) -> dict:
    return {t: int(rw.store.query(f"SELECT COUNT(*) FROM {t}")[0][0]) for t in TABLES}


@pytest.fixture
def rw(db_url):
    handle = Rewind(db_url, pipelines=[PIPELINE])
    yield handle
    handle.close()


def backend(rw: Rewind) -> str:
    return "sqlite" if rw.store.placeholder == "?" else "postgres"


def refused(rw: Rewind, call, *words: str, exc=RewindError) -> str:
    """`call` raises `exc` naming `words`, and no table gains or loses a row."""
    before = counts(rw)
    with pytest.raises(exc) as e:
        call()
    message = str(e.value)
    for w in words:
        assert w in message, f"{w!r} not in {message!r}"
    assert counts(rw) == before, message
    TRIED.append((backend(rw), message[:60]))
    return message


def nested_list(depth: int):
    v: list = []
    for _ in range(depth):
        v = [v]
    return v


def nested_dict(depth: int):
    v: dict = {}
    for _ in range(depth):
        v = {"k": v}
    return v


# --- big and deep ----------------------------------------------------------------------------------
def test_a_ten_megabyte_value_is_stored_once_and_hashed(rw, db_url):
    big = "0123456789abcdef" * (10 * 1024 * 1024 // 16)
    assert len(big) == 10 * 1024 * 1024
    run = rw.run(PIPELINE, {"topic": "big", "payload": big})
    assert run.status == "completed", run.error
    assert run.step("ingest").outputs["digest"]["size"] == len(big)
    h = canonical_hash(big)
    big_blobs = rw.store.query("SELECT hash, size FROM blobs WHERE size >= ?", (len(big),))
    assert [r[0] for r in big_blobs] == [h]
    # the same value again, in a second run and a fork: still one copy, served from cache
    again = rw.run(PIPELINE, {"topic": "big", "payload": big})
    fork = rw.fork(run.id, at="echo")
    assert again.total_tokens == 0 and fork.total_tokens == 0
    assert [s.status for s in again.steps] == ["cached", "cached"]
    assert rw.store.query("SELECT COUNT(*) FROM blobs WHERE size >= ?", (len(big),))[0][0] == 1
    # Burr's saved states refer to it by hash, never by value
    biggest_state = max(len(str(r[0])) for r in rw.store.query("SELECT state FROM burr_state"))
    assert biggest_state < 10_000
    fresh = Rewind(db_url, pipelines=[PIPELINE])
    assert fresh.get_run(run.id).step("ingest").inputs["payload"] == big
    fresh.close()


@pytest.mark.parametrize("shape", ["list", "dict"])
def test_nesting_ten_thousand_levels_is_refused_naming_the_field(rw, shape):
    deep = nested_list(10_000) if shape == "list" else nested_dict(10_000)
    base = rw.run(PIPELINE, {"topic": "shallow", "payload": "p"})
    refused(rw, lambda: rw.run(PIPELINE, {"topic": "t", "payload": deep}), "payload")
    refused(rw, lambda: rw.fork(base.id, at="ingest", edit={"payload": deep}), "payload")
    refused(rw, lambda: rw.fork(base.id, at="ingest", params={"label": deep}), "label")
    refused(rw, lambda: rewind.canonical_hash(deep), "nested")


def test_a_node_writing_a_too_deep_value_fails_its_step_cleanly(rw):
    bound = Pipeline(
        name="deepwriter",
        graph=GraphBuilder().with_actions(ingest=ingest, echo=echo.bind(depth=10_000))
        .with_transitions(("ingest", "echo")).build(),
        entrypoint="ingest",
    )
    run = rw.run(bound, {"topic": "t", "payload": "p"})
    assert run.status == "failed"
    assert "echo" in run.error
    assert [(s.node, s.status) for s in run.steps] == [("ingest", "executed"), ("echo", "failed")]
    assert rw.store.query("SELECT COUNT(*) FROM cache WHERE node = 'echo'")[0][0] == 0
    assert rw.get_run(run.id).step("echo").error


# --- Unicode -----------------------------------------------------------------------------------------
LONE = ["\ud800", "\udfff", "a\udc80b", "\ud83d\ude00"]  # the last: a UTF-16 pair as two code points


@pytest.mark.parametrize("bad", LONE)
def test_lone_surrogates_are_refused_everywhere(rw, bad):
    base = rw.run(PIPELINE, {"topic": "fine", "payload": "p"})
    refused(rw, lambda: rw.run(PIPELINE, {"topic": bad, "payload": "p"}), "topic", "Unicode")
    refused(rw, lambda: rw.run(PIPELINE, {"topic": "t", "payload": {"list": ["ok", bad]}}), "payload")
    refused(rw, lambda: rw.run(PIPELINE, {"topic": "t", "payload": "p", bad: 1}))  # a key
    refused(rw, lambda: rw.fork(base.id, at="ingest", edit={"payload": bad}), "edit.payload")
    refused(rw, lambda: rw.fork(base.id, at="ingest", params={"label": bad}), "params.label")
    refused(rw, lambda: rw.fork(base.id, at=bad))
    for lookup in (rw.get_run, rw.lineage, rw.export_run, rw.resume,
                   lambda rid: rw.fork(rid, at="ingest"), lambda rid: rw.diff(base.id, rid)):
        refused(rw, lambda: lookup(bad))
    for field in ("search", "pipeline", "status", "parent_id"):
        refused(rw, lambda: rw.list_runs(**{field: bad}))
    assert rw.get_run(base.id).status == "completed"


ODD_BUT_VALID = {
    "nul": "a\x00b",
    "noncharacters": "\uffff\U0010ffff",
    "astral": "\U0001F600 emoji",
    "rtl and combining": "\u202eabc e\u0301",
    "bom": "\ufeffstart",
}


@pytest.mark.parametrize("name", sorted(ODD_BUT_VALID))
def test_odd_but_valid_unicode_round_trips(rw, db_url, name):
    text = ODD_BUT_VALID[name]
    run = rw.run(PIPELINE, {"topic": text, "payload": [text, {text: text}]})
    assert run.status == "completed", run.error
    fresh = Rewind(db_url, pipelines=[PIPELINE])
    got = fresh.get_run(run.id)
    assert got.step("ingest").inputs == {"topic": text, "payload": [text, {text: text}]}
    assert got.step("echo").outputs == {"echo": f"{text}:2"}
    fork = fresh.fork(run.id, at="echo", edit={"topic": text + "!"})
    assert fork.status == "completed" and fork.step("echo").outputs["echo"] == f"{text}!:2"
    # searching for it finds the run (a NUL in display text reads as U+FFFD on both backends)
    found = [r.id for r in fresh.list_runs(search=text)]
    assert {run.id, fork.id} <= set(found)
    fresh.close()


def test_bytes_that_are_not_utf8_are_a_value_like_any_other(rw):
    raw = b"\xff\xfe\x00\x80 not utf-8"
    run = rw.run(PIPELINE, {"topic": "bytes", "payload": raw})
    assert run.status == "completed", run.error
    assert run.step("ingest").outputs["digest"] == {"label": "x", "type": "bytes", "size": len(raw)}
    assert rw.get_run(run.id).step("ingest").inputs["payload"] == raw


def test_nul_in_a_state_key_is_handled_the_same_on_both_backends(rw):
    """A NUL in a state *key* cannot go into PostgreSQL's JSONB state rows: refused on both
    backends alike (not accepted by one and a driver error on the other)."""
    refused(rw, lambda: rw.run(PIPELINE, {"topic": "t", "payload": "p", "k\x00": 1}))


# --- numbers ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), decimal.Decimal("NaN")],
                         ids=["nan", "inf", "-inf", "decimal-nan"])
def test_nan_and_infinities_are_refused_naming_the_field(rw, bad):
    base = rw.run(PIPELINE, {"topic": "numbers", "payload": [1.5, 2]})
    refused(rw, lambda: rw.run(PIPELINE, {"topic": "t", "payload": bad}), "payload")
    refused(rw, lambda: rw.run(PIPELINE, {"topic": "t", "payload": {"scores": [1.0, bad]}}), "payload")
    refused(rw, lambda: rw.fork(base.id, at="ingest", edit={"payload": bad}), "edit.payload")
    refused(rw, lambda: rw.fork(base.id, at="echo", params={"depth": bad}), "params.depth")
    refused(rw, lambda: rewind.canonical_hash({"x": bad}), "x")


def test_extreme_but_valid_numbers_round_trip(rw):
    values = [0.1, -0.0, 1e308, 5e-324, 2**63 - 1, -(2**63), 2**100, 1.0]
    run = rw.run(PIPELINE, {"topic": "numbers", "payload": values})
    assert run.status == "completed", run.error
    assert rw.get_run(run.id).step("ingest").inputs["payload"] == values


# --- unknown runs and nodes --------------------------------------------------------------------------
def test_unknown_runs_and_nodes_are_clear_errors(rw):
    base = rw.run(PIPELINE, {"topic": "known", "payload": "p"})
    for rid in ("no-such-run", "", "0" * 16, "%", "'; DROP TABLE runs; --"):
        for call in (rw.get_run, rw.lineage, rw.export_run, rw.resume, rw.audit,
                     lambda r: rw.fork(r, at="ingest"), lambda r: rw.diff(base.id, r),
                     lambda r: rw.diff(r, base.id)):
            refused(rw, lambda: call(rid), exc=NotFound)
    refused(rw, lambda: rw.fork(base.id, at="nope"), "nope", "ingest", exc=NotFound)
    refused(rw, lambda: rw.fork(base.id, at="echo", occurrence=2), "occurrence 2", exc=NotFound)
    refused(rw, lambda: rw.fork(base.id, at="echo", occurrence=0), "occurrence", exc=InvalidRequest)
    refused(rw, lambda: rw.fork(base.id, at="echo", edit={"payload": 1}), "payload", exc=InvalidRequest)
    refused(rw, lambda: rw.fork(base.id, at="echo", params={"colour": 1}), "colour", exc=InvalidRequest)
    refused(rw, lambda: rw.run("unregistered-pipeline", {}), "unregistered-pipeline", exc=NotFound)
    refused(rw, lambda: rw.run(PIPELINE, {1: "x"}), exc=InvalidRequest)
    refused(rw, lambda: rw.resume(base.id), "completed", exc=InvalidRequest)
    for bad in (-1, "abc", None):
        refused(rw, lambda: rw.list_runs(limit=bad), exc=InvalidRequest)
        refused(rw, lambda: rw.list_runs(offset=bad), exc=InvalidRequest)


# --- SQL metacharacters ------------------------------------------------------------------------------
META = ["'; DROP TABLE runs; --", "%", "_", "\\", "'", '"', "--", ";", "%%", "\\%", "\\_", "?",
        "%s", "*", "[a-z]", "' OR '1'='1", "$1", "\x00"]


def test_sql_metacharacters_in_every_list_runs_filter(rw, db_url):
    odd = Pipeline(
        name="p'%_\\; DROP TABLE runs; --",
        graph=GraphBuilder().with_actions(ingest=ingest, echo=echo).with_transitions(("ingest", "echo")).build(),
        entrypoint="ingest",
    )
    topics = ["100% natural", "snake_case topic", "back\\slash topic", "it's quoted",
              "'; DROP TABLE runs; --", "plain words", "x?y %s $1"]
    runs = [rw.run(PIPELINE, {"topic": t, "payload": "p"}) for t in topics]
    runs.append(rw.run(odd, {"topic": "from the odd pipeline", "payload": "p"}))
    fork = rw.fork(runs[0].id, at="echo", edit={"topic": "100% forked"})
    everything = rw.list_runs(limit=1000)
    assert len(everything) == len(runs) + 1
    before = counts(rw)
    pg = db_url.startswith("postgres")

    def literal(value: str, run) -> bool:
        return any(value in (x or "") for x in (run.id, run.summary, run.pipeline))

    checked = 0
    for value in META + [odd.name, "100%", "snake_", "back\\"]:
        got = {r.id for r in rw.list_runs(search=value, limit=1000)}
        want = {r.id for r in everything if literal(value, r)}
        assert got == want, value
        assert rw.count_runs(search=value) == len(got)
        assert {r.id for r in rw.list_runs(pipeline=value, limit=1000)} == {
            r.id for r in everything if r.pipeline == value}
        assert rw.list_runs(status=value) == []
        assert rw.list_runs(parent_id=value) == []
        assert rw.list_runs(search=value, pipeline=value, status=value, parent_id=value) == []
        checked += 1
        TRIED.append((backend(rw), repr(value)))
    # the literal matches are real matches, not accidents
    assert {r.id for r in rw.list_runs(search="100%")} == {runs[0].id, fork.id}
    assert {r.id for r in rw.list_runs(search="snake_")} == {runs[1].id}
    assert {r.id for r in rw.list_runs(search="back\\")} == {runs[2].id}
    assert {r.id for r in rw.list_runs(search="'; DROP TABLE runs; --")} == {runs[4].id}
    assert {r.id for r in rw.list_runs(search="; DROP TABLE")} == {runs[4].id, runs[-1].id}
    assert [r.id for r in rw.list_runs(pipeline=odd.name)] == [runs[-1].id]
    assert [r.id for r in rw.list_runs(parent_id=runs[0].id)] == [fork.id]
    # the tables survived, untouched
    assert counts(rw) == before
    assert rw.run(PIPELINE, {"topic": "after", "payload": "p"}).status == "completed"
    print(f"\n[{'postgres' if pg else 'sqlite'}] {checked} metacharacter strings x 4 filters: "
          f"literal results, {before['runs']} runs intact")


def test_summary_of_bad_inputs():
    """Prints how many bad inputs the tests above tried, per backend (run with -s)."""
    per = {b: sum(1 for x, _ in TRIED if x == b) for b in ("sqlite", "postgres")}
    print(f"\n[bad input] refused or handled without a half-written row: {per}")


def test_a_value_that_holds_itself_is_refused_in_one_short_line():
    """The refusal spelled the whole 500-level path (`z.d.d.d…`), one line of over 1,000
    characters (a stranger's find): it is cut, and says what such a value usually is."""
    looped: dict = {}
    looped["d"] = looped
    with pytest.raises(rewind.UnhashableValue) as e:
        rewind.canonical_hash({"z": looped}, "two")
    assert len(str(e.value)) < 300 and "holds itself" in str(e.value)
    assert e.value.field == "two"
