"""Runs that span several calls (issue 10), on SQLite and PostgreSQL: a three-turn chatbot driven
with `inputs` and `halt_after`, its fork at turn 1 replaying turns 2 and 3 with the recorded user
messages, and `rw.resume` of a failed run once its cause is fixed."""

import pytest

from rewind import Rewind
from tests import burr_apps
from tests.burr_apps import CALLS, CHAT_HALT, CHAT_TURNS, SETTINGS
from tests.test_burr_fidelity import assert_same_trajectory, burr_trajectory, run_turns


@pytest.fixture(autouse=True)
def clean_calls():
    CALLS.clear()
    SETTINGS["search_down"] = False
    yield
    SETTINGS["search_down"] = False


@pytest.fixture
def rw(store_url):
    handle = Rewind(store_url)
    yield handle
    handle.close()


def user_messages(chat_history: list) -> list:
    return [m["content"] for m in chat_history if m["role"] == "user"]


def test_chat_loop_halts_after_each_turn_and_keeps_every_message(rw):
    app = burr_apps.chatbot_app()
    run = rw.run(app.pipeline(), {"chat_history": []}, inputs={"user_input": CHAT_TURNS[0]},
                 halt_after=CHAT_HALT)
    assert run.status == "halted", run.error
    assert [s.node for s in run.steps] == ["human_input", "safety_check", "ai_response"]
    run = rw.resume(run.id, inputs={"user_input": CHAT_TURNS[1]}, halt_after=CHAT_HALT)
    assert run.status == "halted", run.error
    assert len(run.steps) == 6 and run.steps[-1].node == "unsafe_response"
    history = rw.state_at(run.steps[-1])["chat_history"]
    assert len(history) == 4  # Burr keeps both turns: user, assistant, user, assistant
    assert user_messages(history) == CHAT_TURNS[:2]
    assert rw.get_run(run.id).status == "halted"


def test_chatbot_matches_burr_on_both_backends(rw):
    app = burr_apps.chatbot_app()
    run = run_turns(rw, app)
    assert run.status == "halted", run.error
    assert_same_trajectory(rw, run, burr_trajectory(app.graph, app.entrypoint, app.state, app.turns))


def test_chatbot_fork_at_turn_one_replays_later_turns_with_recorded_messages(rw):
    app = burr_apps.chatbot_app()
    run = run_turns(rw, app)
    assert run.status == "halted", run.error
    CALLS.clear()
    edited = "Who was Alexander Hamilton, sir?"
    fork = rw.fork(run.id, at="ai_response",
                   edit={"chat_history": [{"content": edited, "role": "user"}]})
    # it stops where the parent stopped: after turn 3's answer, not after turn 1's
    assert fork.status == run.status, fork.error
    assert [s.node for s in fork.steps] == [s.node for s in run.steps]
    history = rw.state_at(fork.steps[-1])["chat_history"]
    assert user_messages(history) == [edited, CHAT_TURNS[1], CHAT_TURNS[2]]
    assert len(history) == 6
    assert CALLS.count("human_input") == 2  # turns 2 and 3, fed their recorded user_input
    assert fork.total_tokens > 0  # the edited history reached the model again


def test_resume_failed_run_completes_after_the_cause_is_fixed(rw):
    app = burr_apps.flaky_research_app()
    SETTINGS["search_down"] = True
    run = rw.run(app.pipeline(), dict(app.state))
    assert run.status == "failed"
    assert "search backend is down" in (run.error or "")
    SETTINGS["search_down"] = False
    CALLS.clear()
    resumed = rw.resume(run.id)
    assert resumed.id == run.id
    assert resumed.status == "completed", resumed.error
    assert CALLS == ["fetch_sources", "write_answer"]  # the step that succeeded is not re-run
    final = rw.get_run(run.id)
    assert final.status == "completed"
    assert [s.status for s in final.steps] == ["executed"] * 3
    assert_same_trajectory(rw, final, burr_trajectory(app.graph, app.entrypoint, app.state, app.turns))


def test_resume_while_still_broken_fails_cleanly_then_completes(rw):
    app = burr_apps.flaky_research_app()
    SETTINGS["search_down"] = True
    run = rw.run(app.pipeline(), dict(app.state))
    assert run.status == "failed"
    again = rw.resume(run.id)  # not a raw database error, and not left `running`
    assert again.status == "failed" and "search backend is down" in (again.error or "")
    assert rw.get_run(run.id).status == "failed"
    SETTINGS["search_down"] = False
    done = rw.resume(run.id)
    assert done.status == "completed", done.error
    assert [s.node for s in rw.get_run(run.id).steps] == ["plan_search", "fetch_sources", "write_answer"]
