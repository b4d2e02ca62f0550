"""A snapshot replays a recorded model call wire for wire (issue 37): the snapshot keeps each
call's raw reply, and a re-executed node is served it by the cassette with its tool call, ids
and usage, with no request to the model. The local tool-call server of test_served_calls_exact
is the network edge; the real openai SDK is the client."""

from __future__ import annotations

import pytest

from rewind import Rewind
from rewind.testing import replay, snapshot_run

from tests.test_served_calls_exact import PIPELINES, SERVER, ToolServer


def pipelines():
    """The pipelines of test_served_calls_exact, for the snapshot's pipeline spec."""
    return list(PIPELINES.values())


@pytest.fixture
def server():
    s = ToolServer()
    SERVER["url"] = s.base_url
    yield s
    s.close()


@pytest.mark.parametrize("kind", ["pick", "pick_stream", "pick_responses", "pick_responses_stream"])
def test_a_snapshot_serves_the_recorded_tool_call(tmp_path, server, kind):
    with Rewind(str(tmp_path / "snap.db"), pipelines=pipelines()) as rw:
        run = rw.run(PIPELINES[kind], {"question": "What is the weather in Paris?", "note": "a"})
        assert run.status == "completed", run.error
        recorded = run.step("pick").outputs
        doc = snapshot_run(rw, run.id, repeats=0, pipeline_spec="tests.test_served_calls_snapshot:pipelines")
    assert [bool(c.get("raw")) for c in doc["steps"][0]["calls"]] == [True]
    assert len(server.requests) == 1
    # the node reads `note` but does not send it: re-executed, its request is the recorded one
    doc["initial_state"]["note"] = "b"
    result = replay(doc)
    assert result.node("pick").action == "executed"
    assert not result.node("pick").missing and not result.node("pick").new_calls
    assert len(server.requests) == 1, "the snapshot's call went to the server"
    out = result.outputs("pick")
    for field in ("tool", "args", "reply", "request_id"):
        assert out[field] == recorded[field], field
    assert out["seen"] == "b"
