"""Simple instructions in a prompt, and the offline model following them.

Owns `Style` (number of points, bullets or numbers, case, tone, length in sentences or words,
language), `read_style(messages)` which finds them, and `apply(text, style, chooser)` which
reshapes a writer's answer to obey them, so that editing a prompt to say "in at most two points,
in capitals" visibly changes the reply.

Instructions are read only from instruction text: system messages and the lines of the last
user message that are not data (`prompt.instruction_lines`): a question that says "French" or
an analysis that says "3 points" is content, not an order. The phrases found are cut out of the
messages before the writers read them, so "in French" never becomes part of the topic. A prompt
with none of these instructions is answered exactly as before (tests/test_sim_compat.py), so
the patterns are strict: a range ("3 to 5 points"), "short" or "brief" is not an instruction.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from . import languages
from .prompt import instruction_lines

_NUMBERS = {"one": 1, "a single": 1, "single": 1, "two": 2, "three": 3, "four": 4, "five": 5,
            "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_NUM = r"(\d{1,2}|one|a single|two|three|four|five|six|seven|eight|nine|ten)"
_LEAD = (r"(?:(?:please\s+)?(?:answer|reply|respond|write(?:\s+it)?|say\s+it|keep\s+it|make\s+it|"
         r"give\s+it|put\s+it|format\s+it|present\s+it|use|do\s+it|everything)\s+)?")
_AT_MOST = r"(?:(at most|no more than|up to|only|exactly|just|max(?:imum)?(?: of)?)\s+)?"
_I = re.I

_PATTERNS = (
    ("language", re.compile(_LEAD + r"(?:(?:translated\s+)?(?:in|into)\s+)(french|fran[cç]ais|spanish|"
                            r"espa[nñ]ol|castilian|german|deutsch|english)\b", _I)),
    ("language", re.compile(r"\b(?:en\s+(fran[cç]ais|espa[nñ]ol)|auf\s+(deutsch))\b", _I)),
    ("upper", re.compile(_LEAD + r"(?:in\s+(?:all\s+)?(?:capitals|capital\s+letters|caps|upper[- ]?case|"
                         r"block\s+letters)|all\s+caps|all\s+upper[- ]?case)\b", _I)),
    ("lower", re.compile(_LEAD + r"(?:in\s+(?:all\s+)?lower[- ]?case(?:\s+letters)?|all\s+lower[- ]?case)\b", _I)),
    ("tone", re.compile(r"(?:(?:in|with|using|use|adopt|take)\s+)?(?:an?\s+)?(playful|fun|cheerful|whimsical|"
                        r"light-hearted|formal|professional|academic)\s+(?:tone|voice|style|register|"
                        r"manner|way)\b", _I)),
    ("tone", re.compile(r"\b(?:be|sound|keep\s+it|make\s+it)\s+(playful|cheerful|whimsical|formal)\b", _I)),
    ("tone", re.compile(r"\btone\s*[:=]?\s*[\"'“]?(playful|fun|cheerful|formal|professional)[\"'”]?", _I)),
    ("tone", re.compile(r"\b(playfully|formally)\b", _I)),
    ("sentences", re.compile(r"(?:in|with|using|as)\s+" + _AT_MOST + _NUM + r"\s+sentences?\b", _I)),
    ("sentences", re.compile(r"\b(?:a\s+)?(one)[- ]sentence\s+(?:answer|reply|summary|response)\b", _I)),
    ("words", re.compile(r"(?:(?:in|with|using)\s+)?(under|fewer than|less than|at most|no more than|"
                         r"within|max(?:imum)?(?: of)?|in)\s+(\d{1,4})\s+words\b", _I)),
    ("words", re.compile(r"(?:in\s+)?(\d{1,4})\s+words\s+or\s+(?:less|fewer)\b", _I)),
    ("points", re.compile(r"(?:(?:in|with|as|using|give|list|into)\s+)?" + _AT_MOST + _NUM +
                          r"\s+(?:(bullet|numbered|key|main|short)\s+)?(bullet\s+points|points|bullets|items|"
                          r"questions|sub-questions|reasons|steps|tips|ideas)\b", _I)),
    ("list", re.compile(r"(?:(?:in|as|use|using)\s+)(?:an?\s+)?(bullet\s+points|bullets|bulleted\s+list|"
                        r"numbered\s+list)\b", _I)),
)
_RANGE_BEFORE = re.compile(r"(?:\d+|\b(?:one|two|three|four|five|six|seven|eight|nine|ten))\s*(?:to|-|–|or)\s*$"
                           r"|\bbetween\s+\S+\s+and\s+$", _I)
_CONNECTOR = re.compile(r"to|-|–|or", _I)
_NUMBER_WORD = re.compile(r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten)", _I)
_AND = re.compile(r"and", _I)
_BETWEEN = re.compile(r"\bbetween", _I)


def _space_start(line: str, end: int) -> int:
    """Where the run of whitespace that ends at `end` starts (`end` if there is none)."""
    i = end
    while i > 0 and line[i - 1].isspace():
        i -= 1
    return i


def _range_before(line: str, end: int) -> bool:
    """Whether `_RANGE_BEFORE.search(line[:end])` would match, reading back only over the few
    runs of text a match can span: the search scans all of line[:end], and it runs once per
    "N points" of a line, which made a long line of them quadratic (issue 38). Every piece is
    checked with a regex (`fullmatch` at a position sees the character before it, for `\b`),
    so the case-insensitive matching is the regex engine's own; tests/test_sim_limits.py
    compares the two."""
    t = _space_start(line, end)
    for k in (1, 2):  # "-" or "–"; "to" or "or"
        c = t - k
        if c >= 0 and _CONNECTOR.fullmatch(line, c, t):
            d = _space_start(line, c)
            if d > 0 and line[d - 1].isdecimal():  # `\d` is a Unicode decimal digit
                return True
            if any(d >= n and _NUMBER_WORD.fullmatch(line, d - n, d) for n in (3, 4, 5)):
                return True
    if 3 <= t < end and _AND.fullmatch(line, t - 3, t):  # "between X and " (a space after it)
        d = _space_start(line, t - 3)
        f = d
        while f > 0 and not line[f - 1].isspace():
            f -= 1
        if 0 < f < d < t - 3:
            g = _space_start(line, f)
            return 7 <= g < f and _BETWEEN.fullmatch(line, g - 7, g) is not None
    return False


_TONES = {"playful": "playful", "fun": "playful", "cheerful": "playful", "whimsical": "playful",
          "light-hearted": "playful", "playfully": "playful", "formal": "formal",
          "professional": "formal", "academic": "formal", "formally": "formal"}


@dataclasses.dataclass(frozen=True)
class Style:
    points: Optional[int] = None      # at most this many list items
    marker: Optional[str] = None      # "bullet" or "numbered": how list items are written
    case: Optional[str] = None        # "upper" or "lower"
    tone: Optional[str] = None        # "playful" or "formal"
    sentences: Optional[int] = None   # at most this many sentences
    max_words: Optional[int] = None   # at most this many words
    language: Optional[str] = None    # "fr", "es", "de" (English: None)


def _number(word: str) -> int:
    w = word.lower()
    return int(w) if w.isdigit() else _NUMBERS[w]


def _scan(line: str, found: dict) -> str:
    """Record the instructions of one line in `found`; return the line without them."""
    if not line.strip():
        return line  # every pattern needs a word: a blank line has no instruction
    for kind, pattern in _PATTERNS:
        cut = []  # the matches cut out, last first; the line is rebuilt once (linear time)
        for m in reversed(list(pattern.finditer(line))):
            if kind in ("points", "sentences") and _range_before(line, m.start()):
                continue  # "3 to 5 points" leaves the count to the model, as before
            groups = [g for g in m.groups() if g]
            if kind == "language":
                found["language"] = languages.LANGUAGES[groups[-1].lower()]
            elif kind in ("upper", "lower"):
                found["case"] = kind
            elif kind == "tone":
                found["tone"] = _TONES[groups[-1].lower()]
            elif kind == "sentences":
                found["sentences"] = _number(groups[-1])
            elif kind == "words":
                n = int(next(g for g in groups if g.isdigit()))
                strict = any(g.lower() in ("under", "fewer than", "less than") for g in groups)
                found["max_words"] = max(1, n - 1 if strict else n)
            elif kind == "points":
                num = next(g for g in groups if g.isdigit() or g.lower() in _NUMBERS)
                found["points"] = _number(num)
                if "bullet" in m.group(0).lower():
                    found["marker"] = "bullet"
                elif "numbered" in m.group(0).lower():
                    found["marker"] = "numbered"
            elif kind == "list":
                found["marker"] = "numbered" if "numbered" in groups[-1].lower() else "bullet"
            cut.append(m)
        if cut:
            pieces, pos = [], 0
            for m in reversed(cut):
                pieces.append(line[pos:m.start()])
                pos = m.end()
            pieces.append(line[pos:])
            # the same as cutting each match out, last first, leaving a space in its place
            line = " ".join(pieces)
    return line


def _tidy(line: str) -> str:
    # (?<!\s): a run of spaces is tried once, from its start, not from each of its spaces
    line = re.sub(r"(?<!\s)\s+([,.;:!?])", r"\1", line)
    line = re.sub(r"([,;:])(?:\s*[,;:])+", r"\1", line)
    line = re.sub(r"[,;:]\s*([.!?])", r"\1", line)
    line = re.sub(r"\b(?:and|or)\s*([.!?]|$)", r"\1", line)
    line = re.sub(r"\s{2,}", " ", line).strip()
    line = re.sub(r"^[,;:.\s]+", "", line)
    return re.sub(r"[,;:]\s*$", "", line).strip()


def read_style(messages: list) -> tuple:
    """(Style or None, the messages with the instruction phrases cut out)."""
    found: dict = {}
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    last_user = users[-1] if users else None
    out = []
    for i, m in enumerate(messages):
        if m["role"] in ("system", "developer"):
            flags = [True] * len(m["content"].splitlines())
        elif i == last_user:
            flags = instruction_lines(m["content"])
        else:
            out.append(m)
            continue
        lines = m["content"].splitlines()
        new_lines = []
        for line, is_instruction in zip(lines, flags):
            if not is_instruction:
                new_lines.append(line)
                continue
            before = len(found)
            cleaned = _scan(line, found)
            if cleaned != line or len(found) != before:
                cleaned = _tidy(cleaned)
                if not cleaned:
                    continue  # the line was only an instruction ("Answer in French.")
            new_lines.append(cleaned)
        out.append({**m, "content": "\n".join(new_lines)})
    if not found:
        return None, messages
    if found.get("language") == "en":
        found.pop("language")  # "in English" is followed by doing nothing, but is cut out all the same
    return (Style(**found) if found else None), out


# ---------------------------------------------------------------------------------------------
# Applying a style to an answer

_ITEM = re.compile(r"^(\s*)(\d+[.)]|[-*•])\s+(.*)$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=:)\s+(?=[A-Z¿¡\"“])")
_CITE = re.compile(r"(\[doc:[^\]\s]+\])")


def _marker(style: Style, old: str, i: int) -> str:
    kind = style.marker or ("numbered" if old[:1].isdigit() else "bullet")
    return f"{i}. " if kind == "numbered" else "- "


def _is_heading(line: str) -> bool:
    s = line.strip()
    return bool(s) and (s.endswith(":") or s.startswith("#") or s[-1] not in ".!?\"”»")


def _points(text: str, style: Style) -> str:
    lines = text.split("\n")
    if any(_ITEM.match(ln) for ln in lines):
        out, count, in_block, keep_all, heading = [], 0, False, False, ""
        for ln in lines:
            m = _ITEM.match(ln)
            if not m:
                in_block = False
                if ln.strip():
                    heading = ln
                out.append(ln)
                continue
            if not in_block:
                in_block, count = True, 0
                keep_all = "source" in heading.lower()  # the list of sources is not "points"
            count += 1
            if keep_all:
                out.append(ln)
            elif style.points is None or count <= style.points:
                out.append(m.group(1) + _marker(style, m.group(2), count) + m.group(3))
        return "\n".join(out)
    # Prose: its sentences become the points, under the heading if it has one.
    blocks = [b for b in text.split("\n") if b.strip()]
    head = blocks.pop(0) if len(blocks) > 1 and _is_heading(blocks[0]) else None
    items = [s for s in _SENTENCE_END.split(" ".join(blocks)) if s.strip()]
    if items and items[0].endswith(":") and len(items) > 1 and head is None:
        head = items.pop(0)
    if style.points is not None:
        items = items[:style.points]
    body = [_marker(style, "-", i) + s for i, s in enumerate(items, 1)]
    return "\n".join(([head, ""] if head else []) + body)


_CONTRACT = ((r"\bit is\b", "it's"), (r"\bdo not\b", "don't"), (r"\bcannot\b", "can't"),
             (r"\bwill not\b", "won't"), (r"\bis not\b", "isn't"), (r"\bare not\b", "aren't"),
             (r"\bwhat is\b", "what's"), (r"\blet us\b", "let's"), (r"\bthere is\b", "there's"))
_EXPAND = ((r"\bit's\b", "it is"), (r"\bdon't\b", "do not"), (r"\bcan't\b", "cannot"),
           (r"\bwon't\b", "will not"), (r"\bisn't\b", "is not"), (r"\baren't\b", "are not"),
           (r"\bwhat's\b", "what is"), (r"\blet's\b", "let us"), (r"\bthere's\b", "there is"))


def _swap_words(text: str, pairs) -> str:
    for pat, rep in pairs:
        text = re.sub(pat, lambda m, r=rep: r[:1].upper() + r[1:] if m.group(0)[:1].isupper() else r,
                      text, flags=re.I)
    return text


_HEAD_PREFIX = re.compile(r"^(?:research plan:|plan for researching|research questions on|analysis of|"
                          r"analysis:|what the sources say about|report:|briefing on|revised \w+:|"
                          r"critique of|review of)\s*", re.I)


def _tone(text: str, tone: str, ch, english: bool) -> str:
    lines = text.split("\n")
    multiline = len([ln for ln in lines if ln.strip()]) > 1
    has_head = multiline and _is_heading(lines[0]) and not _ITEM.match(lines[0])
    if tone == "playful":
        if has_head:
            subject = _HEAD_PREFIX.sub("", lines[0].strip().lstrip("# ")).rstrip(":") or lines[0]
            head = [ch.pick(["Let's go exploring: {}!", "Adventure time: {}!"]).format(subject)]
        else:
            head = [ch.pick(["Ooh, what a fun one!", "Great question, let's dive in!"])]
        closing = ch.pick(["Happy digging!", "Onwards, fellow explorers!"])
        pairs = _CONTRACT
    else:
        head = lines[:1] if has_head else []
        head.append(ch.pick(["Please find below a considered response.",
                             "The following is submitted for your consideration."]))
        closing = ch.pick(["Respectfully submitted.", "I remain at your disposal for any further questions."])
        pairs = _EXPAND
    body = lines[1:] if has_head else lines
    while body and not body[0].strip():
        body = body[1:]
    if multiline:
        text = "\n\n".join(head) + "\n\n" + "\n".join(body) + "\n\n" + closing
    else:
        text = " ".join(head + [ln for ln in body if ln.strip()] + [closing])
    return _swap_words(text, pairs) if english else text


def _cut_words(text: str, limit: int) -> str:
    """At most `limit` words: whole sentences while they fit, line by line; a sentence is cut
    only when not even the first one fits."""
    out, used = [], 0
    for ln in text.split("\n"):
        indent = ln[:len(ln) - len(ln.lstrip())]
        kept = []
        for sentence in _SENTENCE_END.split(ln.strip()) if ln.strip() else []:
            n = len(sentence.split())
            if used + n > limit:
                break
            kept.append(sentence)
            used += n
        else:
            out.append(indent + " ".join(kept) if kept else ln)
            continue
        if kept:
            out.append(indent + " ".join(kept))
        elif not any(x.strip() for x in out):
            words = ln.split()[:limit]
            cut = " ".join(words).rstrip(",;:—-")
            out.append(indent + (cut if cut[-1:] in ".!?" else cut + "."))
        break
    return "\n".join(out).rstrip()


def _length(text: str, style: Style) -> str:
    if style.sentences is not None:
        lines = [ln for ln in text.split("\n") if ln.strip()]
        if len(lines) > 1 and _is_heading(lines[0]):
            lines = lines[1:]
        body = []
        for ln in lines:
            if ln.lstrip().startswith("#"):
                continue
            m = _ITEM.match(ln)
            body.append(m.group(3) if m else ln.strip())
        parts = [s for s in _SENTENCE_END.split(" ".join(body)) if s.strip()]
        whole: list = []
        for part in parts:  # a lead-in ("On solar panels:") belongs to the sentence after it
            if whole and whole[-1].rstrip().endswith(":"):
                whole[-1] += " " + part
            else:
                whole.append(part)
        text = " ".join(whole[:style.sentences])
    if style.max_words is not None:
        text = _cut_words(text, style.max_words)
    return text


def _case(text: str, case: str) -> str:
    # Citations are ids, matched exactly by the pipeline's verify step: never re-cased.
    change = str.upper if case == "upper" else str.lower
    return "".join(p if _CITE.fullmatch(p) else change(p) for p in _CITE.split(text))


def apply(text: str, style: Style, ch) -> str:
    """The answer reshaped to follow `style`: points, then tone, language, length, case."""
    if style.points is not None or style.marker is not None:
        text = _points(text, style)
    if style.tone:
        text = _tone(text, style.tone, ch, english=style.language is None)
    if style.language:
        text = languages.translate(text, style.language)
    if style.sentences is not None or style.max_words is not None:
        text = _length(text, style)
    if style.case:
        text = _case(text, style.case)
    return text
