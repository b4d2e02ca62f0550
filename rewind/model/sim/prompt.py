"""Reading a prompt: what the offline model understands of the messages it is sent.

Owns the parse (`read_prompt`: system text, last user message, labelled sections, `[doc:ID]`
source lines), the task the instructions name (`detect_task`), and the text helpers the writers
build answers from (topic, keywords, noun phrases, sentences, exact quotes). Pure functions of
the text: no randomness here.

It also owns how much of a prompt is read: `reading_window` cuts the messages to at most
`READ_LIMIT` characters of content in all (issue 38: a 100 MB prompt took 20 GB and more than
11 minutes). The writers only ever see that window, so their work is bounded whatever the input;
the request's identity and its token count are still taken over the whole input, in linear time
(`model.complete`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable, Sequence

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'\-]*[A-Za-z0-9]|[A-Za-z]")
SOURCE_LINE = re.compile(r"^\s*(?:[-*]\s*|\d+[.)]\s*)?\[doc:([^\]\s]+)\]\s*(.*)$")
CITATION = re.compile(r"\[doc:[^\]\s]+\]")
_SECTION = re.compile(r"^\s*(?:#{1,6}\s*)?([A-Za-z][A-Za-z ]{1,40}?)\s*:\s*(.*)$")
SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")
_INSTRUCTION_PREFIX = re.compile(
    r"^\s*(?:please\s+)?(?:plan|write|compose|draft|create|make|produce|give|list|outline|"
    r"research|investigate|analy[sz]e|critique|review|revise|rewrite|summari[sz]e|explain|"
    r"describe|discuss|tell me)\b[^:]*?(?:\b(?:on|about|for|of|regarding|into)\b|:)\s*",
    re.I,
)

_KNOWN_SECTIONS = {
    "topic", "question", "questions", "plan", "research plan", "analysis", "revised analysis",
    "draft", "text", "report", "answer", "summary", "critique", "feedback", "review",
    "comments", "sources", "notes", "findings", "evidence", "hits", "context", "task",
    "instructions", "goal", "subject",
}
DRAFT_SECTIONS = ("revised analysis", "analysis", "draft", "text", "report", "answer", "summary",
                   "findings", "notes")
CRITIQUE_SECTIONS = ("critique", "feedback", "review", "comments")

_STOPWORDS = frozenset(
    """a about above after again against all also am an and any are aren't as at be because
    been before being below between both but by can cannot could did do does doing down during
    each few for from further had has have having he her here hers herself him himself his how i
    if in into is isn't it its itself just let me more most my myself no nor not now of off on
    once only or other ought our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under
    until up upon very was we were what when where which while who whom why will with would you
    your yours yourself yourselves
    please plan planning research researcher question questions write writing list topic
    critique critic critical review analysis analyze analyse revise revision rewrite compose
    composition report draft sources source doc docs give make create produce provide generate
    based using use following given below above answer respond response brief short concise
    numbered step steps assistant user system task instructions output format text note notes
    one two three four five several many much well like may might must shall need needs want
    get got into onto per via etc new way ways thing things""".split()
)


# What the writers read of a prompt, in characters of content over all its messages: 128 Ki.
# Far above any prompt the pipelines send (a few KB; the 60 KB question of issue 12 is read
# whole), so every reply to an ordinary prompt is unchanged.
READ_LIMIT = 128 * 1024


def reading_window(messages: list, limit: int = READ_LIMIT) -> list:
    """The messages as the writers read them: whole if their contents total at most `limit`
    characters, else each cut to a prefix so that they total exactly `limit`. Short messages
    (the system prompt, the instructions) stay whole and the long ones share the rest equally,
    the most recent getting the odd characters."""
    lengths = [len(m["content"]) for m in messages]
    if sum(lengths) <= limit:
        return messages
    remaining, left = limit, len(lengths)
    share = 0
    for length in sorted(lengths):  # the largest share such that sum(min(len, share)) <= limit
        share = remaining // left
        if length > share:
            break
        remaining -= length
        left -= 1
    extra = remaining - share * left  # < left: one more character for the last `extra` long ones
    out: list = []
    for m, length in zip(reversed(messages), reversed(lengths)):
        if length > share:
            keep = share + (1 if extra > 0 else 0)
            extra -= 1
            m = {**m, "content": m["content"][:keep]}
        out.append(m)
    out.reverse()
    return out


@dataclasses.dataclass
class Source:
    doc_id: str
    title: str
    text: str

    @property
    def cite(self) -> str:
        return f"[doc:{self.doc_id}]"


@dataclasses.dataclass
class Prompt:
    system: str
    user: str          # the last user message
    all_text: str      # every message, in order
    sections: dict     # lower-cased section name -> text (from the user messages)
    sources: list
    style: Any = None  # the instructions the prompt gives (`style.Style`), once read


def _parse_sources(text: str) -> list:
    seen, out = set(), []
    for line in text.splitlines():
        m = SOURCE_LINE.match(line)
        if not m:
            continue
        doc_id, rest = m.group(1), m.group(2).strip()
        if doc_id in seen:
            continue
        seen.add(doc_id)
        title, body = "", rest
        head, sep, tail = rest.partition(": ")
        if sep and 0 < len(head) <= 120:
            title, body = head.strip(), tail.strip()
        out.append(Source(doc_id, title or doc_id, body))
    return out


def _parse_sections(text: str) -> dict:
    sections: dict = {}
    current = None
    for line in text.splitlines():
        if SOURCE_LINE.match(line):
            current = None
            continue
        m = _SECTION.match(line)
        if m and m.group(1).strip().lower() in _KNOWN_SECTIONS:
            current = m.group(1).strip().lower()
            sections.setdefault(current, [])
            if m.group(2).strip():
                sections[current].append(m.group(2).strip())
            continue
        if current is not None:
            sections[current].append(line)
    return {k: "\n".join(v).strip() for k, v in sections.items()}


_INSTRUCTION_SECTIONS = ("task", "instructions")


def instruction_lines(text: str) -> list:
    """For each line of a user message, whether it is instructions rather than data: the lines
    before the first labelled section and those of a Task/Instructions section, never a source
    line. "Question: ..." and "Analysis: ..." are data, whatever words they contain."""
    flags, current = [], None
    for line in text.splitlines():
        if SOURCE_LINE.match(line):
            flags.append(False)
            continue
        m = _SECTION.match(line)
        if m and m.group(1).strip().lower() in _KNOWN_SECTIONS:
            current = m.group(1).strip().lower()
            flags.append(current in _INSTRUCTION_SECTIONS)
            continue
        flags.append(current is None or current in _INSTRUCTION_SECTIONS)
    return flags


def read_prompt(messages: list) -> Prompt:
    system = "\n".join(m["content"] for m in messages if m["role"] in ("system", "developer"))
    users = [m["content"] for m in messages if m["role"] == "user"]
    user = users[-1] if users else (messages[-1]["content"] if messages else "")
    all_text = "\n".join(m["content"] for m in messages)
    sections: dict = {}
    for u in users or [user]:
        sections.update(_parse_sections(u))
    return Prompt(system, user, all_text, sections, _parse_sources(all_text))


_TASK_PATTERNS = (
    ("compose", re.compile(r"\b(?:compos|final report|write[- ]up|report\b)", re.I)),
    ("revise", re.compile(r"\b(?:revis|rewrit|improve the|address the critique)", re.I)),
    ("critique", re.compile(r"\b(?:critiqu|critic|weakness|review the|find (?:the )?flaws)", re.I)),
    ("analyze", re.compile(r"\b(?:analy[sz]|synthesi[sz]|summari[sz]e the sources)", re.I)),
    ("plan", re.compile(r"\bplan", re.I)),
)


def detect_task(prompt: Prompt) -> str:
    """The task named by the instructions: system message first, then the user's first line.

    The body of a user message is data (an analysis may say "report" or "plan"), so it is
    consulted last, and only when nothing more authoritative named a task.
    """
    first_line = next((ln for ln in prompt.user.splitlines() if ln.strip()), "")
    for text in (prompt.system, first_line, prompt.user):
        for task, pattern in _TASK_PATTERNS:
            if pattern.search(text):
                return task
    return "generic"


def _norm_word(w: str) -> str:
    return w if (w.isupper() and len(w) <= 6) or any(c.isupper() for c in w[1:]) else w.lower()


def keywords(text: str, limit: int = 8) -> list:
    """Content words in order of first appearance (citations and source lines excluded)."""
    text = CITATION.sub(" ", text)
    seen, out = set(), []
    for w in _WORD.findall(text):
        lw = w.lower()
        if len(w) < 3 or lw in _STOPWORDS or lw in seen or lw.isdigit():
            continue
        seen.add(lw)
        out.append(_norm_word(w))
        if len(out) >= limit:
            break
    return out


_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9'\-]*[A-Za-z0-9]|[A-Za-z]|[^\sA-Za-z]")
# Words that head a topic without naming its subject ("the effects of X"): not phrase material.
_VAGUE_HEADS = frozenset(
    """effect effects impact impacts role roles current recent latest future overview
    introduction history study studies benefit benefits risk risks state status trends trend
    case cases importance kind kinds type types aspect aspects issue issues""".split()
)


def phrases(text: str, limit: int = 5) -> list:
    """Noun-phrase-like runs of content words ("soil health", "urban heat islands").

    Stopwords and punctuation end a run; runs are capped at three words so that a phrase can
    stand in a question template.
    """
    out, seen, run = [], set(), []

    def flush():
        while run:
            chunk = run[:3]
            del run[:3]
            phrase = " ".join(chunk)
            if phrase.lower() not in seen:
                seen.add(phrase.lower())
                out.append(phrase)

    for tok in _TOKEN.findall(CITATION.sub(" ", text)):
        lw = tok.lower()
        is_content = (tok[0].isalpha() and len(tok) >= 3 and lw not in _STOPWORDS
                      and lw not in _VAGUE_HEADS)
        if is_content:
            run.append(_norm_word(tok))
        else:
            flush()
        if len(out) >= limit:
            break
    flush()
    return out[:limit]


def frequent_keywords(texts: Iterable[str], limit: int = 4) -> list:
    counts: dict = {}
    order: dict = {}
    for text in texts:
        for w in _WORD.findall(CITATION.sub(" ", text)):
            lw = w.lower()
            if len(w) < 4 or lw in _STOPWORDS:
                continue
            counts[lw] = counts.get(lw, 0) + 1
            order.setdefault(lw, len(order))
    ranked = sorted(counts, key=lambda k: (-counts[k], order[k]))
    return ranked[:limit]


def topic_of(prompt: Prompt) -> str:
    for name in ("topic", "subject", "question", "goal"):
        if prompt.sections.get(name):
            return _clean_topic(prompt.sections[name].splitlines()[0])
    for line in prompt.user.splitlines():
        if not line.strip() or SOURCE_LINE.match(line):
            continue
        m = _SECTION.match(line)
        if m and m.group(1).strip().lower() in _KNOWN_SECTIONS:
            continue
        return _clean_topic(line)
    kws = keywords(prompt.all_text, 4)
    return " ".join(kws) if kws else "the subject"


_QUESTION_LEAD = re.compile(
    r"^(?:how|what|why|when|where|which|who)\s+(?:do|does|did|is|are|was|were|can|could|should|to)\s+",
    re.IGNORECASE,
)


def _clean_topic(line: str) -> str:
    text = _INSTRUCTION_PREFIX.sub("", line.strip(), count=1) or line.strip()
    text = text.strip().strip("\"'").rstrip(" .?!:;")
    # "How do generators work?" is a question about generators, not a topic named "How do…"
    text = _QUESTION_LEAD.sub("", text, count=1) or text
    if len(text) > 90:  # a whole paragraph is not a topic: keep its first clause
        text = re.split(r"[.;:!?]\s", text)[0][:90].rsplit(" ", 1)[0]
    return text or "the subject"


def sentences(text: str) -> list:
    out = []
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+[.)])\s)", text):
        block = " ".join(block.split())
        block = re.sub(r"^(?:[-*]|\d+[.)])\s+", "", block)
        if not block:
            continue
        out.extend(s.strip() for s in SENTENCE_SPLIT.split(block) if s.strip())
    return out


def quote_of(text: str, max_words: int = 12) -> str:
    """The first sentence of text, or its first max_words words: always an exact substring."""
    text = text.strip()
    first = SENTENCE_SPLIT.split(text, maxsplit=1)[0] if text else ""
    words = list(re.finditer(r"\S+", first))
    if len(words) > max_words:
        first = first[: words[max_words - 1].end()]
    return first.rstrip(" ,;:.")


def cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def join_words(words: Sequence[str]) -> str:
    words = list(words)
    if not words:
        return ""
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " and " + words[-1]


def draft_text(prompt: Prompt) -> str:
    for name in DRAFT_SECTIONS:
        if prompt.sections.get(name):
            return prompt.sections[name]
    # No labelled section: the user message minus its instruction line and source lines.
    lines = [ln for ln in prompt.user.splitlines() if not SOURCE_LINE.match(ln)]
    body = "\n".join(lines[1:]).strip() if len(lines) > 1 else "\n".join(lines)
    return body
