"""`rewind.model.sim`: the offline model, an OpenAI-compatible chat model that runs with no network.

One concept per module, imported in this order (each only imports modules above it):

    controls   injected errors, added latency, request counters (the runtime switches)
    tokens     o200k token counts, linear-time on any text; `warm` loads the tokenizer
    sampling   the canonical request and the pseudo-random draws (temperature, seed)
    prompt     reading a prompt: sections, sources, task, topic, keywords, sentences; the
               window the writers read (at most READ_LIMIT = 128 Ki characters)
    languages  the phrasebook for replies in French, Spanish and German
    style      instructions in a prompt (points, case, tone, length, language) and applying them
    writers    one writer per task (plan, critique, revise, analyze, compose, generic)
    model      `complete(model, messages, ...)`: request -> `Completion`s
    envelope   `SimResponse`, JSON bodies and OpenAI error objects
    responses  the Responses API (`POST /v1/responses`, streaming events)
    wire       the routes and chat completions: `dispatch` for any transport, `handle_request`
               for httpx2; bodies above MAX_BODY (32 MiB) are a 413 error object

This package owns no transport: `rewind.llm` mounts `handle_request` under the real openai
client, `rewind.model.server` serves `dispatch` over HTTP. `rewind.simulator` is the old name of
this package and re-exports it.

Cost is linear in the input (issue 38): the request is hashed and its prompt tokens counted over
all of it, streaming, while the writers read at most `prompt.READ_LIMIT` characters of it.
"""

from __future__ import annotations

from .controls import inject_errors, latency_ms, pending_errors, reset, set_latency, stats
from .tokens import count_prompt_tokens, count_tokens, encode, truncate, warm
from .sampling import canonical_request, normalize_messages
from .prompt import (
    Prompt, Source, detect_task, frequent_keywords, keywords, phrases, quote_of, read_prompt,
    sentences, topic_of,
)
from .model import DEFAULT_MODEL, MODELS, Completion, complete
from .wire import MAX_BODY, OWNER, SYSTEM_FINGERPRINT, SimResponse, dispatch, handle_request

__all__ = [
    "MODELS", "DEFAULT_MODEL", "SYSTEM_FINGERPRINT", "OWNER",
    "inject_errors", "pending_errors", "set_latency", "latency_ms", "stats", "reset",
    "warm", "encode", "count_tokens", "count_prompt_tokens", "truncate",
    "normalize_messages", "canonical_request",
    "Source", "Prompt", "read_prompt", "detect_task", "keywords", "phrases",
    "frequent_keywords", "topic_of", "sentences", "quote_of",
    "Completion", "complete", "SimResponse", "dispatch", "handle_request", "MAX_BODY",
]
