"""The demo through the real HTTP path: `python -m rewind serve-llm` in one process, the demo in
another, talking through `OPENAI_BASE_URL` and the real openai client."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

from rewind import Rewind
from tests.test_cli import RUN_ID, Cli, cli_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_serving(base: str, server: subprocess.Popen, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stderr.read()
        try:
            with urllib.request.urlopen(f"{base}/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)  # polling a starting server, bounded by the deadline
    raise AssertionError("serve-llm did not answer within 30 s")


def test_demo_through_serve_llm_matches_the_offline_run(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "rewind", "serve-llm", "--port", str(port)],
        env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_until_serving(base, server)
        cli = Cli(tmp_path)
        over_http = cli("demo", env=cli_env(tmp_path, OPENAI_BASE_URL=f"{base}/v1"))
        assert over_http.returncode == 0, over_http.stderr
        with urllib.request.urlopen(f"{base}/_simulator/stats", timeout=5) as r:
            stats = json.load(r)
        assert stats["chat_requests"] >= 4  # plan, critique, revise, compose went over HTTP
    finally:
        server.terminate()
        server.wait(timeout=10)

    offline = cli("demo", db=tmp_path / "offline.db")
    assert offline.returncode == 0, offline.stderr
    with Rewind(str(cli.db)) as rw_http, Rewind(str(tmp_path / "offline.db")) as rw_offline:
        http_run = rw_http.get_run(RUN_ID.search(over_http.stdout).group(1))
        offline_run = rw_offline.get_run(RUN_ID.search(offline.stdout).group(1))
    assert http_run.status == "completed" and len(http_run.steps) == 8
    assert http_run.total_tokens > 0
    # temperature 0 is a pure function of the request: same text over HTTP as in-process
    assert [s.output_hash for s in http_run.steps[:-1]] == [s.output_hash for s in offline_run.steps[:-1]]
