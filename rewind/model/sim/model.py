"""The offline model itself, with no wire format: `complete(model, messages, ...)` -> `Completion`s.

Owns the pipeline from a request to its answers: normalise the messages, read the prompt and
its style instructions, pick the task's writer, draw its choices, apply the style, cut to
`max_tokens`, count the tokens. At temperature 0 the
full text is a pure function of (model, messages); `max_tokens` cuts it to a prefix, so a
truncated answer is always the start of the untruncated one.

The cost is linear in the input: its identity (sha256 of the canonical request) and its prompt
tokens are computed over all of it, streaming, and the writers read only
`prompt.reading_window` of it (at most `prompt.READ_LIMIT` characters).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Optional

from .prompt import detect_task, read_prompt, reading_window
from .sampling import Chooser, canonical_hash, normalize_messages, sample_key_of
from .style import apply, read_style
from .tokens import count_prompt_tokens, count_tokens, truncate
from .writers import WRITERS

MODELS = ("sim-small", "sim-large")
DEFAULT_MODEL = "sim-small"


@dataclasses.dataclass
class Completion:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    task: str
    id: str
    chars_read: int = 0  # characters of the prompt's content the writers read (<= READ_LIMIT)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def complete(
    model: str,
    messages: Any,
    *,
    temperature: float = 0.0,
    seed: Optional[int] = None,
    max_tokens: Optional[int] = None,
    n: int = 1,
) -> list:
    """A list of n `Completion`s for these messages (a ValueError for malformed ones)."""
    msgs = normalize_messages(messages)
    request_hash = canonical_hash(model, msgs)
    digest = request_hash.digest()
    # The writers read the prompt without its style instructions ("in French" is no topic);
    # the request's identity (digest, token count) stays the messages as sent, all of them.
    window = reading_window(msgs)
    chars_read = sum(len(m["content"]) for m in window)
    style, readable = read_style(window)
    prompt = read_prompt(readable)
    prompt.style = style
    task = detect_task(prompt)
    prompt_tokens = count_prompt_tokens(msgs)
    out = []
    for index in range(n):
        key = sample_key_of(request_hash, seed, index) if temperature > 0 else None
        chooser = Chooser(digest, key, float(temperature))
        text = WRITERS[task](prompt, chooser, model)
        if style is not None:
            text = apply(text, style, chooser)
        finish = "stop"
        if max_tokens is not None:
            text, completion_tokens, cut = truncate(text, int(max_tokens))
            finish = "length" if cut else "stop"
        else:
            completion_tokens = count_tokens(text)
        ident = hashlib.sha256(key or digest).hexdigest()[:29]
        out.append(Completion(text, finish, prompt_tokens, completion_tokens, task, "chatcmpl-" + ident,
                              chars_read))
    return out
