"""What a model request and its reply say, per provider, read from the HTTP wire.

Every SDK meets the network through an httpx client (`rewind.model.http` hooks it), so the
request and reply are read here from what went over the wire, not from any SDK's objects:

    openai      chat completions, Responses, embeddings (also any OpenAI-compatible server,
                litellm's and langchain's OpenAI paths, raw `httpx.post` to `/chat/completions`)
    anthropic   Messages (`/v1/messages`): content blocks, tool use, cache read/write tokens
    google      Gemini `generateContent` and `streamGenerateContent` (SSE or a JSON array)
    generic     any other POST whose JSON body names a `model` and its input: recorded, its
                usage read where the reply reports one, else estimated and said so

`identify(method, path, body)` names the api of a request (None: not a model call);
`request_of(api, body)` is what a call is keyed and recorded by; `read_reply(api, body,
content, streamed)` is what came back: text, tool calls, usage. A reply that does not parse
still records the call, with what could be read.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from . import anthropic, generic, google, openai

_PROVIDERS = (openai, anthropic, google)


@dataclasses.dataclass
class Reply:
    """What a model reply says, whatever its provider."""

    text: str = ""
    tool_calls: list = dataclasses.field(default_factory=list)  # [{name, arguments}]
    prompt_tokens: Optional[int] = None       # None: the server reported no usage
    completion_tokens: Optional[int] = None
    usage: Optional[dict] = None              # the usage object as the server reported it
    stop_reason: Optional[str] = None


def identify(method: str, path: str, body: Any) -> Optional[str]:
    """The api of a request (`chat.completions`, `anthropic.messages`, ...), or None."""
    if str(method).upper() != "POST" or not isinstance(body, dict):
        return None
    for provider in _PROVIDERS:
        api = provider.identify(path, body)
        if api is not None:
            return api
    return generic.identify(path, body)


def _provider(api: str) -> Any:
    for provider in _PROVIDERS:
        if api in provider.APIS:
            return provider
    return generic


def request_of(api: str, body: dict) -> dict:
    """{api, model, messages, params}: what a call is keyed and recorded by."""
    return _provider(api).request_of(api, body)


def read_reply(api: str, body: dict, content: bytes, streamed: bool) -> Reply:
    """What the reply `content` (a JSON body, or a stream's events) says."""
    try:
        got = _provider(api).read_reply(api, body, content, streamed)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
        return Reply()
    return Reply(**got)


def is_stream_request(api: str, body: dict) -> bool:
    """Whether this request asked for a stream (the shape a served reply must have)."""
    return _provider(api).is_stream(api, body)


# what the last frame of a stream says, per api: an SDK may stop reading (and close) there
_ENDS = {"chat.completions": (b"data: [DONE]",),
         "responses": (b'"response.completed"', b'"response.incomplete"', b'"response.failed"'),
         "anthropic.messages": (b"message_stop",)}


def stream_ended(api: str, content: bytes) -> bool:
    """Whether a stream's bytes so far hold its final frame (it is whole, even if closed now)."""
    last = content.replace(b"\r\n", b"\n").rstrip().rsplit(b"\n\n", 1)[-1]
    return any(marker in last for marker in _ENDS.get(api, ()))
