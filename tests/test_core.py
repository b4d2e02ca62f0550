"""The core contract of DESIGN.md on three pipeline shapes, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sqlite3

import pytest
from burr.core import ApplicationBuilder
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, RewindError, action
from tests import shapes
from tests.shapes import CALLS, SHAPES, calls_of


@pytest.fixture(autouse=True)
def clean_calls():
    CALLS.clear()
    shapes.SETTINGS["fail_in"] = None
    yield
    shapes.SETTINGS["fail_in"] = None


def table_counts(rw: Rewind) -> dict:
    return {
        t: rw.store.query(f"SELECT COUNT(*) FROM {t}")[0][0]
        for t in ("runs", "nodes", "cache", "blobs", "burr_state")
    }


@pytest.mark.parametrize("shape", list(SHAPES))
def test_run_records_every_step(store_url, shape):
    make, state, _ = SHAPES[shape]
    rw = Rewind(store_url)
    run = rw.run(make(), state)
    assert run.status == "completed", run.error
    assert run.steps and all(s.status == "executed" for s in run.steps[:-1] if s.node != "publish")
    for s in run.steps:
        assert len(s.input_hash) == 64 and len(s.output_hash) == 64
        assert s.output_hash == rewind.canonical_hash(s.outputs)
    assert run.total_tokens == sum(s.tokens for s in run.steps) > 0


@pytest.mark.parametrize("shape", list(SHAPES))
def test_no_edit_fork_replays_from_cache(store_url, shape):
    make, state, at = SHAPES[shape]
    rw = Rewind(store_url)
    run = rw.run(make(), state)
    CALLS.clear()
    fork = rw.fork(run.id, at=at)
    assert fork.status == "completed"
    assert CALLS == []  # no node function called
    assert fork.total_tokens == 0 and fork.tokens_saved > 0
    assert fork.parent_id == run.id and fork.fork_node == at
    assert [s.output_hash for s in fork.steps] == [s.output_hash for s in run.steps]
    index = [s.node for s in run.steps].index(at)
    assert all(s.status == "inherited" for s in fork.steps[:index])
    assert {s.status for s in fork.steps[index:]} <= {"cached", "dry-run"}
    d = rw.diff(run.id, fork.id)
    assert d.first_divergence is None and d.tokens_b == 0


def test_identical_rerun_is_free_but_side_effects_run(store_url):
    rw = Rewind(store_url)
    first = rw.run(shapes.linear(), {"topic": "wasps"})
    CALLS.clear()
    again = rw.run(shapes.linear(), {"topic": "wasps"})
    assert again.total_tokens == 0
    assert [s.status for s in again.steps] == ["cached"] * 4 + ["executed"]
    assert CALLS == ["publish"]  # a run (not a fork) performs its side effect
    assert [s.output_hash for s in again.steps] == [s.output_hash for s in first.steps]


def test_use_cache_false_executes_everything(store_url):
    rw = Rewind(store_url)
    rw.run(shapes.linear(), {"topic": "ants"})
    CALLS.clear()
    run = rw.run(shapes.linear(), {"topic": "ants"}, use_cache=False)
    assert [s.status for s in run.steps] == ["executed"] * 5
    assert CALLS == ["plan", "draft", "polish", "stats", "publish"]
    assert run.total_tokens > 0


def test_edit_reruns_exactly_the_changed_steps(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.linear(), {"topic": "honey bees"})
    CALLS.clear()
    fork = rw.fork(run.id, at="draft", edit={"plan": "a different plan"})
    statuses = {s.node: s.status for s in fork.steps}
    assert statuses == {
        "plan": "inherited", "draft": "executed", "polish": "executed",
        "stats": "cached",  # far downstream, reads only `topic`: stays cached
        "publish": "dry-run",
    }
    assert CALLS == ["draft", "polish"]
    assert "`plan` changed" in fork.step("draft").reason
    assert fork.total_tokens == fork.step("draft").tokens + fork.step("polish").tokens
    assert fork.step("stats").output_hash == run.step("stats").output_hash
    # the side effect was not performed and its outputs are None
    assert fork.step("publish").outputs == {"receipt": None}
    d = rw.diff(run.id, fork.id)
    assert d.first_divergence == "draft"
    row = {r.node: r for r in d.rows}
    assert row["publish"].identical is None  # dry-run rows are never compared
    assert row["stats"].identical is True
    assert "a different plan" in row["draft"].text_diffs["draft"]


def test_param_fork_and_fork_of_fork_keeps_params(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.linear(), {"topic": "moths"})
    hot = rw.fork(run.id, at="plan", params={"temperature": 0.7})
    assert hot.step("plan").status == "executed"
    assert "param `temperature` changed" in hot.step("plan").reason
    assert hot.step("plan").params["temperature"] == 0.7
    CALLS.clear()
    again = rw.fork(hot.id, at="draft")
    assert CALLS == [] and again.total_tokens == 0
    assert [s.output_hash for s in again.steps] == [s.output_hash for s in hot.steps]


def test_fork_at_entrypoint_with_edit(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.linear(), {"topic": "moths"})
    CALLS.clear()
    fork = rw.fork(run.id, at="plan", edit={"topic": "butterflies"})
    assert fork.status == "completed"
    assert CALLS == ["plan", "draft", "polish", "stats"]
    assert "butterflies" in fork.step("plan").outputs["plan"]
    assert fork.step("publish").status == "dry-run"


def test_branching_edit_takes_the_other_branch(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.branching(), {"text": "a fairly long text about pollination and bees"})
    assert [s.node for s in run.steps] == ["score", "long", "finish"]
    fork = rw.fork(run.id, at="score", edit={"text": "tiny"})
    assert [s.node for s in fork.steps] == ["score", "short", "finish"]
    d = rw.diff(run.id, fork.id)
    assert d.first_divergence == "score"
    nodes = [r.node for r in d.rows]
    assert "long" in nodes and "short" in nodes
    assert {r.node: r for r in d.rows}["long"].b_status is None


def test_loop_occurrences_are_addressable(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.loop(), {"goal": "write"})
    assert [s.node for s in run.steps] == ["start", "improve", "improve", "improve", "done"]
    assert [s.occurrence for s in run.steps if s.node == "improve"] == [1, 2, 3]
    CALLS.clear()
    fork = rw.fork(run.id, at="improve", occurrence=2, edit={"draft": "WRITE+"})
    assert [s.status for s in fork.steps][:2] == ["inherited", "inherited"]
    assert fork.steps[2].node == "improve" and fork.steps[2].occurrence == 2
    assert fork.step("done").outputs["result"] == "WRITE+++"
    with pytest.raises(RewindError, match="occurrence 4"):
        rw.fork(run.id, at="improve", occurrence=4)


def test_param_override_in_loop_applies_to_later_visits(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.loop(), {"goal": "go"})
    fork = rw.fork(run.id, at="improve", params={"suffix": "!"})
    assert fork.step("done").outputs["result"] == "go!!!"
    assert run.step("done").outputs["result"] == "go+++"


def test_time_bound_entry_expires(store_url):
    @action(reads=["q"], writes=["hits"], determinism="time-bound", ttl=300)
    def search(state):
        CALLS.append("search")
        return state.update(hits=[state["q"], "result"])

    @action(reads=["hits"], writes=["n"])
    def count(state):
        CALLS.append("count")
        return state.update(n=len(state["hits"]))

    graph = GraphBuilder().with_actions(search=search, count=count).with_transitions(("search", "count")).build()
    rw = Rewind(store_url)
    run = rw.run(Pipeline("ttl", graph, "search"), {"q": "x"})
    CALLS.clear()
    fresh = rw.fork(run.id, at="search")
    assert fresh.step("search").status == "cached" and CALLS == []
    with rw.store.transaction():
        rw.store.execute("UPDATE cache SET cached_at = cached_at - 301 WHERE node = 'search'")
    stale = rw.fork(run.id, at="search")
    assert stale.step("search").status == "executed"
    assert "ttl expired" in stale.step("search").reason
    assert stale.step("count").status == "cached"  # same hits: downstream still cached
    refreshed = rw.fork(run.id, at="search")
    assert refreshed.step("search").status == "cached"  # the entry was refreshed


def test_side_effects_opt_in(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.linear(), {"topic": "owls"})
    CALLS.clear()
    dry = rw.fork(run.id, at="draft")
    assert dry.step("publish").status == "dry-run" and "publish" not in CALLS
    # unchanged inputs: the recorded outputs of the effect are reused
    assert dry.step("publish").outputs == run.step("publish").outputs
    wet = rw.fork(run.id, at="draft", allow_side_effects=True)
    assert wet.step("publish").status == "executed" and CALLS == ["publish"]
    assert "allow_side_effects" in wet.step("publish").reason
    assert rw.store.query("SELECT COUNT(*) FROM cache WHERE node = 'publish'")[0][0] == 0


def test_failure_is_recorded_and_never_cached(store_url):
    rw = Rewind(store_url)
    shapes.SETTINGS["fail_in"] = "draft"
    run = rw.run(shapes.linear(), {"topic": "crows"})
    assert run.status == "failed"
    assert run.steps[-1].node == "draft" and run.steps[-1].status == "failed"
    assert "draft exploded" in run.steps[-1].error and "draft exploded" in run.error
    assert rw.store.query("SELECT COUNT(*) FROM cache WHERE node = 'draft'")[0][0] == 0
    shapes.SETTINGS["fail_in"] = None
    CALLS.clear()
    fixed = rw.fork(run.id, at="draft")
    assert fixed.status == "completed"
    assert CALLS[0] == "draft"  # not served from cache
    assert "failed" in fixed.step("draft").reason


def test_fork_of_interrupted_run_at_next_node(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.linear(), {"topic": "eels"})
    # simulate a run that stopped after `draft`: keep its first two steps only
    with rw.store.transaction():
        rw.store.execute("DELETE FROM nodes WHERE run_id = ? AND idx >= 2", (run.id,))
        rw.store.update_run(run.id, status="interrupted")
    fork = rw.fork(run.id, at="polish")
    assert [s.status for s in fork.steps[:2]] == ["inherited", "inherited"]
    assert fork.step("polish").status == "cached"
    assert fork.status == "completed"


def test_undeclared_read_fails_the_step(store_url):
    @action(reads=["a"], writes=["b"])
    def sneaky(state):
        return state.update(b=state["a"] + state["secret"])

    graph = GraphBuilder().with_actions(sneaky=sneaky).build()
    rw = Rewind(store_url)
    run = rw.run(Pipeline("sneaky", graph, "sneaky"), {"a": "x", "secret": "y"})
    assert run.status == "failed"
    assert "secret" in run.steps[0].error and "sneaky" in run.steps[0].error
    assert rw.store.query("SELECT COUNT(*) FROM cache")[0][0] == 0


def test_hashing_is_key_order_independent(store_url):
    assert rewind.canonical_hash({"a": 1, "b": [1.0, {"y": 2, "x": 3}]}) == rewind.canonical_hash(
        {"b": [1, {"x": 3, "y": 2}], "a": 1}
    )
    rw = Rewind(store_url)
    p = shapes.branching()
    first = rw.run(p, {"text": "short one", "meta": {"a": 1, "b": 2}})
    second = rw.run(p, {"meta": {"b": 2, "a": 1}, "text": "short one"})
    assert second.total_tokens == 0
    assert [s.input_hash for s in second.steps] == [s.input_hash for s in first.steps]


def test_unhashable_values_are_refused_and_nothing_written(store_url):
    rw = Rewind(store_url)
    p = shapes.linear()
    before = table_counts(rw)
    with pytest.raises(RewindError, match="topic"):
        rw.run(p, {"topic": object()})
    with pytest.raises(RewindError, match="nan"):
        rw.run(p, {"topic": float("nan")})
    assert table_counts(rw) == before
    run = rw.run(p, {"topic": "ok"})
    before = table_counts(rw)
    for bad in (
        dict(run_id="no-such-run", at="draft"),
        dict(run_id=run.id, at="no_such_node"),
        dict(run_id=run.id, at="draft", edit={"topic": "not read by draft"}),
        dict(run_id=run.id, at="draft", params={"nope": 1}),
        dict(run_id=run.id, at="draft", edit={"plan": {1, object()}}),
    ):
        with pytest.raises(RewindError):
            rw.fork(**bad)
    assert table_counts(rw) == before


def test_unregistered_pipeline_is_a_clear_error(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.linear(), {"topic": "x"})
    other = Rewind(store_url)  # a new handle that never saw the pipeline
    with pytest.raises(RewindError, match="not registered"):
        other.fork(run.id, at="draft")


def test_new_handle_reads_everything_back(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.linear(), {"topic": "herons"})
    fork = rw.fork(run.id, at="draft", edit={"plan": "p2"})
    rw.close()
    again = Rewind(store_url)
    for original in (run, fork):
        loaded = again.get_run(original.id)
        assert loaded.status == original.status
        assert [(s.node, s.status, s.input_hash, s.output_hash) for s in loaded.steps] == [
            (s.node, s.status, s.input_hash, s.output_hash) for s in original.steps
        ]
        assert [s.outputs for s in loaded.steps] == [s.outputs for s in original.steps]
        assert loaded.total_tokens == original.total_tokens
    listed = again.list_runs()
    assert [r.id for r in listed] == [fork.id, run.id]
    assert again.list_runs(parent_id=run.id)[0].id == fork.id
    assert again.list_runs(search="herons", limit=1)[0].id in {run.id, fork.id}
    assert again.list_runs(status="failed") == []
    snapshot = again.state_at(loaded.steps[1])
    assert snapshot["draft"] == loaded.steps[1].outputs["draft"]


def test_bind_keeps_policy_and_params(store_url):
    @action(reads=["x"], writes=["y"], determinism="side-effect")
    def send(state, channel: str = "email"):
        CALLS.append(f"send:{channel}")
        return state.update(y=channel)

    @action(reads=["x"], writes=["x2"])
    def first(state):
        return state.update(x2=state["x"])

    graph = (
        GraphBuilder().with_actions(first=first, send=send.bind(channel="sms"))
        .with_transitions(("first", "send")).build()
    )
    rw = Rewind(store_url)
    run = rw.run(Pipeline("bound", graph, "first"), {"x": 1})
    assert run.step("send").outputs == {"y": "sms"}
    assert run.step("send").params == {"channel": "sms"}
    CALLS.clear()
    fork = rw.fork(run.id, at="first")
    assert fork.step("send").status == "dry-run" and CALLS == []


def test_edited_code_constant_is_a_miss(store_url):
    source = '''
import rewind
PROMPT = "{p}"
@rewind.action(reads=["q"], writes=["a"])
def answer(state):
    return state.update(a=PROMPT + state["q"])
'''
    hashes = []
    for prompt in ("Hello ", "Hello ", "Goodbye "):
        namespace: dict = {}
        exec(compile(source.format(p=prompt), f"<answer-{prompt}>", "exec"), namespace)
        graph = GraphBuilder().with_actions(answer=namespace["answer"]).build()
        rw = Rewind(store_url)
        run = rw.run(Pipeline("consts", graph, "answer"), {"q": "world"})
        hashes.append((run.steps[0].input_hash, run.steps[0].status))
    assert hashes[0][0] == hashes[1][0] and hashes[1][1] == "cached"
    assert hashes[2][0] != hashes[0][0] and hashes[2][1] == "executed"


def test_record_usage_outside_a_step_is_a_noop():
    assert rewind.record_usage(10, 20) is None
    assert rewind.llm.record_usage("x", None) is None


def test_sqlite_store_is_wal_with_normal_sync(tmp_path):
    rw = Rewind(str(tmp_path / "w.db"))
    assert rw.store.query("PRAGMA journal_mode")[0][0] == "wal"
    assert rw.store.query("PRAGMA synchronous")[0][0] == 1  # NORMAL: no fsync per commit
    assert rw.store.query("PRAGMA busy_timeout")[0][0] >= 1000


def test_runs_left_running_by_a_dead_process_read_interrupted(tmp_path):
    path = str(tmp_path / "dead.db")
    rw = Rewind(path)
    run = rw.run(shapes.linear(), {"topic": "x"})
    with rw.store.transaction():
        # a pid that cannot be alive: above the kernel's pid_max
        rw.store.update_run(run.id, status="running", owner_pid=2**22 + 7, owner_started=None)
    rw.close()
    reopened = Rewind(path)
    loaded = reopened.get_run(run.id)
    assert loaded.status == "interrupted"
    assert len(loaded.steps) == 5
    # a run owned by this live process is never marked
    with reopened.store.transaction():
        reopened.store.update_run(run.id, status="running", owner_pid=__import__("os").getpid())
    Rewind(path)
    assert Rewind(path).get_run(run.id).status == "running"


def test_no_edit_fork_adds_rows_not_copies(tmp_path):
    rw = Rewind(str(tmp_path / "dedupe.db"))
    run = rw.run(shapes.linear(), {"topic": "x" * 5000})
    blobs_before = rw.store.query("SELECT COUNT(*), SUM(size) FROM blobs")[0]
    rw.fork(run.id, at="draft")
    assert rw.store.query("SELECT COUNT(*), SUM(size) FROM blobs")[0] == blobs_before
    state_rows = rw.store.query("SELECT state FROM burr_state")
    assert all(len(r[0]) < 2000 for r in state_rows)  # references, not the 5 KB values


class Doubler(__import__("burr.core", fromlist=["Action"]).Action):
    """A class-based Burr action (run + update), not a function."""

    @property
    def reads(self):
        return ["n"]

    @property
    def writes(self):
        return ["m"]

    def run(self, state):
        CALLS.append("doubler")
        return {"m": state["n"] * 2}

    def update(self, result, state):
        return state.update(**result)


def test_plain_burr_and_class_based_actions(store_url):
    from burr.core.action import action as burr_action

    @burr_action(reads=["m"], writes=["k"])
    def plus_one(state):
        return {"k": state["m"] + 1}, state.update(k=state["m"] + 1)

    graph = GraphBuilder().with_actions(double=Doubler(), plus=plus_one).with_transitions(("double", "plus")).build()
    rw = Rewind(store_url)
    run = rw.run(Pipeline("classy", graph, "double"), {"n": 2})
    assert run.status == "completed", run.error
    assert [s.outputs for s in run.steps] == [{"m": 4}, {"k": 5}]
    CALLS.clear()
    fork = rw.fork(run.id, at="plus", edit={"m": 10})
    assert fork.step("plus").outputs == {"k": 11} and CALLS == []
    again = rw.fork(run.id, at="double")
    assert again.total_tokens == 0 and CALLS == []


def test_on_step_reports_only_committed_steps(store_url):
    """Cheap steps share commits; a step is reported done only once another connection can
    read it, so a crash never loses a step that was reported."""
    rw = Rewind(store_url)
    observer = Rewind(store_url)  # its own connection: sees committed rows only
    seen = []

    def on_step(step):
        rows = observer.store.query(
            "SELECT status FROM nodes WHERE run_id = ? AND idx = ?", (step.run_id, step.index)
        )
        seen.append((step.node, step.status, [r[0] for r in rows]))

    run = rw.run(shapes.linear(), {"topic": "kites"}, on_step=on_step)
    assert [s[0] for s in seen] == [s.node for s in run.steps]
    assert all(rows == [status] for _, status, rows in seen)
    seen.clear()
    fork = rw.fork(run.id, at="draft", edit={"plan": "other"}, on_step=on_step)
    assert [s[0] for s in seen] == [s.node for s in fork.steps if s.status != "inherited"]
    assert all(rows == [status] for _, status, rows in seen)


def test_param_change_holds_from_its_visit_on(store_url):
    """A param set at visit 3 of a loop does not reach back to visits 1 and 2 when the fork is
    itself forked earlier: the no-edit fork of the fork replays it exactly."""
    rw = Rewind(store_url)
    run = rw.run(shapes.loop(), {"goal": "go"})
    f1 = rw.fork(run.id, at="improve", occurrence=3, params={"suffix": "!"})
    assert f1.step("done").outputs["result"] == "go++!"
    CALLS.clear()
    f2 = rw.fork(f1.id, at="improve", occurrence=1)
    assert CALLS == [] and f2.total_tokens == 0
    assert [s.output_hash for s in f2.steps] == [s.output_hash for s in f1.steps]
    assert [s.params.get("suffix") for s in f2.steps if s.node == "improve"] == ["+", "+", "!"]


def test_an_ancestors_later_edit_is_replayed_when_forking_earlier(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.linear(), {"topic": "otters"})
    f1 = rw.fork(run.id, at="polish", edit={"draft": "EDITED draft"})
    CALLS.clear()
    f2 = rw.fork(f1.id, at="plan")  # before f1's edit point, no edit of its own
    assert CALLS == [] and f2.total_tokens == 0
    assert [s.output_hash for s in f2.steps] == [s.output_hash for s in f1.steps]
    assert f2.step("polish").outputs["report"] == "EDITED DRAFT"


def test_in_place_change_of_a_read_is_kept_as_burr_keeps_it_and_replays(store_url):
    """Burr's state shares the node's objects, so a read changed in place is changed in the
    state after the step; Rewind keeps it too (as an undeclared write, recorded by value, so
    the step before keeps its own value), and a no-edit fork replays it from the cache."""
    @action(reads=["cfg"], writes=["out"])
    def bump(state):
        cfg = state["cfg"]
        cfg["n"] += 1  # mutates its input in place and does not declare it as a write
        return state.update(out=cfg["n"])

    @action(reads=["cfg", "out"], writes=["final"])
    def report(state):
        rewind.record_usage(5, 5)
        return state.update(final=[state["cfg"]["n"], state["out"]])

    graph = GraphBuilder().with_actions(bump=bump, report=report).with_transitions(("bump", "report")).build()
    app = ApplicationBuilder().with_graph(graph).with_entrypoint("bump").with_state(cfg={"n": 0}).build()
    app.run(halt_after=["report"])
    rw = Rewind(store_url)
    run = rw.run(Pipeline("inplace", graph, "bump"), {"cfg": {"n": 0}})
    assert run.step("report").outputs["final"] == app.state["final"] == [1, 1]
    assert rw.state_at(run.step("bump"))["cfg"] == {"n": 1}
    assert run.step("bump").input_refs and rw.store.values(
        {"cfg": run.step("bump").input_refs["cfg"]})["cfg"] == {"n": 0}  # what it was given
    fork = rw.fork(run.id, at="bump")
    assert fork.total_tokens == 0
    assert [s.output_hash for s in fork.steps] == [s.output_hash for s in run.steps]


PROMPT_FOR_TEST = "say hi"


@action(reads=["topic"], writes=["said"])
def talk(state):
    return state.update(said=PROMPT_FOR_TEST + " " + state["topic"])


def test_rebinding_a_module_constant_is_a_cache_miss(store_url, monkeypatch):
    graph = GraphBuilder().with_actions(talk=talk).build()
    rw = Rewind(store_url)
    first = rw.run(Pipeline("talk", graph, "talk"), {"topic": "x"})
    assert first.steps[0].outputs == {"said": "say hi x"}
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "PROMPT_FOR_TEST", "say bye")
    second = rw.run(Pipeline("talk", graph, "talk"), {"topic": "x"})
    assert second.steps[0].status == "executed"
    assert second.steps[0].outputs == {"said": "say bye x"}


def test_a_blob_purged_after_a_cache_hit_is_stored_again(store_url):
    """A concurrent gc may delete a blob between a cache hit (often served from memory) and the
    commit of the step that refers to it: the commit stores it again."""
    rw = Rewind(store_url)
    run = rw.run(shapes.linear(), {"topic": "gulls"})
    h = run.step("polish").output_refs["report"]
    rw.fork(run.id, at="draft")  # warms this handle's memory of verified blobs
    with rw.store.transaction():
        rw.store.execute("DELETE FROM blobs WHERE hash = ?", (h,))
    fork = rw.fork(run.id, at="draft")
    assert fork.step("polish").status == "cached"
    again = Rewind(store_url)  # no memory: reads the database
    assert again.get_run(fork.id).step("polish").outputs["report"] == run.step("polish").outputs["report"]


def test_an_ancestors_edit_keeps_its_python_types(store_url):
    import datetime

    @action(reads=["when"], writes=["day"])
    def weekday(state):
        return state.update(day=state["when"].strftime("%A"))

    @action(reads=["day"], writes=["line"])
    def say(state):
        return state.update(line=f"it is {state['day']}")

    @action(reads=["name"], writes=["greeting"])
    def greet(state):
        return state.update(greeting=f"hello {state['name']}")

    graph = (
        GraphBuilder().with_actions(greet=greet, weekday=weekday, say=say)
        .with_transitions(("greet", "weekday"), ("weekday", "say")).build()
    )
    rw = Rewind(store_url)
    run = rw.run(Pipeline("days", graph, "greet"), {"name": "ann", "when": datetime.date(2026, 11, 29)})
    f1 = rw.fork(run.id, at="weekday", edit={"when": datetime.date(2026, 11, 30)})
    assert f1.edit == {"when": datetime.date(2026, 11, 30)}
    assert f1.step("say").outputs["line"] == "it is Monday"
    f2 = rw.fork(f1.id, at="greet")  # before f1's edit: the edit is replayed, as a date
    assert f2.total_tokens == 0 and f2.step("weekday").status == "cached"
    assert [s.output_hash for s in f2.steps] == [s.output_hash for s in f1.steps]


def test_next_node_of_an_interrupted_run(store_url):
    rw = Rewind(store_url)
    run = rw.run(shapes.loop(), {"goal": "go"})
    assert rw.next_node(run.id) is None  # completed: nothing left to reach
    with rw.store.transaction():  # stopped after the second visit of `improve`
        rw.store.execute("DELETE FROM nodes WHERE run_id = ? AND idx >= 3", (run.id,))
        rw.store.update_run(run.id, status="interrupted")
    nxt = rw.next_node(run.id)
    assert (nxt["node"], nxt["occurrence"]) == ("improve", 3)
    assert nxt["state"]["draft"] == "go++" and nxt["state"]["rounds"] == 2
    fork = rw.fork(run.id, at="improve", occurrence=3)
    assert fork.step("done").outputs["result"] == "go+++"


def test_a_step_built_without_init_is_the_step_init_makes():
    """`Step.built` (the recorder's, one per visit) must set exactly the dataclass's fields,
    with its defaults for the three it does not name, and convert the status as __init__ does."""
    import dataclasses

    from rewind.models import Step, StepStatus

    named = {f.name for f in dataclasses.fields(Step)} - {"inherited_cost", "_inputs", "_outputs"}
    fields = {name: f"v-{name}" for name in named}
    fields.update(status="cached", node="n", _loader=None)
    built, made = Step.built(**fields), Step(**fields)
    assert built == made and vars(built) == vars(made)
    assert set(vars(built)) == {f.name for f in dataclasses.fields(Step)}
    assert built.status is StepStatus.CACHED


def test_every_recorded_step_has_every_field(tmp_path):
    import dataclasses

    from rewind import Rewind
    from rewind.models import Step
    from tests import shapes

    names = {f.name for f in dataclasses.fields(Step)}
    with Rewind(str(tmp_path / "r.db")) as rw:
        run = rw.run(shapes.linear(), {"topic": "wasps"})
        fork = rw.fork(run.id, at="draft")
        for step in [*run.steps, *fork.steps]:
            assert set(vars(step)) == names, step.node
