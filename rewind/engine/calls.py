"""The model-call cache: a node that re-executes pays only for the model calls that changed.

When a node runs again (an unrelated read changed, its code changed elsewhere), each model call
whose canonical request (`model.calls.call_key`: api, model, messages, params) equals one made
before is answered from this cache instead of the network, through the same hook on openai's
request path the snapshot replay uses, so the user's own clients are served too. A served call
costs the step no tokens (they are counted as saved). The node's policy holds: a side-effect
node's calls are never replayed, a time-bound node's only while younger than its ttl, and
`use_cache=False`, an audit or a noise sample always goes to the model.

An entry keeps the call's raw reply (`raw`), so a served call is the recorded reply wire for
wire: tool calls, stop reasons, ids, usage. An entry written before raw replies were kept
serves its text and usage.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from ..model.calls import active_source, call_key, request_of
from ..keys import combine
from .context import cache_key

TOOL = "rewind:model-call"  # its entries live in the tool cache under this name


class ModelCallCache:
    """A call source (see `rewind.model.calls`) backed by the store's tool cache."""

    def __init__(self, store: Any, owner: Optional[str], ttl: Optional[float] = None,
                 endpoint: Any = ""):
        self.store, self.owner, self.ttl = store, owner, ttl
        self._endpoint = endpoint  # a string, or a function asked at the first model call
        self.served: list = []

    @property
    def endpoint(self) -> str:
        if callable(self._endpoint):  # most steps make no model call: not resolved for them
            self._endpoint = self._endpoint()
        return self._endpoint

    def _key(self, api: str, model: str, messages: Any, params: dict) -> str:
        # the endpoint (provider and base URL) is part of the request: another one may answer
        # the same request differently
        return cache_key(self.owner, combine({"endpoint": self.endpoint,
                                              "call": call_key(api, model, messages, params)}))

    def answer(self, api: str, body: dict) -> Optional[dict]:
        request = request_of(api, body)
        key = self._key(api, request["model"], request["messages"], request["params"])
        hit = self.store.tool_cache_get(TOOL, key, self.ttl, time.time())
        if hit is None:
            return None
        call = dict(hit[0])
        self.served.append(call)
        return call

    def remember(self, calls: list) -> None:
        """Keep the answered calls of a step that just executed."""
        for c in calls:
            d = c.to_dict() if hasattr(c, "to_dict") else dict(c)
            # a served call is in the cache already: put again, it would refresh a time-bound
            # entry's age, and keep the reshaped reply of a stream served to a plain request
            if d.get("error") or d.get("response_text") is None or d.get("served"):
                continue
            key = self._key(d.get("api") or "chat.completions", d.get("model") or "",
                            d.get("messages"), d.get("params") or {})
            self.store.tool_cache_put(TOOL, key, {k: d.get(k) for k in (
                "api", "model", "response_text", "prompt_tokens", "completion_tokens", "raw")
                if k != "raw" or d.get(k)}, time.time())

    @property
    def served_tokens(self) -> tuple:
        return (sum(int(c.get("prompt_tokens") or 0) for c in self.served),
                sum(int(c.get("completion_tokens") or 0) for c in self.served))


def for_step(ctx: Any, spec: Any) -> Optional[ModelCallCache]:
    """The cache a visit's model calls may be served from, or None (they all go out)."""
    from ..keys import SIDE_EFFECT, TIME_BOUND

    if (not ctx.use_cache or spec.node in ctx.resample or spec.policy.determinism == SIDE_EFFECT
            or active_source() is not None):
        return None  # a snapshot replay's cassette, if active, answers instead
    from ..model import chat as llm

    ttl = spec.policy.ttl if spec.policy.determinism == TIME_BOUND else None
    return ModelCallCache(ctx.store, ctx.owner, ttl, llm.endpoint_identity)
