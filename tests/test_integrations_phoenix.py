"""The OpenTelemetry export into a real Arize Phoenix, started here on loopback: the spans are
queried back through Phoenix's REST API (span tree, GenAI token usage, the fork's parent).

Phoenix is heavy and pins packages of its own, so it lives in its own virtualenv: `REWIND_PHOENIX`
names its `phoenix` executable, else `phoenix` on PATH, else this test creates
`$REWIND_PHOENIX_VENV` (default ~/.cache/rewind/phoenix-venv) with `pip install arize-phoenix`
(about 1.5 minutes, once). Phoenix keeps no span links, so the links themselves are checked by
tests/test_integrations_otel.py's receiver; here their mirror attributes are.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from test_integrations_otel import essay_pipeline

from rewind import Rewind
from rewind.integrations import export_otel
from rewind.integrations.otel import run_span_id, step_span_id, trace_id

PHOENIX_VERSION = "20.26.1"
PROJECT = "rewind-phoenix-test"


def _phoenix_executable() -> str:
    exe = os.environ.get("REWIND_PHOENIX") or shutil.which("phoenix")
    if exe:
        return exe
    venv = os.environ.get("REWIND_PHOENIX_VENV") or os.path.expanduser("~/.cache/rewind/phoenix-venv")
    exe = os.path.join(venv, "bin", "phoenix")
    if not os.path.exists(exe):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q",
                        f"arize-phoenix=={PHOENIX_VERSION}"], check=True, timeout=1200)
    return exe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read() or b"null")


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    exe = _phoenix_executable()
    port, grpc = _free_port(), _free_port()
    work = tmp_path_factory.mktemp("phoenix")
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc),
           "PHOENIX_TELEMETRY_ENABLED": "false"}
    log = open(work / "phoenix.log", "wb")
    proc = subprocess.Popen([exe, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                pytest.fail(f"Phoenix exited ({proc.returncode}): {(work / 'phoenix.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(url + "/healthz", timeout=2).read()
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail("Phoenix did not answer /healthz within 240 s")
                time.sleep(0.5)  # polling a server that is starting, not waiting on a guess
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _spans(url: str, want: int) -> list:
    """Phoenix ingests asynchronously: poll its REST API until `want` spans are there."""
    deadline = time.monotonic() + 60
    while True:
        try:
            data = _get(f"{url}/v1/projects/{PROJECT}/spans/otlpv1?limit=1000")["data"]
        except urllib.error.HTTPError as e:
            if e.code != 404:  # 404: the project appears with its first span
                raise
            data = []
        if len(data) >= want or time.monotonic() > deadline:
            return data
        time.sleep(0.25)


def _attrs(span: dict) -> dict:
    out = {}
    for a in span.get("attributes") or []:
        v = a["value"]
        out[a["key"]] = next((x for x in (v.get("int_value"), v.get("string_value"),
                                          v.get("double_value"), v.get("bool_value"))
                              if x is not None), None)
    return out


def test_run_and_fork_in_phoenix(phoenix, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={PROJECT}")
    with Rewind(str(tmp_path / "rewind.db")) as rw:
        run = rw.run(essay_pipeline(), {"topic": "bees and wasps"})
        fork = rw.fork(run.id, at="write", edit={"outline": "a much shorter outline"})
        sent = export_otel(rw, run.id) + export_otel(rw, fork.id)
    spans = _spans(phoenix, sent)
    assert len(spans) == sent == 12
    by_id = {s["span_id"]: s for s in spans}
    hexid = lambda n: format(n, "016x")  # noqa: E731

    root = by_id[hexid(run_span_id(run.id))]
    assert root["name"] == "invoke_workflow essay-otel" and not root["parent_span_id"]
    assert root["trace_id"] == format(trace_id(run.id), "032x")
    steps = [s for s in spans if s["parent_span_id"] == root["span_id"]]
    assert sorted(s["name"] for s in steps) == ["outline", "send", "tag", "write"]
    calls = [s for s in spans if s["name"] == "chat sim-small"
             and s["trace_id"] == root["trace_id"]]
    assert {c["parent_span_id"] for c in calls} == {hexid(step_span_id(run.id, 0)),
                                                    hexid(step_span_id(run.id, 1))}
    tokens = sum(_attrs(c)["gen_ai.usage.input_tokens"] + _attrs(c)["gen_ai.usage.output_tokens"]
                 for c in calls)
    assert tokens == run.total_tokens > 0

    froot = by_id[hexid(run_span_id(fork.id))]
    fa = _attrs(froot)
    assert fa["rewind.parent_run_id"] == run.id
    assert fa["rewind.parent_span_id"] == root["span_id"]
    fsteps = {s["name"]: s for s in spans if s["parent_span_id"] == froot["span_id"]}
    assert sorted(fsteps) == ["send", "tag", "write"]
    assert _attrs(fsteps["write"])["rewind.parent_step_span_id"] == hexid(step_span_id(run.id, 1))
    assert _attrs(fsteps["tag"])["rewind.status"] == "cached"
    if froot.get("links"):  # should Phoenix keep links one day, they must be the right ones
        assert froot["links"][0]["span_id"] == root["span_id"]
