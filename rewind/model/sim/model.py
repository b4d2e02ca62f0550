"""The offline model itself, with no wire format: `complete(model, messages, ...)` -> `Completion`s.

Owns the pipeline from a request to its answers: normalise the messages, read the prompt and
its style instructions, pick the task's writer, draw its choices, apply the style, cut to
`max_tokens`, count the tokens. At temperature 0 the
full text is a pure function of (model, messages); `max_tokens` cuts it to a prefix, so a
truncated answer is always the start of the untruncated one.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Optional

from .prompt import detect_task, read_prompt
from .sampling import Chooser, canonical_request, normalize_messages, sample_key
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
    canonical = canonical_request(model, msgs)
    digest = hashlib.sha256(canonical).digest()
    # The writers read the prompt without its style instructions ("in French" is no topic);
    # the request's identity (digest, token count) stays the messages as sent.
    style, readable = read_style(msgs)
    prompt = read_prompt(readable)
    prompt.style = style
    task = detect_task(prompt)
    prompt_tokens = count_prompt_tokens(msgs)
    out = []
    for index in range(n):
        key = sample_key(canonical, seed, index) if temperature > 0 else None
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
        out.append(Completion(text, finish, prompt_tokens, completion_tokens, task, "chatcmpl-" + ident))
    return out
