"""A text diff people can read: the changed lines of two texts with the changed *words* marked,
a long unchanged stretch inside a changed line cut to a little context around the change, and
the whole drawn as wrapping HTML (`<del>` / `<ins>`), so an edit in the middle of a 3,000-character
prompt is on screen instead of past the right edge of a code block. Pure (no streamlit);
the pages draw `to_html` with st.html. Every piece of text is HTML-escaped here: model output is
shown, never parsed.
"""

from __future__ import annotations

import difflib
import html
import re

SAME, CHANGED, ELIDED = "same", "changed", "elided"
GAP = " … "
# characters of unchanged text kept on each side of a change inside a changed line
KEEP = 120
CONTEXT_LINES = 1

# words, runs of whitespace and single punctuation marks: a change is marked word by word
_TOKEN = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)


def _tokens(text: str) -> list:
    return _TOKEN.findall(text)


def _merge(parts: list) -> list:
    """Adjacent parts with the same tag joined; whitespace alone between two changes joins them
    (`b c` is one mark, not `b`, ` `, `c`)."""
    out: list = []
    for i, (tag, text) in enumerate(parts):
        if (tag == SAME and not text.strip() and 0 < i < len(parts) - 1
                and parts[i - 1][0] == CHANGED and parts[i + 1][0] == CHANGED):
            tag = CHANGED
        if out and out[-1][0] == tag:
            out[-1] = (tag, out[-1][1] + text)
        else:
            out.append((tag, text))
    return out


def _elide(parts: list, keep: int = KEEP) -> list:
    """Unchanged text longer than twice `keep` cut to `keep` characters next to each change."""
    out: list = []
    for i, (tag, text) in enumerate(parts):
        if tag != SAME or len(text) <= 2 * keep + len(GAP):
            out.append((tag, text))
            continue
        first, last = i == 0, i == len(parts) - 1
        if not first:
            out.append((SAME, text[:keep]))
        out.append((ELIDED, GAP))
        if not last:
            out.append((SAME, text[-keep:]))
    return out


# a changed passage longer than this shows its start and end (a pasted page is not a diff)
CHANGED_CHARS = 600
# past this many tokens between the common start and end, the middle is marked changed whole
# instead of matched word by word (SequenceMatcher is quadratic in the worst case)
MAX_TOKENS = 4000
# characters of text the whole diff shows; the rest is said, not drawn
SHOWN_CHARS = 20_000


def _common_ends(a: str, b: str) -> tuple:
    """(length of the common start, of the common end) of two strings, snapped back to a token
    boundary so a word is never split, and never overlapping."""
    n = min(len(a), len(b))
    start = 0
    while start < n and a[start] == b[start]:
        start += 1
    while start > 0 and start < n and (a[start - 1].isalnum() or a[start - 1] == "_"):
        start -= 1  # inside a word: back to its first character
    end = 0
    while end < n - start and a[len(a) - 1 - end] == b[len(b) - 1 - end]:
        end += 1
    while end > 0 and end < n - start and (a[len(a) - end].isalnum() or a[len(a) - end] == "_"):
        end -= 1
    return start, end


def _cut_changed(parts: list) -> list:
    out = []
    for tag, text in parts:
        if tag == CHANGED and len(text) > CHANGED_CHARS:
            head, tail = text[: CHANGED_CHARS // 2], text[-CHANGED_CHARS // 4:]
            out += [(CHANGED, head), (ELIDED, f" … {len(text) - len(head) - len(tail):,} more characters … "),
                    (CHANGED, tail)]
        else:
            out.append((tag, text))
    return out


def word_parts(before: str, after: str) -> tuple:
    """(parts of `before`, parts of `after`): [(tag, text)] with tag SAME, CHANGED or ELIDED.
    The common start and end are set aside first, so a one-word edit in a 300,000-character
    line costs what the word costs."""
    start, end = _common_ends(before, after)
    a, b = _tokens(before[start:len(before) - end]), _tokens(after[start:len(after) - end])
    old, new = [(SAME, before[:start])], [(SAME, after[:start])]
    if len(a) + len(b) > MAX_TOKENS:
        opcodes = [("replace", 0, len(a), 0, len(b))]
    else:
        opcodes = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    for op, i1, i2, j1, j2 in opcodes:
        if op == "equal":
            text = "".join(a[i1:i2])
            old.append((SAME, text))
            new.append((SAME, text))
            continue
        if i2 > i1:
            old.append((CHANGED, "".join(a[i1:i2])))
        if j2 > j1:
            new.append((CHANGED, "".join(b[j1:j2])))
    old.append((SAME, before[len(before) - end:]))
    new.append((SAME, after[len(after) - end:]))
    clean = [[p for p in side if p[1]] for side in (old, new)]
    return tuple(_cut_changed(_elide(_merge(side))) for side in clean)


MAX_LINES = 4000  # changed lines matched one by one; past this the middle is one replaced block


def _line_opcodes(a: list, b: list) -> list:
    """difflib opcodes over two lists of lines, the common first and last lines set aside
    first (linear), the middle matched by SequenceMatcher only while it is small enough."""
    n = min(len(a), len(b))
    p = 0
    while p < n and a[p] == b[p]:
        p += 1
    q = 0
    while q < n - p and a[len(a) - 1 - q] == b[len(b) - 1 - q]:
        q += 1
    mid_a, mid_b = a[p:len(a) - q], b[p:len(b) - q]
    if not mid_a and not mid_b:
        middle = []
    elif len(mid_a) + len(mid_b) > MAX_LINES:
        middle = [("replace", 0, len(mid_a), 0, len(mid_b))]
    else:
        middle = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False).get_opcodes()
    ops = [("equal", 0, p, 0, p)] if p else []
    ops += [(op, i1 + p, i2 + p, j1 + p, j2 + p) for op, i1, i2, j1, j2 in middle]
    if q:
        ops.append(("equal", len(a) - q, len(a), len(b) - q, len(b)))
    return ops


def _grouped(codes: list, n: int) -> list:
    """difflib's get_grouped_opcodes over given opcodes: the changes with `n` lines of context,
    one group per hunk."""
    if not codes or all(op == "equal" for op, *_ in codes):
        return []
    codes = list(codes)
    if codes[0][0] == "equal":
        _, i1, i2, j1, j2 = codes[0]
        codes[0] = "equal", max(i1, i2 - n), i2, max(j1, j2 - n), j2
    if codes[-1][0] == "equal":
        _, i1, i2, j1, j2 = codes[-1]
        codes[-1] = "equal", i1, min(i2, i1 + n), j1, min(j2, j1 + n)
    groups, group = [], []
    for op, i1, i2, j1, j2 in codes:
        if op == "equal" and i2 - i1 > 2 * n:
            group.append((op, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            groups.append(group)
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((op, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        groups.append(group)
    return groups


def diff_lines(before: str, after: str, context: int = CONTEXT_LINES) -> list:
    """[(kind, parts)]: kind " " (context), "-" (a line of `before`), "+" (a line of `after`) or
    "…" (unchanged lines left out). Paired changed lines mark their changed words; a line only
    one side has is marked whole. [] when the texts are the same."""
    a, b = before.splitlines(), after.splitlines()
    out: list = []
    gap = ("…", [(ELIDED, "")])
    shown_to = 0  # lines of `before` drawn or said to be left out so far
    for group in _grouped(_line_opcodes(a, b), context):
        if group[0][1] > shown_to:
            out.append(gap)
        for op, i1, i2, j1, j2 in group:
            if op == "equal":
                out += [(" ", _elide([(SAME, line)])) for line in a[i1:i2]]
                continue
            olds, news = a[i1:i2], b[j1:j2]
            minus, plus = [], []
            for k in range(max(len(olds), len(news))):
                if k < len(olds) and k < len(news):
                    o, n = word_parts(olds[k], news[k])
                    minus.append(("-", o))
                    plus.append(("+", n))
                elif k < len(olds):
                    minus.append(("-", _cut_changed([(CHANGED, olds[k])])))
                else:
                    plus.append(("+", _cut_changed([(CHANGED, news[k])])))
            out += minus + plus
        shown_to = group[-1][2]
    if out and shown_to < len(a):
        out.append(gap)
    return _capped(out)


def _capped(lines: list, budget: int = SHOWN_CHARS) -> list:
    """The lines up to `budget` characters of text, then one line saying how many were left."""
    for i, (_, parts) in enumerate(lines):
        budget -= sum(len(t) for _, t in parts)
        if budget < 0 and i + 1 < len(lines):
            return lines[: i + 1] + [("…", [(ELIDED, f"{len(lines) - i - 1:,} more changed or context lines not shown")])]
    return lines


def changed_count(lines: list) -> int:
    """How many marked passages the new side has (insertions and replacements)."""
    return sum(1 for kind, parts in lines if kind == "+" for tag, _ in parts if tag == CHANGED)


_LINE_STYLE = {"-": "background:#fdecea", "+": "background:#e8f5e9", " ": "", "…": "color:#78909c"}
_MARK = {"-": ("del", "background:#f5b7b1;text-decoration:line-through;border-radius:2px"),
         "+": ("ins", "background:#a5d6a7;text-decoration:none;border-radius:2px")}


def to_html(lines: list, title: str = "") -> str:
    """The lines as one wrapping block: `-` lines on red with the removed words in `<del>`, `+`
    lines on green with the new words in `<ins>`; every text escaped."""
    rows = []
    for kind, parts in lines:
        if kind == "…":
            said = html.escape("".join(t for _, t in parts))
            rows.append(f'<div style="{_LINE_STYLE[kind]}">⋯{" " + said if said else ""}</div>')
            continue
        body = []
        for tag, text in parts:
            text = html.escape(text, quote=True)
            if tag == CHANGED and kind in _MARK:
                name, style = _MARK[kind]
                body.append(f'<{name} style="{style}">{text}</{name}>')
            elif tag == ELIDED:
                body.append(f'<span style="color:#78909c">{text}</span>')
            else:
                body.append(text)
        sign = {"-": "−", "+": "+", " ": " "}[kind]
        rows.append(f'<div style="{_LINE_STYLE[kind]};padding-left:1.4em;text-indent:-1.4em">'
                    f'<span style="color:#78909c;user-select:none">{sign} </span>{"".join(body) or " "}</div>')
    head = (f'<div style="color:#607d8b;font-size:0.8rem;margin-bottom:4px">{html.escape(title)}</div>'
            if title else "")
    return (f'<div class="rw-textdiff">{head}<div style="font-family:\'Source Code Pro\',monospace;'
            'font-size:0.82rem;line-height:1.55;white-space:pre-wrap;overflow-wrap:anywhere;'
            'background:#f8f9fb;border-radius:6px;padding:8px 12px">' + "".join(rows) + "</div></div>")
