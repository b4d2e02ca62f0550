"""A lost PostgreSQL connection (the backend terminated, as in a server restart): a read gets a
`StoreError` naming the database and the next call reconnects; a run whose connection is killed
from inside a node commits on a fresh connection and completes (issue 12, point 6)."""

from __future__ import annotations

import psycopg2
import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, StoreError

KILL = {"pid": None, "url": None}


def _terminate(url: str, pid: int) -> None:
    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
    conn.close()


def _backend_pid(rw: Rewind) -> int:
    return int(rw.store.query("SELECT pg_backend_pid()")[0][0])


@rewind.action(reads=["topic"], writes=["draft"])
def draft(state):
    if KILL["pid"] is not None:  # the server drops the run's connection mid-step
        _terminate(KILL["url"], KILL["pid"])
        KILL["pid"] = None
    return state.update(draft=f"draft of {state['topic']}")


@rewind.action(reads=["draft"], writes=["report"])
def report(state):
    return state.update(report=state["draft"].upper())


PIPELINE = Pipeline("outage", GraphBuilder().with_actions(draft=draft, report=report)
                    .with_transitions(("draft", "report")).build(), "draft")


def test_a_read_after_the_connection_died_reconnects(pg_url):
    rw = Rewind(pg_url)
    assert rw.count_runs() == 0
    _terminate(pg_url, _backend_pid(rw))
    assert rw.list_runs() == []  # on a fresh connection
    rw.close()


def test_a_server_that_stays_down_is_a_store_error_naming_the_database(pg_url, monkeypatch):
    rw = Rewind(pg_url)
    _terminate(pg_url, _backend_pid(rw))

    def refused():
        raise psycopg2.OperationalError("connection to server at 127.0.0.1 refused")

    monkeypatch.setattr(rw.store, "_connect", refused)
    with pytest.raises(StoreError) as e:
        rw.list_runs()
    assert pg_url.split("@")[-1].split("/")[0] in str(e.value) and "retry" in str(e.value)
    monkeypatch.undo()
    assert rw.list_runs() == []
    rw.close()


def test_a_run_whose_connection_is_killed_mid_step_completes(pg_url):
    rw = Rewind(pg_url, pipelines=[PIPELINE])
    KILL.update(pid=_backend_pid(rw), url=pg_url)
    run = rw.run(PIPELINE, {"topic": "outage"})
    assert run.status == "completed", run.error
    again = Rewind(pg_url, pipelines=[PIPELINE]).get_run(run.id)
    assert [s.node for s in again.steps] == ["draft", "report"]
    assert again.step("report").outputs == {"report": "DRAFT OF OUTAGE"}
    rw.close()
