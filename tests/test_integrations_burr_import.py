"""Importing runs recorded by plain Burr's tracker: a no-edit fork of one calls no node and keeps
every hash; an edit re-executes exactly what it reaches; what the tracker lost is reported."""

from __future__ import annotations

import pytest
from burr.core import ApplicationBuilder
from burr.core.action import action as burr_action
from burr.core.graph import GraphBuilder

from rewind import ForkError, InvalidRequest, Pipeline, Rewind
from rewind.integrations import import_burr

CALLS: list = []


@burr_action(reads=["topic"], writes=["outline"])
def outline(state):
    CALLS.append("outline")
    return state.update(outline=f"outline of {state['topic']}")


@burr_action(reads=["outline"], writes=["essay"])
def write(state, tone: str):
    CALLS.append("write")
    return state.update(essay=f"{tone} essay from {state['outline']}")


@burr_action(reads=["topic"], writes=["tags"])
def tag(state):
    CALLS.append("tag")
    return state.update(tags=sorted(set(state["topic"].split())))


@burr_action(reads=["essay", "tags"], writes=["receipt"])
def send(state):
    CALLS.append("send")
    return state.update(receipt={"chars": len(state["essay"]), "tags": state["tags"]})


@burr_action(reads=["count"], writes=["count"])
def bump(state):
    CALLS.append("bump")
    return state.update(count=state["count"] + 1)


def graph():
    return (GraphBuilder().with_actions(outline=outline, write=write, tag=tag, send=send)
            .with_transitions(("outline", "write"), ("write", "tag"), ("tag", "send")).build())


def record_with_burr(storage: str, project: str, topic: str, tone: str = "plain") -> str:
    """Run the graph with plain Burr and its local tracker; returns the app id."""
    app = (ApplicationBuilder().with_graph(graph()).with_entrypoint("outline")
           .with_state(topic=topic).with_tracker("local", project=project,
                                                 params={"storage_dir": storage})
           .build())
    while app.get_next_action() is not None:
        app.step(inputs={"tone": tone} if app.get_next_action().name == "write" else None)
    return app.uid


@pytest.fixture
def rw(store_url):
    with Rewind(store_url) as handle:
        yield handle


def test_import_then_fork_without_edit_calls_nothing(rw, tmp_path):
    storage = str(tmp_path / "burr")
    app_id = record_with_burr(storage, "essays", "bees and wasps")
    pipeline = Pipeline("essays", graph(), "outline")
    report = import_burr(rw, f"{storage}/essays", pipeline)
    run = rw.get_run(report.runs[app_id])
    assert run.status == "completed"
    assert [s.node for s in run.steps] == ["outline", "write", "tag", "send"]
    assert all(s.status == "executed" and s.input_hash and s.output_hash for s in run.steps)
    assert run.step("send").outputs == {"receipt": {"chars": len(run.step("write").outputs["essay"]),
                                                    "tags": ["and", "bees", "wasps"]}}
    assert run.step("write").runtime_inputs == {"tone": "plain"}
    # reported, not invented: no state before the first step, no tokens, no params
    text = " ".join(report.not_kept)
    assert "state before its first step" in text and "outline" in text
    assert "token usage" in text and "params" in text

    CALLS.clear()
    for at in ("outline", "write", "tag", "send"):
        fork = rw.fork(run.id, at=at)
        assert CALLS == [], (at, CALLS)
        assert fork.total_tokens == 0
        assert [s.output_hash for s in fork.steps] == [s.output_hash for s in run.steps]
        d = rw.diff(run.id, fork.id)
        assert d.first_divergence is None


def test_import_then_fork_with_an_edit(rw, tmp_path):
    storage = str(tmp_path / "burr")
    app_id = record_with_burr(storage, "essays", "bees")
    report = import_burr(rw, f"{storage}/essays", Pipeline("essays", graph(), "outline"))
    run_id = report.runs[app_id]
    CALLS.clear()
    fork = rw.fork(run_id, at="write", edit={"outline": "a new outline"})
    assert CALLS == ["write", "send"]  # tag reads only topic: served from the cache
    assert [s.status for s in fork.steps] == ["inherited", "executed", "cached", "executed"]
    assert fork.step("write").outputs == {"essay": "plain essay from a new outline"}
    assert rw.diff(run_id, fork.id).first_divergence == "write"
    # a param (runtime input) change at the node reaches it too
    CALLS.clear()
    fork2 = rw.fork(run_id, at="write", inputs={"tone": "playful"})
    assert CALLS == ["write", "send"]
    assert fork2.step("write").outputs["essay"].startswith("playful essay")


def test_import_twice_is_a_no_op_and_a_changed_node_is_not_cached(rw, tmp_path):
    storage = str(tmp_path / "burr")
    record_with_burr(storage, "essays", "bees")
    pipeline = Pipeline("essays", graph(), "outline")
    first = import_burr(rw, storage, pipeline, project="essays")
    again = import_burr(rw, storage, pipeline, project="essays")
    assert again.runs == first.runs and again.skipped
    assert rw.count_runs() == 1

    @burr_action(reads=["topic"], writes=["outline"])
    def outline2(state):  # same name in the graph, other code
        CALLS.append("outline2")
        return state.update(outline=f"OUTLINE of {state['topic']}")

    changed = (GraphBuilder().with_actions(outline=outline2, write=write, tag=tag, send=send)
               .with_transitions(("outline", "write"), ("write", "tag"), ("tag", "send")).build())
    other = tmp_path / "other"
    app2 = record_with_burr(str(other), "essays", "bees")
    rep = import_burr(rw, str(other / "essays"), Pipeline("essays2", changed, "outline"))
    assert any("differs from the source Burr recorded" in n for n in rep.not_kept)
    CALLS.clear()
    rw.fork(rep.runs[app2], at="outline")
    assert CALLS[0] == "outline2"  # its recorded output was not served as the new code's


def test_a_field_the_first_step_reads_and_rewrites_is_reported(rw, tmp_path):
    g = GraphBuilder().with_actions(bump=bump).with_transitions().build()
    app = (ApplicationBuilder().with_graph(g).with_entrypoint("bump").with_state(count=41)
           .with_tracker("local", project="counter", params={"storage_dir": str(tmp_path)}).build())
    app.step()
    pipeline = Pipeline("counter", g, "bump")
    report = import_burr(rw, str(tmp_path / "counter"), pipeline)
    assert any("reads and rewrites count" in n for n in report.not_kept)
    run = rw.get_run(report.runs[app.uid])
    assert run.step("bump").outputs == {"count": 42} and run.step("bump").input_hash is None
    with pytest.raises(ForkError, match="not found"):
        rw.fork(run.id, at="bump")  # its starting count was never recorded
    # given the starting state, it is keyed and forkable
    tmp2 = tmp_path / "again"
    app2 = (ApplicationBuilder().with_graph(g).with_entrypoint("bump").with_state(count=41)
            .with_tracker("local", project="counter", params={"storage_dir": str(tmp2)}).build())
    app2.step()
    rep2 = import_burr(rw, str(tmp2 / "counter"), pipeline, initial_state={"count": 41})
    CALLS.clear()
    fork = rw.fork(rep2.runs[app2.uid], at="bump")
    assert CALLS == [] and fork.step("bump").outputs == {"count": 42}


def test_an_action_the_pipeline_lacks_is_refused(rw, tmp_path):
    storage = str(tmp_path / "burr")
    record_with_burr(storage, "essays", "bees")
    g = GraphBuilder().with_actions(outline=outline).with_transitions().build()
    with pytest.raises(InvalidRequest, match="write"):
        import_burr(rw, f"{storage}/essays", Pipeline("short", g, "outline"))
    assert rw.count_runs() == 0


def essays_pipeline() -> Pipeline:
    """For `--pipeline test_integrations_burr_import:essays_pipeline` (the CLI test)."""
    return Pipeline("essays", graph(), "outline")


@burr_action(reads=["i"], writes=["seen"])
def seen_with_note(state):  # also sets `note`, which it does not declare: Burr keeps it
    return state.update(seen=state["i"], note=f"note-{state['i']}")


@burr_action(reads=["i"], writes=["z"])
def drop_scratch(state):  # deletes a field it neither reads nor writes
    return state.update(z=state["i"]).wipe(delete=["scratch"])


def test_hits_on_an_imported_run_do_to_the_state_what_burr_did(rw, tmp_path):
    """A stranger's find: a no-edit fork of an imported run served its steps from the cache
    without the field a node set undeclared, and with the field a node deleted by name (the
    import read only declared writes, and deletions of fields the node reads)."""
    g = (GraphBuilder().with_actions(seen=seen_with_note, drop=drop_scratch)
         .with_transitions(("seen", "drop")).build())
    start = {"i": 1, "scratch": "s", "other": "x"}
    app = (ApplicationBuilder().with_graph(g).with_entrypoint("seen").with_state(**start)
           .with_tracker("local", project="strays", params={"storage_dir": str(tmp_path)}).build())
    burr_states = [dict(st.get_all()) for _, _, st in app.iterate(halt_after=["drop"])]
    burr_states = [{k: v for k, v in s.items() if not k.startswith("__")} for s in burr_states]
    pipeline = Pipeline("strays", g, "seen")
    rw.register(pipeline)
    run_id = import_burr(rw, str(tmp_path / "strays"), pipeline, initial_state=start).run_ids[0]
    fork = rw.fork(run_id, at="seen")
    assert [str(s.status) for s in fork.steps] == ["cached", "cached"]
    for run in (rw.get_run(run_id), fork):
        ours = [{k: v for k, v in rw.state_at(s).items() if not k.startswith("__")} for s in run.steps]
        assert ours == burr_states


@burr_action(reads=["x"], writes=["y"])
def doubled(state):
    return state.update(y=state["x"] * 2)


def test_a_tracked_app_that_ran_map_states_imports_with_its_tasks_skipped(rw, tmp_path):
    """Burr's tracker writes each MapStates task as an app of its own beside its parent (with a
    `spawning_parent_pointer`); importing the project refused them all (their action is not
    the pipeline's) and wrote nothing. The parent's step holds the tasks' result."""
    from burr.core.parallelism import MapStates

    class EachX(MapStates):
        def action(self, state, inputs):
            return doubled

        def states(self, state, context, inputs):
            for x in state["xs"]:
                yield state.update(x=x)

        def reduce(self, state, states):
            return state.update(ys=[s["y"] for s in states])

        @property
        def reads(self):
            return ["xs"]

        @property
        def writes(self):
            return ["ys"]

    g = GraphBuilder().with_actions(each=EachX(), total=bump_total).with_transitions(("each", "total")).build()
    app = (ApplicationBuilder().with_graph(g).with_entrypoint("each").with_state(xs=[1, 2, 3])
           .with_tracker("local", project="par", params={"storage_dir": str(tmp_path)})
           .with_identifiers(app_id="parent").build())
    *_, burr_state = app.run(halt_after=["total"])
    pipeline = Pipeline("par", g, "each")
    rw.register(pipeline)
    report = import_burr(rw, str(tmp_path / "par"), pipeline, initial_state={"xs": [1, 2, 3]})
    assert list(report.runs) == ["parent"]
    assert sum("sub-application" in line for line in report.skipped) == 3
    fork = rw.fork(report.runs["parent"], at="each")
    assert [str(s.status) for s in fork.steps] == ["cached", "cached"]
    assert rw.state_at(fork.steps[-1])["total"] == burr_state["total"] == 12


@burr_action(reads=["ys"], writes=["total"])
def bump_total(state):
    return state.update(total=sum(state["ys"]))


@burr_action(reads=["n"], writes=["n"])
def slow_step(state):  # a step that takes a while: the import commits after each such step
    import time

    time.sleep(0.03)
    return state.update(n=state["n"] + 1)


def slow_graph():
    return (GraphBuilder().with_actions(a=slow_step, b=slow_step, c=slow_step, d=slow_step)
            .with_transitions(("a", "b"), ("b", "c"), ("c", "d")).build())


def test_an_import_killed_halfway_is_imported_whole_the_next_time(store_url, tmp_path):
    """A stranger killed `import-burr` after its second step commit: the next import said
    "already imported" of a run holding part of Burr's steps, for good. A cut-short import
    (its run `interrupted`, no fork of it) is now removed and imported again."""
    import os
    import subprocess
    import sys
    import textwrap

    app = (ApplicationBuilder().with_graph(slow_graph()).with_entrypoint("a").with_state(n=0)
           .with_tracker("local", project="killed", params={"storage_dir": str(tmp_path / "burr")})
           .build())
    app.run(halt_after=["d"])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    child = textwrap.dedent(f"""
        import os, signal
        from rewind import Pipeline, Rewind
        from rewind.integrations import import_burr
        from tests.test_integrations_burr_import import slow_graph
        rw = Rewind({store_url!r})
        pipeline = rw.register(Pipeline("killed", slow_graph(), "a"))
        real, n = rw.store.insert_nodes, [0]
        def insert_then_die(*a, **k):
            real(*a, **k)
            n[0] += 1
            if n[0] == 2:
                os.kill(os.getpid(), signal.SIGKILL)
        rw.store.insert_nodes = insert_then_die
        import_burr(rw, {str(tmp_path / "burr" / "killed")!r}, pipeline, initial_state={{"n": 0}})
    """)
    done = subprocess.run([sys.executable, "-c", child], cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=root), timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    with Rewind(store_url) as rw:
        pipeline = rw.register(Pipeline("killed", slow_graph(), "a"))
        cut = rw.list_runs()
        assert len(cut) == 1 and cut[0].status == "interrupted" and 0 < cut[0].step_count < 4
        report = import_burr(rw, str(tmp_path / "burr" / "killed"), pipeline, initial_state={"n": 0})
        run = rw.get_run(report.runs[app.uid])
        assert run.status == "completed", (run.status, [s.node for s in run.steps], report)
        assert [s.node for s in run.steps] == ["a", "b", "c", "d"]
        assert rw.state_at(run.steps[-1])["n"] == 4
        assert import_burr(rw, str(tmp_path / "burr" / "killed"), pipeline).skipped  # whole now


def _mangle_log(app_dir, line_no: int, change) -> None:
    import json
    import os

    path = os.path.join(app_dir, "log.jsonl")
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(raw) for raw in f]
    lines[line_no] = change(lines[line_no])
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize("what, mangle, words", [
    ("begin without sequence_id", ("log", "begin_entry", lambda l: {k: v for k, v in l.items() if k != "sequence_id"}),
     r"line \d+ has no 'sequence_id'"),
    ("start_time not a time", ("log", "begin_entry", lambda l: {**l, "start_time": "yesterday"}),
     r"line \d+ is not what Burr's tracker writes \(Invalid isoformat string"),
    ("end state a list", ("log", "end_entry", lambda l: {**l, "state": [1, 2]}),
     r"line \d+ is not what Burr's tracker writes \(state is a list"),
    ("a line that is a list", ("log", "begin_entry", lambda l: [l]), r"line \d+ is not what Burr's tracker writes"),
    ("graph.json not JSON", ("file", "graph.json", "{oops"), r"graph.json is not JSON"),
    ("metadata.json a list", ("file", "metadata.json", "[1]"), r"metadata.json holds list, not the JSON object"),
], ids=lambda v: v if isinstance(v, str) and " " in v else "")
def test_a_malformed_tracker_file_is_one_error_naming_it_and_imports_nothing(rw, tmp_path, what, mangle, words):
    """A stranger's find: each of these was an 'internal error' (KeyError, ValueError,
    AttributeError, JSONDecodeError, TypeError) where a log line that is not JSON was named."""
    import json
    import os

    storage = str(tmp_path / "burr")
    app_id = record_with_burr(storage, "essays", "bees")
    app_dir = os.path.join(storage, "essays", app_id)
    if mangle[0] == "file":
        with open(os.path.join(app_dir, mangle[1]), "w", encoding="utf-8") as f:
            f.write(mangle[2])
    else:
        with open(os.path.join(app_dir, "log.jsonl"), encoding="utf-8") as f:
            kinds = [json.loads(raw).get("type") for raw in f]
        _mangle_log(app_dir, kinds.index(mangle[1]), mangle[2])
    with pytest.raises(InvalidRequest, match=words):
        import_burr(rw, f"{storage}/essays", Pipeline("essays", graph(), "outline"))
    assert rw.count_runs() == 0
