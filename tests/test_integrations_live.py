"""The live sinks as the Rewind handle drives them (`wrap` per step, `finished` per run): from
the environment, to Burr's layout and an OTLP receiver at once; a failing sink never fails a run."""

from __future__ import annotations

import asyncio

import pytest
import shapes
from burr.tracking.server.backend import LocalBackend
from test_integrations_otel import Receiver

from rewind import Rewind
from rewind.integrations import LiveSinks


@pytest.fixture
def rw(store_url):
    with Rewind(store_url) as handle:
        yield handle


def test_sinks_from_the_environment(rw, tmp_path, monkeypatch):
    receiver = Receiver()
    try:
        monkeypatch.setenv("REWIND_BURR_TRACKING", str(tmp_path))
        monkeypatch.setenv("REWIND_BURR_PROJECT", "live")
        monkeypatch.setenv("REWIND_OTEL", "1")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        sinks = LiveSinks.from_options()
        assert [type(s).__name__ for s in sinks.sinks] == ["BurrTracking", "OtelExporter"]
        mine = []
        pipeline = shapes.linear()
        run = sinks.finished(rw, rw.run(pipeline, {"topic": "bees"}, on_step=sinks.wrap(rw, mine.append)))
        sinks.finished(rw, rw.fork(run.id, at="polish", on_step=sinks.wrap(rw, None)))
        sinks.close()
        assert [s.node for s in mine] == ["plan", "draft", "polish", "stats", "publish"]
        apps, total = asyncio.run(LocalBackend(str(tmp_path)).list_apps(None, "live", None, 100, 0))
        assert total == 2
        names = [s.name for s in receiver.spans]
        assert names.count("invoke_workflow linear") == 2 and names.count("plan") == 1
        assert len(receiver.spans) == (1 + 5) + (1 + 3)
    finally:
        receiver.close()


def test_no_options_no_sinks(monkeypatch):
    for var in ("REWIND_BURR_TRACKING", "REWIND_OTEL"):
        monkeypatch.delenv(var, raising=False)
    sinks = LiveSinks.from_options()
    assert not sinks and sinks.wrap(None, print) is print


def test_a_failing_sink_never_fails_the_run(rw, caplog):
    class Broken:
        def on_step(self, rw, step):
            raise OSError("disk full")

        def on_run_finished(self, rw, run):
            raise OSError("disk full")

    sinks = LiveSinks([Broken()])
    run = sinks.finished(rw, rw.run(shapes.linear(), {"topic": "bees"}, on_step=sinks.wrap(rw)))
    assert run.status == "completed"
    assert "disk full" in caplog.text
