"""Rewind runs and forks in Burr's tracker layout, read back by Burr's own code: the local
backend its UI serves from lists both apps, their steps, the fork's parent and the parent's
child; Burr's tracking client loads the state to resume from; a live writer ends as the export."""

from __future__ import annotations

import asyncio
import os

import pytest
import shapes
from burr.core import ApplicationBuilder
from burr.tracking.client import LocalTrackingClient
from burr.tracking.server.backend import LocalBackend

from rewind import InvalidRequest, Rewind
from rewind.integrations import BurrTracking, export_burr


@pytest.fixture
def rw(store_url):
    with Rewind(store_url) as handle:
        yield handle


def _attrs(step) -> dict:
    return {a.key: a.value for a in step.attributes}


def test_run_and_fork_read_back_by_burrs_backend(rw, tmp_path):
    pipeline = shapes.linear()
    run = rw.run(pipeline, {"topic": "bees and wasps"})
    fork = rw.fork(run.id, at="draft", edit={"plan": "a shorter plan"})
    written = export_burr(rw, fork.id, str(tmp_path), project="rewind-demo")
    assert [os.path.basename(p) for p in written] == [run.id, fork.id]  # parent first

    backend = LocalBackend(path=str(tmp_path))
    projects = asyncio.run(backend.list_projects(None))
    assert [(p.id, p.num_apps) for p in projects] == [("rewind-demo", 2)]
    apps, total = asyncio.run(backend.list_apps(None, "rewind-demo", None, 100, 0))
    by_id = {a.app_id: a for a in apps}
    assert total == 2 and set(by_id) == {run.id, fork.id}
    assert by_id[run.id].parent_pointer is None and by_id[run.id].num_steps == 5
    pointer = by_id[fork.id].parent_pointer
    assert (pointer.app_id, pointer.sequence_id) == (run.id, 0)  # forked after the parent's plan

    parent_logs = asyncio.run(backend.get_application_logs(None, "rewind-demo", run.id, None))
    assert [s.step_start_log.action for s in parent_logs.steps] == [
        "plan", "draft", "polish", "stats", "publish"]
    assert [(c.child.app_id, c.event_type, c.sequence_id) for c in parent_logs.children] == [
        (fork.id, "fork", 0)]
    assert parent_logs.application.entrypoint == "plan"
    assert {a.name: (a.reads, a.writes) for a in parent_logs.application.actions}["draft"] == (
        ["plan"], ["draft"])
    assert "def draft" in {a.name: a.code for a in parent_logs.application.actions}["draft"]

    logs = asyncio.run(backend.get_application_logs(None, "rewind-demo", fork.id, None))
    assert logs.parent_pointer.app_id == run.id
    # a fork's log holds the steps it ran, as Burr's own forks do, numbered by position
    assert [(s.step_start_log.action, s.step_start_log.sequence_id) for s in logs.steps] == [
        ("draft", 1), ("polish", 2), ("stats", 3), ("publish", 4)]
    draft, polish, stats, publish = logs.steps
    a = _attrs(draft)
    assert a["rewind.status"] == "executed" and a["rewind.cache_hit"] is False
    assert a["rewind.input_hash"] == fork.step("draft").input_hash
    assert a["rewind.output_hash"] == fork.step("draft").output_hash
    assert a["rewind.tokens"] == 70 and a["rewind.prompt_tokens"] == 30
    assert "plan" in a["rewind.reason"]  # re-run reason: the edited field
    assert a["rewind.fork"]["parent"] == run.id and a["rewind.fork"]["edit"] == {"plan": "a shorter plan"}
    s = _attrs(stats)
    assert s["rewind.status"] == "cached" and s["rewind.cache_hit"] is True
    assert s["rewind.source_run"] == run.id and s["rewind.tokens"] == 0
    assert _attrs(publish)["rewind.status"] == "dry-run"
    assert draft.step_end_log.state["plan"] == "a shorter plan"
    assert draft.step_end_log.result == {"draft": "Draft from: a shorter plan"}

    # Burr's own client loads the state a Burr app would resume the fork from
    loaded = LocalTrackingClient("rewind-demo", storage_dir=str(tmp_path)).load(None, fork.id, 2)
    assert loaded["position"] == "polish"
    assert loaded["state"]["report"] == fork.step("polish").outputs["report"]


def test_burr_can_resume_a_rewind_run_from_the_export(rw, tmp_path):
    pipeline = shapes.linear()
    run = rw.run(pipeline, {"topic": "bees"})
    export_burr(rw, run.id, str(tmp_path), project="p")
    client = LocalTrackingClient("p", storage_dir=str(tmp_path))
    app = (ApplicationBuilder().with_graph(pipeline.graph)
           .initialize_from(client, resume_at_next_action=True, default_state={},
                            default_entrypoint="plan", fork_from_app_id=run.id,
                            fork_from_sequence_id=1)
           .build())
    assert app.parent_pointer.app_id == run.id
    assert app.get_next_action().name == "polish"
    assert app.state["draft"] == run.step("draft").outputs["draft"]


def test_live_writer_ends_as_the_export(rw, tmp_path):
    live = BurrTracking(str(tmp_path / "live"), "rewind")
    pipeline = shapes.linear()
    seen = []

    def on_step(step):
        live.on_step(rw, step)
        seen.append(step.node)

    run = rw.run(pipeline, {"topic": "bees"}, on_step=on_step)
    log = tmp_path / "live" / "rewind" / run.id / "log.jsonl"
    assert log.exists() and len(seen) == 5
    during = log.read_text()
    live.on_run_finished(rw, run)
    fork = rw.fork(run.id, at="polish", on_step=lambda s: live.on_step(rw, s))
    live.on_run_finished(rw, fork)
    export_burr(rw, fork.id, str(tmp_path / "export"), "rewind")
    for rid in (run.id, fork.id):
        for name in ("log.jsonl", "metadata.json", "graph.json"):
            a = (tmp_path / "live" / "rewind" / rid / name).read_text()
            b = (tmp_path / "export" / "rewind" / rid / name).read_text()
            assert a == b, (rid, name)
    assert during == log.read_text()  # appended step by step, the same lines as the rewrite
    children = (tmp_path / "live" / "rewind" / run.id / "children.jsonl").read_text().splitlines()
    assert len(children) == 1 and fork.id in children[0]


def test_bad_project_name_is_refused(rw, tmp_path):
    run = rw.run(shapes.linear(), {"topic": "bees"})
    with pytest.raises(InvalidRequest, match="project"):
        export_burr(rw, run.id, str(tmp_path), project="no spaces/here")
