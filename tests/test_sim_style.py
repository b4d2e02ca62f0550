"""The offline model follows simple instructions in a prompt (issue 14 point 9): number of
points, case, tone, length and language, deterministically at temperature 0, so a prompt edit
visibly changes the reply in a demo. Prompts without instructions are unchanged
(tests/test_sim_compat.py freezes that)."""

from __future__ import annotations

import re

import pytest

from rewind import Rewind
from rewind.model import sim
from rewind.pipelines import research as R
from rewind.model.sim.style import Style, read_style

Q = "How do Python generators work?"
PLAN = R.fill(R.PLAN_PROMPT, question=Q)
SOLAR = "Explain the trade-offs of solar panels on urban rooftops"
ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+", re.M)


def reply(content: str, model: str = "sim-small", **kw) -> str:
    return sim.complete(model, [{"role": "user", "content": content}], **kw)[0].text


def plan_with(instruction: str) -> str:
    return reply(instruction + " " + PLAN)


def items(text: str) -> list:
    return ITEM.findall(text)


# --- reading instructions ----------------------------------------------------------------------

@pytest.mark.parametrize("phrase, expected", [
    ("at most two points", Style(points=2)),
    ("in 3 bullet points", Style(points=3, marker="bullet")),
    ("give 4 numbered items", Style(points=4, marker="numbered")),
    ("in capitals", Style(case="upper")),
    ("answer in all caps", Style(case="upper")),
    ("in lower case", Style(case="lower")),
    ("use a playful tone", Style(tone="playful")),
    ('tone "playful"', Style(tone="playful")),
    ("in a formal style", Style(tone="formal")),
    ("in one sentence", Style(sentences=1)),
    ("in two sentences", Style(sentences=2)),
    ("under 20 words", Style(max_words=19)),
    ("in at most 12 words", Style(max_words=12)),
    ("reply in French", Style(language="fr")),
    ("in Spanish", Style(language="es")),
    ("auf Deutsch", Style(language="de")),
    ("in English", None),
])
def test_each_instruction_is_read(phrase, expected):
    style, _ = read_style([{"role": "user", "content": f"{SOLAR}, {phrase}."}])
    assert style == (expected if expected != Style() else None)


@pytest.mark.parametrize("content", [
    PLAN,  # "3 to 5 numbered sub-questions": a range is the model's default, not an order
    "Write 3 to 5 numbered sub-questions about tides",
    "Keep it short: the history of the printing press",
    "Give a one-line verdict on remote work productivity",
    "Describe formal verification of software and playful learning in schools.",
    "What are the capitals of Europe?",
    R.fill(R.CRITIQUE_PROMPT, question="Answer in French, in capitals", analysis="Give 2 points in Spanish."),
])
def test_no_instruction_is_read_from_near_misses_or_data(content):
    msgs = [{"role": "user", "content": content}]
    assert read_style(msgs) == (None, msgs)


def test_instructions_are_cut_out_of_the_topic():
    text = reply(f"{SOLAR} in French.")
    assert "French" not in text and "solar panels on urban rooftops" in text


# --- following them ----------------------------------------------------------------------------

def test_number_of_points_limits_and_extends_the_plan():
    default = plan_with("")
    assert len(items(default)) >= 3
    two = plan_with("Answer in at most two points.")
    assert len(items(two)) == 2
    six = plan_with("List 6 questions.")
    assert len(items(six)) == 6
    bullets = reply(f"{SOLAR} in 3 bullet points.")
    assert [ln[:2] for ln in bullets.splitlines()] == ["- ", "- ", "- "]


def test_the_issue_example_two_points_in_capitals():
    text = plan_with("In at most two points, in capitals.")
    assert text == text.upper() and len(items(text)) == 2
    assert text != plan_with("")


def test_case_keeps_citations_exact():
    sources = "[doc:epa-Heat] EPA report: Urban areas can be 7 degrees warmer."
    text = reply(f"Compose a report on urban heat, in capitals.\n\nSources:\n{sources}")
    assert "[doc:epa-Heat]" in text
    rest = text.replace("[doc:epa-Heat]", "")
    assert rest == rest.upper()
    low = reply(f"{SOLAR}, in lower case.")
    assert low == low.lower() and low


def test_tone_changes_opening_and_closing():
    plain = plan_with("")
    playful = plan_with("Use a playful tone.")
    formal = plan_with("Use a formal tone.")
    assert len({plain, playful, formal}) == 3
    assert playful.splitlines()[0].endswith("!") and not playful.startswith("Research plan:")
    assert "Respectfully submitted." in formal or "I remain at your disposal" in formal
    assert "it's" in reply(f"{SOLAR}. It is fun, be playful.") or "let's" in reply(f"{SOLAR}, be playful.").lower()


def test_length_in_sentences_and_words():
    one = reply(f"{SOLAR} in one sentence.")
    assert len(re.findall(r"[.!?](?:\s|$)", one)) == 1
    for limit in (20, 8, 3):
        text = reply(f"{SOLAR} in under {limit} words.")
        assert 0 < len(text.split()) < limit
    plan = plan_with("Answer in at most 15 words.")
    assert 0 < len(plan.split()) <= 15


@pytest.mark.parametrize("lang, words", [
    ("French", ("Questions", "recherche", "Quels", "sources")),
    ("Spanish", ("Preguntas", "investigación", "¿", "fuentes")),
    ("German", ("Forschung", "Welche", "Quellen", "Frage")),
])
def test_reply_language(lang, words):
    text = plan_with(f"Answer in {lang}.")
    english = plan_with("")
    assert text != english
    assert sum(w in text for w in words) >= 2, text
    generic = reply(f"{SOLAR} in {lang}.")
    assert "Here is" not in generic and "The main points" not in generic


def test_instructions_combine():
    text = plan_with("Reply in Spanish, in capitals, in 3 bullet points.")
    assert text == text.upper() and len(items(text)) == 3 and "¿" in text


def test_following_instructions_is_deterministic_and_metered():
    content = plan_with("In at most two points, in capitals, playful, in French.")
    a = sim.complete("sim-large", [{"role": "user", "content": content}])[0]
    b = sim.complete("sim-large", [{"role": "user", "content": content}])[0]
    assert a == b
    assert a.completion_tokens == sim.count_tokens(a.text)
    seeded = {reply(plan_with("in 3 points"), temperature=1.0, seed=s) for s in range(4)}
    assert all(len(items(t)) <= 3 for t in seeded)


def test_a_plan_prompt_edit_changes_the_demo_fork(tmp_path):
    with Rewind(str(tmp_path / "style.db")) as rw:
        run = rw.run(R.pipeline, {"question": Q})
        assert run.status == "completed", run.error
        prompt = R.PLAN_PROMPT.replace("Break it into 3 to 5 numbered sub-questions",
                                       "Answer in capitals, in at most two points")
        fork = rw.fork(run.id, at="plan", params={"prompt": prompt})
        assert fork.status == "completed", fork.error
        step = next(s for s in fork.steps if s.node == "plan")
        assert step.status == "executed"
        text = step.outputs["plan"]
        assert text == text.upper() and len(items(text)) == 2
        assert step.outputs["questions"] and len(step.outputs["questions"]) == 2
