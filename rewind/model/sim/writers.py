"""The offline model's writers: one function per task (plan, critique, revise, analyze, compose,
generic), each turning a parsed `Prompt` into the answer text.

Owns what the answers say. Every variable choice goes through the `Chooser`, so temperature 0
is reproducible and temperature > 0 varies; the order of draws is part of the frozen output
(tests/test_sim_compat.py), so a new draw goes after the existing ones, never between them.
"""

from __future__ import annotations

import re
from typing import Optional

from .prompt import (
    CITATION, CRITIQUE_SECTIONS, DRAFT_SECTIONS, Prompt, Source, cap, draft_text, frequent_keywords, join_words, keywords, phrases, quote_of, sentences, topic_of,
)
from .sampling import Chooser

def _write_plan(p: Prompt, ch: Chooser, model: str) -> str:
    topic = topic_of(p)
    subjects = phrases(topic) or phrases(p.user) or ["the subject"]
    a = subjects[0]
    b = subjects[1] if len(subjects) > 1 else subjects[0]
    c = subjects[-1]
    header = ch.pick([f"Research plan: {topic}", f"Plan for researching {topic}",
                      f"Research questions on {topic}"])
    first = ch.pick([
        f"What is currently known about {topic}, and how strong is the evidence?",
        f"What does the most recent evidence say about {topic}?",
        f"Which key terms in {topic} need a precise definition, and how are they measured?",
    ])
    pool = [
        f"Which mechanisms link {a} and {b}?" if a != b else f"Which mechanisms drive {a}?",
        f"What measurable effects involving {a} have been reported, and at what scale?",
        f"Where do experts disagree about {b}, and why?",
        f"What are the main risks and limitations concerning {c}?",
        f"How has the understanding of {a} changed over the last decade?",
        f"Which open questions about {b} remain unresolved?",
        f"Who is most affected by {c}, and how?",
        f"What would a practical recommendation on {topic} need to address?",
    ]
    extra = 3 if model.endswith("large") else 2
    n_more = extra + ch.index(2)  # 3-4 questions (4-5 for the large model)
    if p.style is not None and p.style.points:  # "in 2 points": the draw above is still made
        n_more = min(len(pool), p.style.points - 1)
    questions = [first] + ch.sample(pool, n_more)
    lines = [header, ""] + [f"{i}. {q}" for i, q in enumerate(questions, 1)]
    lines += ["", ch.pick([
        "Each question will be answered from cited sources before drafting the report.",
        "Answer each question from the retrieved sources, citing them.",
        "The questions are ordered from background to recommendations.",
    ])]
    return "\n".join(lines)


_HEDGES = re.compile(r"\b(?:may|might|could|some|many|often|likely|possibly|perhaps|generally|"
                     r"arguably|seems?|appears?)\b", re.I)


def _write_critique(p: Prompt, ch: Chooser, model: str) -> str:
    draft = draft_text(p)
    sents = [s for s in sentences(draft) if len(s.split()) >= 3]
    topic = topic_of(p)
    header = ch.pick(["Critique of the analysis:", "Weaknesses found in the analysis:",
                      "Review of the draft:"])
    items = []
    if not sents:
        items.append(ch.pick([
            "The analysis is empty or too short to evaluate; it makes no checkable claim.",
            "There is no substantive analysis to critique: no claim, no evidence, no source.",
        ]))
    # Prefer the sentences most open to criticism: uncited first, then hedged, then the rest.
    ranked = sorted(range(len(sents)), key=lambda i: (
        bool(CITATION.search(sents[i])), not _HEDGES.search(sents[i]), i))
    for i in sorted(ranked[: 3 if len(sents) >= 3 else len(sents)]):
        s = sents[i]
        q = quote_of(s, 10)
        if not CITATION.search(s):
            items.append(ch.pick([
                f"Unsupported claim: \"{q}\" is not backed by any cited source.",
                f"No citation: the statement \"{q}\" needs a source.",
            ]))
        elif _HEDGES.search(s):
            items.append(ch.pick([
                f"Vague wording: \"{q}\" hedges without saying how much or how often.",
                f"Imprecise: \"{q}\" should quantify its claim.",
            ]))
        elif re.search(r"\d", s):
            items.append(ch.pick([
                f"Unverified figure: the number in \"{q}\" should be checked against its source.",
                f"Check the numbers: \"{q}\" gives a figure without context or a baseline.",
            ]))
        elif len(s.split()) > 30:
            items.append(f"Overloaded sentence: \"{q}\" packs several claims into one.")
        else:
            items.append(ch.pick([
                f"Shallow reasoning: \"{q}\" states a conclusion without explaining why.",
                f"Missing mechanism: \"{q}\" asserts an effect but not how it arises.",
            ]))
    draft_lower = draft.lower()
    missing = [k for k in phrases(topic) if k.lower() not in draft_lower]
    if missing:
        items.append(f"Missing coverage: the analysis never discusses {join_words(missing[:2])}.")
    elif sents:
        items.append(ch.pick([
            "Missing counter-evidence: no source that disagrees is considered.",
            "One-sided: the analysis does not weigh alternative explanations.",
        ]))
    lines = [header, ""] + [f"{i}. {t}" for i, t in enumerate(items, 1)]
    lines += ["", ch.pick([
        "Verdict: revise before composing the report.",
        "Verdict: the analysis needs another pass before it can support a report.",
        "Overall: promising, but not yet ready to publish.",
    ])]
    return "\n".join(lines)


_REWRITES = (
    (re.compile(r"\bvery\s+", re.I), ["", ""]),
    (re.compile(r"\breally\s+", re.I), ["", ""]),
    (re.compile(r"\ba lot of\b", re.I), ["many", "a great many"]),
    (re.compile(r"\blots of\b", re.I), ["many", "numerous"]),
    (re.compile(r"\bbig\b", re.I), ["large", "substantial"]),
    (re.compile(r"\bshows\b", re.I), ["indicates", "demonstrates"]),
    (re.compile(r"\bimportant\b", re.I), ["significant", "central"]),
    (re.compile(r"\bthings\b", re.I), ["factors", "elements"]),
    (re.compile(r"\bgood\b", re.I), ["strong", "sound"]),
    (re.compile(r"\bbad\b", re.I), ["weak", "poor"]),
    (re.compile(r"\bget\b", re.I), ["obtain", "receive"]),
    (re.compile(r"\bAlso,\s*"), ["In addition, ", "Moreover, "]),
    (re.compile(r"\bBut\s"), ["However, ", "Yet "]),
)


def _match_case(template: str, original: str) -> str:
    if original[:1].isupper() and template:
        return template[:1].upper() + template[1:]
    return template


def _rewrite_sentence(s: str, ch: Chooser) -> str:
    for pattern, options in _REWRITES:
        if pattern.search(s):
            choice = ch.pick(options)
            s = pattern.sub(lambda m, c=choice: _match_case(c, m.group(0)), s)
    return s[:1].upper() + s[1:]


# A revision matches at most this many of the critique's quotes against the draft's sentences,
# and looks for a sentence's source among at most this many sources: a critique quotes a few
# sentences and a prompt cites a few sources, and without these bounds a prompt of thousands of
# quotes and sources costs their product (issue 38).
_MAX_QUOTES = 64
_MAX_SOURCES = 64


def _source_words(sources: list) -> list:
    """(source, its keywords, lower-cased) of the sources `_best_source` may pick, read once."""
    return [(src, {w.lower() for w in keywords(src.title + " " + src.text, 40)})
            for src in sources[:_MAX_SOURCES]]


def _best_source(sentence: str, source_words: list) -> Optional[Source]:
    words = {w.lower() for w in keywords(sentence, 20)}
    best, best_score = None, 0
    for src, src_words in source_words:
        score = len(words & src_words)
        if score > best_score:
            best, best_score = src, score
    return best


def _write_revision(p: Prompt, ch: Chooser, model: str) -> str:
    draft = ""
    for name in DRAFT_SECTIONS:
        if p.sections.get(name):
            draft = p.sections[name]
            break
    critique = next((p.sections[n] for n in CRITIQUE_SECTIONS if p.sections.get(n)), "")
    if not draft:
        draft = draft_text(p)
        if critique and critique in draft:
            draft = draft.replace(critique, "")
    sents = sentences(draft)
    if not sents:
        return _write_generic(p, ch, model)
    quoted = list(dict.fromkeys(q.strip() for q in re.findall(r"\"([^\"]{3,})\"", critique)
                                if q.strip()))[:_MAX_QUOTES]
    source_words = None
    out = []
    for s in sents:
        r = _rewrite_sentence(s, ch)
        flagged = any(q in s for q in quoted)
        if flagged and not CITATION.search(r) and p.sources:
            if source_words is None:
                source_words = _source_words(p.sources)
            src = _best_source(s, source_words) or p.sources[0]
            r = r.rstrip()
            end = r[-1] if r[-1:] in ".!?" else "."
            r = r.rstrip(".!?") + f" {src.cite}{end}"
        out.append(r)
    points = len(re.findall(r"(?m)^\s*(?:\d+[.)]|[-*])\s+\S", critique))
    heading = ch.pick(["Revised analysis:", "Revised draft:", "Revision:"])
    body = " ".join(out)
    closing = ""
    if critique:
        closing = ch.pick([
            "This revision tightens the wording and attaches sources to the claims the "
            "critique flagged",
            "Compared with the draft, this version cites its claims and drops vague wording",
        ])
        closing += (f", addressing {points} point{'s' if points != 1 else ''} of the critique."
                    if points else ".")
    return "\n\n".join(x for x in (heading, body, closing) if x)


def _write_analysis(p: Prompt, ch: Chooser, model: str) -> str:
    topic = topic_of(p)
    if not p.sources:
        return _write_generic(p, ch, model)
    lines = [ch.pick([f"Analysis of {topic}", f"Analysis: {topic}", f"What the sources say about {topic}"]), ""]
    for src in p.sources[:6]:
        q = quote_of(src.text or src.title, 16)
        verb = ch.pick(["reports", "finds", "notes", "states"])
        lines.append(f"- {src.title} {verb}: \"{q}\" {src.cite}.")
    themes = frequent_keywords([s.title + " " + s.text for s in p.sources], 3)
    if themes:
        lines += ["", ch.pick([
            f"Across the sources, the recurring themes are {join_words(themes)}.",
            f"Taken together, the sources converge on {join_words(themes)}.",
        ])]
    if len(p.sources) > 1:
        lines.append(ch.pick([
            f"The evidence in {p.sources[0].cite} and {p.sources[1].cite} should be weighed "
            "against each other before drawing conclusions.",
            f"{p.sources[0].cite} and {p.sources[1].cite} cover different aspects, so neither "
            "alone settles the question.",
        ]))
    return "\n".join(lines)


def _write_report(p: Prompt, ch: Chooser, model: str) -> str:
    topic = topic_of(p)
    analysis = next((p.sections[n] for n in DRAFT_SECTIONS if p.sections.get(n)), "")
    title = ch.pick([f"# Report: {cap(topic)}", f"# {cap(topic)}: findings",
                     f"# Briefing on {topic}"])
    n = len(p.sources)
    if n:
        intro = ch.pick([
            f"This report examines {topic}, drawing on {n} source{'s' if n != 1 else ''}.",
            f"Based on {n} source{'s' if n != 1 else ''}, this report summarises what is known about {topic}.",
            f"This brief reviews the evidence on {topic} from {n} cited source{'s' if n != 1 else ''}.",
        ])
    else:
        intro = ch.pick([
            f"This report examines {topic}. No sources were provided, so no claim below is cited.",
            f"A short report on {topic}; it rests on the analysis alone, as no sources were given.",
        ])
    lines = [title, "", intro]
    if n:
        lines += ["", "## Key findings"]
        for i, src in enumerate(p.sources[:6], 1):
            q = quote_of(src.text or src.title, 20)
            verb = ch.pick(["reports", "finds", "notes", "states"])
            lines.append(f"{i}. {src.title} {verb}: \"{q}\" {src.cite}")
    discussion = sentences(analysis)[:2]
    lines += ["", "## Discussion"]
    if discussion:
        lines.append(" ".join(discussion))
    elif n:
        themes = frequent_keywords([s.title + " " + s.text for s in p.sources], 3)
        cites = "".join(s.cite for s in p.sources[:3])
        lines.append(ch.pick([
            f"Taken together, the sources point to {join_words(themes) or topic} as the central issues {cites}.",
            f"The common thread across the sources is {join_words(themes) or topic} {cites}.",
        ]))
    else:
        kws = keywords(topic, 3) or [topic]
        lines.append(f"The key considerations are {join_words(kws)}.")
    lines += ["", "## Conclusion"]
    conclusion = ch.pick([
        f"The evidence supports a cautious, evidence-led approach to {topic}",
        f"Further work on {topic} should start from the findings above",
        f"On balance, {topic} merits continued attention",
    ])
    lines.append(conclusion + (f" {p.sources[0].cite}." if n else "."))
    if n:
        lines += ["", "## Sources"] + [f"- {s.cite} {s.title}" for s in p.sources]
    return "\n".join(lines)


_QUESTION = re.compile(r"(?i)^(?:what|how|why|which|who|when|where|is|are|does|do|can|could|"
                       r"should|would|will)\b")


def _write_generic(p: Prompt, ch: Chooser, model: str) -> str:
    if not p.user.strip() and not p.system.strip():
        return "There is no input to respond to."
    topic = topic_of(p)
    subjects = phrases(topic, 4)
    kws = keywords(topic, 4) or keywords(p.all_text, 4) or [topic]
    if len(subjects) < 2:  # one phrase ("quantum error correction"): talk about its words
        subjects = kws
    a = subjects[0]
    b = subjects[1] if len(subjects) > 1 else a
    if _QUESTION.match(topic):
        opener = ch.pick([f"To answer \"{topic}?\" briefly:", f"On the question \"{topic}?\":",
                          f"A short answer to \"{topic}?\":", f"Briefly, on \"{topic}?\":"])
    else:
        opener = ch.pick([f"Here is a brief overview of {topic}.", f"On {topic}:",
                          f"A short answer on {topic}.", f"Regarding {topic}:"])
    parts = [
        opener,
        ch.pick([f"The central aspects are {join_words(subjects[:3])}.",
                 f"The main points to consider are {join_words(subjects[:3])}.",
                 f"It comes down to {join_words(subjects[:3])}."]),
        ch.pick([f"A careful answer weighs the evidence on {a} against the practical constraints around {b}.",
                 f"Evidence on {a} matters most, but {b} shapes how it applies in practice.",
                 f"Start with {a}; then examine how {b} changes the picture."]) if a != b else
        ch.pick([f"A careful answer starts from what is established about {a}.",
                 f"The evidence on {a} is the place to start.",
                 f"It helps to separate what is known about {a} from what is assumed."]),
        ch.pick(["Conclusions should be checked against primary sources.",
                 "Where the evidence is thin, the answer should say so.",
                 "Any recommendation should state its assumptions."]),
    ]
    if model.endswith("large"):
        parts.append(ch.pick([f"A follow-up question is how {b} will develop.",
                              f"It is also worth asking who is affected by {a}."]))
    return " ".join(parts)


WRITERS = {
    "plan": _write_plan,
    "critique": _write_critique,
    "revise": _write_revision,
    "analyze": _write_analysis,
    "compose": _write_report,
    "generic": _write_generic,
}
