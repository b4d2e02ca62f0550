"""The canonical request and every pseudo-random decision the offline model makes.

Owns `normalize_messages` / `canonical_request` / `canonical_hash` (what a request *is*, for
determinism; the hash is streamed, so a huge prompt is not copied to be hashed) and the
draw streams: at temperature 0 every choice comes from sha256 of the canonical request, never
from Python's `hash()` (salted per process) or the global `random` module. Above temperature 0 a
second stream decides, with a probability that grows with temperature, to take a sampled choice
instead of the greedy one; it is keyed by `seed` when given (same seed, same text) and by a
per-process nonce plus a counter otherwise (so unseeded calls vary).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from typing import Any, Optional, Sequence

# Unseeded sampling must vary between calls and between processes; the nonce makes two
# processes differ, the counter makes two calls in one process differ.
_PROCESS_NONCE = os.urandom(16)
_sample_counter = itertools.count()


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


def canonical_hash(model: str, messages: list):
    """sha256 of `canonical_request(model, messages)`, fed piece by piece: the same digest
    without holding a second and third copy of a huge prompt (its JSON text and its bytes)."""
    h = hashlib.sha256()
    encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for chunk in encoder.iterencode({"model": model, "messages": messages}):
        h.update(chunk.encode("utf-8"))
    return h


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


class Chooser:
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


def sample_key(canonical: bytes, seed: Optional[int], index: int) -> bytes:
    """The key of the sampling stream of choice `index` of a request above temperature 0."""
    return sample_key_of(hashlib.sha256(canonical), seed, index)


def sample_key_of(request_hash, seed: Optional[int], index: int) -> bytes:
    """`sample_key` from `canonical_hash` (left as it was): sha256(canonical || suffix)."""
    if seed is not None:
        salt = b"seed:" + str(int(seed)).encode()
    else:
        salt = b"nonce:" + _PROCESS_NONCE + str(next(_sample_counter)).encode()
    h = request_hash.copy()
    h.update(b"\x00" + salt + b"\x00" + str(index).encode())
    return h.digest()
