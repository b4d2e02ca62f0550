"""Serving a snapshot's model and tool calls to a replay, and recording the ones it lacks.

Owns `Cassette` (the recorded calls of one snapshot, served in recorded order per request),
the record modes (`none`: a call the snapshot lacks fails, naming the request; `new`: it goes
to the configured model and is recorded; `all`: every call goes to the model, as vcrpy's
modes), and `MissingCall`.

Model calls are caught on openai's request path (`rewind.model.calls`, of which a cassette is
a call source), so `rewind.llm.chat` and a user's own `openai.OpenAI(...)` client inside a node
are both served, and `rewind.model.capture` still records the call on the step. Tool calls (`rewind.tool`) are served through the step
meter's `tool_store`, which this class implements (`tool_cache_get` / `tool_cache_put`).

A request's identity is `rewind.model.calls.call_key`. A call keeps its raw reply (`raw`) where
it was recorded with one, and is then served wire for wire (tool calls, stop reasons, ids,
usage); an older snapshot's calls serve their text and usage.
"""

from __future__ import annotations

import contextlib
import difflib
import json
from typing import Any, Iterator, Optional

from ..errors import OperationError
from ..keys import to_canonical
from ..model.calls import NOT_KEYED as _NOT_KEYED, call_key, request_of, serving
from .format import decode_value, encode_value

NONE, NEW, ALL = "none", "new", "all"
RECORD_MODES = (NONE, NEW, ALL)
CALL_FIELDS = ("api", "model", "messages", "params", "response_text", "prompt_tokens",
               "completion_tokens", "raw")


class MissingCall(OperationError):
    """A model or tool call a replay made that the snapshot does not hold (record mode none)."""

    def __init__(self, message: str, *, kind: str, node: str, request: dict):
        super().__init__(message, node=node)
        self.kind, self.request = kind, request


def snapshot_call(call: Any) -> dict:
    """A recorded model call (a `ModelCall` or its dict) as the snapshot keeps it."""
    d = call.to_dict() if hasattr(call, "to_dict") else dict(call)
    # one spelling per number: a call read back from the store has 0 where a live one has 0.0;
    # the raw reply (served again exactly) only where it was kept: older snapshots have none
    return to_canonical({k: d.get(k) for k in CALL_FIELDS if k != "raw" or d.get(k)}, "call")


def request_text(call: dict) -> str:
    """A request as lines a reader can diff: model, params, then each message."""
    lines = [f"api: {call.get('api')}", f"model: {call.get('model')}"]
    for k, v in sorted((call.get("params") or {}).items()):
        if k not in _NOT_KEYED:
            lines.append(f"{k}: {json.dumps(v, ensure_ascii=False)}")
    for m in call.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else m
        role = m.get("role") if isinstance(m, dict) else "?"
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        lines.append(f"[{role}]")
        lines.extend(text.splitlines() or [""])
    return "\n".join(lines)


def request_diff(before: dict, after: dict, context: int = 2) -> str:
    return "\n".join(difflib.unified_diff(
        request_text(before).splitlines(), request_text(after).splitlines(),
        "recorded request", "new request", n=context, lineterm=""))


class Cassette:
    """The calls of one snapshot, served to one replay; what was recorded anew is kept."""

    def __init__(self, steps: list, mode: str = NONE):
        if mode not in RECORD_MODES:
            raise ValueError(f"record mode must be one of {', '.join(RECORD_MODES)}, not {mode!r}")
        self.mode = mode
        self._calls: dict = {}
        self._cursor: dict = {}
        self._tools: dict = {}
        self._by_step: dict = {}
        for s in steps:
            step_calls = [c for c in s.get("calls") or [] if c.get("response_text") is not None]
            self._by_step[(s["node"], s.get("occurrence", 1))] = step_calls
            for c in step_calls:
                key = call_key(c.get("api") or "chat.completions", c.get("model") or "",
                               c.get("messages"), c.get("params") or {})
                self._calls.setdefault(key, []).append(c)
            for t in s.get("tools") or []:
                self._tools.setdefault((t["tool"], t["args_hash"]), t["result"])
        self.node: Optional[str] = None
        self.occurrence = 1
        self.misses: list = []
        self.step_tools: list = []
        self.served_calls = 0

    @contextlib.contextmanager
    def active(self) -> Iterator["Cassette"]:
        with serving(self):
            yield self

    @contextlib.contextmanager
    def step(self, node: str, occurrence: int) -> Iterator[list]:
        """Calls made inside belong to this step; yields the step's tool calls as recorded."""
        self.node, self.occurrence, self.step_tools = node, occurrence, []
        try:
            yield self.step_tools
        finally:
            self.node = None

    # --- model calls ---------------------------------------------------------------------------
    def answer(self, api: str, body: dict) -> Optional[dict]:
        """The recorded call for this request, None to make it live, or `MissingCall`."""
        request = request_of(api, body)
        if self.mode == ALL:
            return None
        key = call_key(api, request["model"], request["messages"], request["params"])
        got = self._calls.get(key)
        if got:
            i = self._cursor.get(key, 0)
            self._cursor[key] = i + 1
            self.served_calls += 1
            return got[min(i, len(got) - 1)]  # repeats past the recording get its last answer
        if self.mode == NEW:
            return None
        raise self._miss("model", request, self._missing_model_message(request))

    def _missing_model_message(self, request: dict) -> str:
        msg = (f"node {self.node!r}: model call not in the snapshot: {request['api']} "
               f"model={request['model']!r}")
        nearest = self._nearest(request)
        if nearest is not None:
            msg += "\n" + request_diff(nearest, request)
        else:
            msg += "\n" + request_text(request)
        return msg + ("\nrecord it through the configured model with `pytest "
                      "--rewind-record=new` (rewrites the snapshot)")

    def _nearest(self, request: dict) -> Optional[dict]:
        """The recorded call this request most likely replaces: this step's, by similarity."""
        pool = self._by_step.get((self.node, self.occurrence)) or [
            c for (n, _), cs in self._by_step.items() if n == self.node for c in cs]
        if not pool:
            return None
        text = request_text(request)
        return max(pool, key=lambda c: difflib.SequenceMatcher(
            None, request_text(c), text, autojunk=False).ratio())

    def _miss(self, kind: str, request: dict, message: str) -> MissingCall:
        err = MissingCall(message, kind=kind, node=self.node or "?", request=request)
        self.misses.append(err)
        return err

    # --- tool calls (the step meter's tool_store) ---------------------------------------------
    def tool_cache_get(self, tool: str, args_hash: str, ttl: Any, now: float):
        if self.mode != ALL and (tool, args_hash) in self._tools:
            data = self._tools[(tool, args_hash)]
            self.step_tools.append({"tool": tool, "args_hash": args_hash, "result": data})
            return (decode_value(data),)
        if self.mode != NONE:
            return None  # the tool runs, and tool_cache_put records its result
        raise self._miss("tool", {"tool": tool, "args_hash": args_hash}, (
            f"node {self.node!r}: tool call not in the snapshot: {tool} (arguments hash "
            f"{args_hash[:12]}); its arguments differ from every recorded call of it. Record "
            "it with `pytest --rewind-record=new` (rewrites the snapshot)"))

    def tool_cache_put(self, tool: str, args_hash: str, result: Any, now: float) -> None:
        data = encode_value(result, tool)
        self._tools[(tool, args_hash)] = data
        self.step_tools.append({"tool": tool, "args_hash": args_hash, "result": data})
