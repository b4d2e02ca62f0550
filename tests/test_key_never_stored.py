"""An API key never reaches the store, even when the endpoint echoes it back: some gateways
answer a bad key with "Invalid API key: Bearer sk-..." and that text became a model call's
stored error (and the dashboard showed it). Run against a real local HTTP endpoint through the
real `openai` client, both through `rewind.llm.chat` and through the user's own client."""

from __future__ import annotations

import glob
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import openai
import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, action


class _EchoesTheKey(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": {"message": f"Invalid API key: {self.headers.get('Authorization')}",
                                     "type": "invalid_request_error", "code": "invalid_api_key"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def failed_run_text(db: str, ask) -> str:
    """Run the one-node pipeline `ask` (its model call fails) and return, as JSON text,
    everything the store keeps and the dashboard shows of the failure."""
    pipeline = Pipeline("ask", GraphBuilder().with_actions(ask=ask).build(), "ask")
    with Rewind(db) as rw:
        run = rw.run(pipeline, {"topic": "bees"})
        assert run.status == "failed"
        step = rw.get_run(run.id).steps[0]
        return json.dumps([run.error, step.error, step.reason, step.calls], default=str)


def assert_not_in_files(db: str, *secrets: str) -> None:
    """No byte of any secret in the database file or its -wal / -shm."""
    for path in glob.glob(db + "*"):
        with open(path, "rb") as f:
            data = f.read()
        for secret in secrets:
            assert secret.encode() not in data, (path, secret)


@pytest.fixture
def endpoint():
    server = HTTPServer(("127.0.0.1", 0), _EchoesTheKey)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


@pytest.mark.parametrize("how", ["rewind.llm.chat", "the user's own client"])
def test_a_key_the_endpoint_echoes_is_not_stored(tmp_path, monkeypatch, endpoint, how):
    secret = "gw-SECRET-9f8e7d6c5b4a"  # not key-shaped: found as the key itself, or as a Bearer token
    if how == "rewind.llm.chat":
        monkeypatch.setenv("OPENAI_API_KEY", secret)
        monkeypatch.setenv("OPENAI_BASE_URL", endpoint)
    else:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    @action(reads=["topic"], writes=["out"])
    def ask(state):
        messages = [{"role": "user", "content": state["topic"]}]
        if how == "rewind.llm.chat":
            text = rewind.llm.chat(messages, model="gpt-4o-mini")
        else:
            client = openai.OpenAI(api_key=secret, base_url=endpoint, max_retries=0)
            text = client.chat.completions.create(model="gpt-4o-mini", messages=messages).choices[0].message.content
        return state.update(out=text)

    db = str(tmp_path / "k.db")
    shown = failed_run_text(db, ask)
    assert "Invalid API key" in shown  # the message is kept, the key is not
    assert secret not in shown
    assert_not_in_files(db, secret)


@pytest.mark.parametrize("reachable", [True, False])
def test_credentials_in_the_base_url_are_not_stored(tmp_path, monkeypatch, endpoint, reachable):
    """A gateway may take its key in the URL (`?api_key=`, a user:password part); a failed call's
    error named the base URL with the query left in, so the key was stored and shown to every
    visitor who could list the run."""
    base = endpoint if reachable else "http://127.0.0.1:9/v1"  # port 9: nothing listens
    url = base.replace("http://", "http://alice:PW-SECRET-77@") + "?api_key=Q-SECRET-88&api-version=2024"
    monkeypatch.setenv("OPENAI_API_KEY", "not-a-secret-here")
    monkeypatch.setenv("OPENAI_BASE_URL", url)

    @action(reads=["topic"], writes=["out"])
    def ask(state):
        return state.update(out=rewind.llm.chat([{"role": "user", "content": state["topic"]}],
                                                model="gpt-4o-mini"))

    db = str(tmp_path / "u.db")
    shown = failed_run_text(db, ask) + json.dumps(rewind.llm.provider_info())
    assert "api-version=2024" in shown  # the URL is still named, its secrets are not
    assert "Q-SECRET-88" not in shown and "PW-SECRET-77" not in shown, shown
    assert_not_in_files(db, "Q-SECRET-88", "PW-SECRET-77")
