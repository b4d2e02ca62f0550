"""Two concurrent resumes of one run: exactly one executes (its side effect happens once), the
other gets a clear RewindError naming the run (issue 12, point 4), on both backends."""

from __future__ import annotations

import threading

from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, RewindError

EFFECTS: list = []
BROKEN = {"on": True}


@rewind.action(reads=["topic"], writes=["draft"])
def write(state):
    return state.update(draft=f"draft of {state['topic']}")


@rewind.action(reads=["draft"], writes=["receipt"], determinism="side-effect")
def send(state):
    if BROKEN["on"]:
        raise ConnectionError("mail server down")
    EFFECTS.append(state["draft"])
    return state.update(receipt=f"sent #{len(EFFECTS)}")


PIPELINE = Pipeline("lease", GraphBuilder().with_actions(write=write, send=send)
                    .with_transitions(("write", "send")).build(), "write")


def test_two_concurrent_resumes_execute_the_side_effect_once(store_url):
    EFFECTS.clear()
    BROKEN["on"] = True
    with Rewind(store_url, pipelines=[PIPELINE]) as rw:
        failed = rw.run(PIPELINE, {"topic": "lease"})
    assert failed.status == "failed" and "mail server down" in failed.error
    BROKEN["on"] = False
    start, results = threading.Barrier(2), []

    def resume():
        with Rewind(store_url, pipelines=[PIPELINE]) as rw:
            start.wait()
            try:
                results.append(rw.resume(failed.id).status)
            except RewindError as e:
                results.append(e)

    threads = [threading.Thread(target=resume) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [r for r in results if r == "completed"]
    refused = [r for r in results if isinstance(r, RewindError)]
    assert len(done) == 1 and len(refused) == 1, results
    assert failed.id in str(refused[0]) and refused[0].run_id == failed.id
    assert EFFECTS == ["draft of lease"]
    with Rewind(store_url, pipelines=[PIPELINE]) as rw:
        run = rw.get_run(failed.id)
        assert run.status == "completed" and [s.node for s in run.steps] == ["write", "send"]
