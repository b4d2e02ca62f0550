"""The Settings page cannot leak the server's API key or change another visitor's model settings
(AppTest, two sessions in one process, as two browser tabs on one server are):

- a provider / base URL / model applied in one session leaves the other session, the process
  environment and rewind's process-wide settings as they were;
- with OPENAI_API_KEY set on the server and OPENAI_BASE_URL at `serve-llm`, a run from a session
  whose base URL is a capture server sends that server no server key (the user's own key if
  they gave one, which is never drawn again), and a run from the other session never reaches it;
- the default temperature is per session too;
- the Fork page offers "Allow side effects" only where REWIND_ALLOW_SIDE_EFFECTS is set.

Needs the core's `rewind.llm.session_settings` (the Apply button is disabled without it).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from burr.core.graph import GraphBuilder
from streamlit.testing.v1 import AppTest

import rewind
from rewind import Pipeline, action
from rewind.model import server as llm_server
from test_auth_browser import Capture
from test_auth_gate import dump

APP = str(Path(__file__).resolve().parents[1] / "app.py")
SERVER_KEY = "sk-server-DUMMY-" + "s" * 24
OWN_KEY = "sk-visitor-own-" + "v" * 24


@action(reads=["question"], writes=["answer"])
def s_ask(state, model: str = "sim-small", temperature: float = 0.0):
    return state.update(answer=rewind.llm.chat([{"role": "user", "content": state["question"]}],
                                               model=model, temperature=temperature))


@action(reads=["answer"], writes=["receipt"], determinism="side-effect")
def s_send(state):
    return state.update(receipt=len(state["answer"]))


PIPELINE = Pipeline(name="safety", graph=GraphBuilder().with_actions(ask=s_ask, send=s_send)
                    .with_transitions(("ask", "send")).build(), entrypoint="ask")
PIPELINE.sample_state = {"question": "Is the key safe?"}


@pytest.fixture
def servers(tmp_path, monkeypatch):
    """serve-llm as the server's endpoint (with a dummy server key), a capture server beside it."""
    llm, llm_url = llm_server.start_in_thread()
    capture = Capture(llm_url)
    threading.Thread(target=capture.serve_forever, daemon=True).start()
    monkeypatch.setenv("REWIND_DB", str(tmp_path / "safety.db"))
    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", llm_url)
    rewind.register_pipeline(PIPELINE)
    rewind.llm.reset()
    try:
        yield {"llm_url": llm_url, "capture": capture}
    finally:
        capture.shutdown()
        capture.server_close()
        llm.stop()
        rewind.llm.reset()


def ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def session(page: str = "settings") -> AppTest:
    at = ok(AppTest.from_file(APP, default_timeout=120).run())
    at.switch_page(f"pages/{page}.py")
    return ok(at.run())


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"pages/{page}.py")
    return ok(at.run())


def metrics(at: AppTest) -> dict:
    return {m.label: m.value for m in at.metric}


def apply(at: AppTest, base_url: str = "", model: str = "", key: str = "", provider: str | None = None) -> AppTest:
    if provider:
        at.radio[0].set_value(provider)
    at.text_input[0].set_value(base_url)
    at.text_input[1].set_value(model)
    at.text_input[2].set_value(key)
    next(b for b in at.button if b.label == "Apply").click()
    return ok(at.run())


def start_uncached_run(at: AppTest) -> None:
    at = goto(at, "runs")
    at.selectbox(key="start_pipeline").set_value("safety")
    ok(at.run())
    at.text_area(key="start_state::safety").set_value(json.dumps({"question": "Where does my key go?"}))
    next(c for c in at.checkbox if c.label.startswith("Serve cache hits")).uncheck()
    next(b for b in at.button if b.label == "Start run").click()
    ok(at.run())


def test_a_session_base_url_changes_nothing_for_anyone_else(servers):
    capture = servers["capture"]
    env_before = dict(os.environ)
    process_before = rewind.llm.provider_info()
    bob, alice = session(), session()
    bob = apply(bob, base_url=capture.url, model="sim-small", provider="openai")
    assert capture.url in dump(bob) and metrics(bob)["API key"] == "none"
    alice = goto(alice, "settings")
    assert capture.url not in dump(alice) and servers["llm_url"] in dump(alice)
    assert metrics(alice)["API key"] == "present"
    assert dict(os.environ) == env_before
    assert rewind.llm.provider_info() == process_before


def test_the_server_key_never_reaches_a_base_url_chosen_in_a_session(servers):
    capture = servers["capture"]
    bob, alice = session(), session()
    bob = apply(bob, base_url=capture.url)
    start_uncached_run(bob)
    assert capture.seen, "the run from bob's session did not reach the base URL he chose"
    for req in capture.seen:
        raw = req["headers"] + req["body"].decode("utf-8", "replace")
        assert SERVER_KEY not in raw, f"the server's key reached {req['path']}"
        assert req["authorization"] in (None, "Bearer not-needed"), req["authorization"]
    # alice's runs still go to the server's own endpoint (with the server's key), never to bob's
    n = len(capture.seen)
    start_uncached_run(alice)
    assert len(capture.seen) == n
    with rewind.Rewind(os.environ["REWIND_DB"]) as rw:
        assert [r.status for r in rw.list_runs()] == ["completed", "completed"]


def test_an_own_key_goes_to_the_own_url_and_is_never_drawn_again(servers):
    capture = servers["capture"]
    bob = apply(session(), base_url=capture.url, key=OWN_KEY)
    assert OWN_KEY not in dump(bob)
    assert metrics(bob)["API key"] == "yours"
    assert [t.value for t in bob.text_input][2] == ""  # the form cleared itself
    start_uncached_run(bob)
    assert capture.seen and all(r["authorization"] == f"Bearer {OWN_KEY}" for r in capture.seen)
    bob = goto(bob, "settings")
    assert OWN_KEY not in dump(bob)
    next(b for b in bob.button if b.label == "Forget my key").click()
    bob = ok(bob.run())
    assert metrics(bob)["API key"] == "none"
    # and an own key never reaches the process
    assert OWN_KEY not in json.dumps(dict(os.environ)) and OWN_KEY not in str(rewind.llm.provider_info())


def test_an_own_key_without_a_base_url_goes_to_the_servers_url(servers):
    bob = apply(session(), key=OWN_KEY)
    assert metrics(bob)["API key"] == "yours"
    start_uncached_run(bob)
    assert not servers["capture"].seen


def test_a_password_in_the_base_url_is_never_drawn_back(servers):
    """Seen by a stranger: after Apply, the base URL box was refilled with the URL as typed,
    password and `api_key=` query value included, in the page's DOM. The box shows it masked;
    applying the masked form unchanged keeps the real URL (so editing the model alone works)."""
    capture = servers["capture"]
    secret_url = capture.url.replace("http://", "http://bob:pw-s3cret-99@") + "?api_key=qk-s3cret-42"
    bob = apply(session(), base_url=secret_url, provider="openai")
    page = dump(bob)
    assert "pw-s3cret-99" not in page and "qk-s3cret-42" not in page
    shown = bob.text_input[0].value
    assert "***" in shown and "pw-s3cret-99" not in shown, shown
    edited = apply(bob, base_url=shown.replace("/v1", "/v2"), provider="openai")
    assert any("masked secret" in e.value for e in edited.error)
    bob = apply(edited, base_url=shown, model="sim-small", provider="openai")
    assert "pw-s3cret-99" not in dump(bob)
    assert bob.session_state["_model_settings"]["base_url"] == secret_url
    start_uncached_run(bob)
    assert capture.seen, "the run did not reach the base URL bob chose"


def test_bad_base_url_is_refused_and_nothing_changes(servers):
    bob = apply(session(), base_url="file:///etc/passwd")
    assert any("must start with http" in e.value for e in bob.error)
    assert "file:///etc/passwd" not in [c.value for c in bob.code]


def test_default_temperature_is_per_session(servers):
    a, b = session(), session()
    a.slider(key="set_temperature").set_value(1.5)
    ok(a.run())
    b = goto(b, "settings")
    assert b.slider(key="set_temperature").value == 0.7


@pytest.mark.parametrize("allowed", [False, True])
def test_side_effects_only_where_the_server_allows_them(servers, monkeypatch, allowed):
    if allowed:
        monkeypatch.setenv("REWIND_ALLOW_SIDE_EFFECTS", "1")
    with rewind.Rewind(os.environ["REWIND_DB"]) as rw:
        run = rw.run(PIPELINE, {"question": "side"})
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("pages/fork.py")
    at.query_params.update({"run": run.id, "node": "ask"})
    ok(at.run())
    toggles = [t for t in at.toggle if t.label == "Allow side effects"]
    assert bool(toggles) is allowed
    if not allowed:
        assert any("does not allow side effects" in c.value for c in at.caption)
