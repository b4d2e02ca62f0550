"""Which step a page shows: the choices of the graph + step picker and how a wish (a deep
link, a graph click, the previous selection) becomes one of them. Pure: no streamlit.

A step is named by its key (`critique`, `critique#2` for a second visit, see fmt.step_key);
a bare node name means its first visit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from .fmt import parse_step_key, step_key


@dataclass(frozen=True)
class Choice:
    """One entry of the step picker: its key and what the selectbox shows for it."""

    key: str
    label: str

    @property
    def node(self) -> str:
        return parse_step_key(self.key)[0]


def numbered(items: Iterable[tuple]) -> list:
    """Choices `1. critique — executed` from (node, occurrence, status) triples."""
    out = []
    for i, (node, occurrence, status) in enumerate(items):
        key = step_key(node, occurrence)
        out.append(Choice(key, f"{i + 1}. {key} — {status}"))
    return out


def resolve(choices: list, wanted: Optional[str], default: Optional[str] = None) -> tuple:
    """(the key to show, the wish that could not be honoured or None).

    An exact key wins; a bare node name (or a visit that does not exist) falls back to that
    node's first visit; otherwise `default`, else the first choice."""
    keys = [c.key for c in choices]
    if not keys:
        return None, wanted or None
    if wanted in keys:
        return wanted, None
    fallback = default if default in keys else keys[0]
    if not wanted:
        return fallback, None
    node, _ = parse_step_key(wanted)
    first = next((c.key for c in choices if c.node == node), None)
    if first is not None:
        return first, None
    return fallback, wanted


def after_click(choices: list, current: Optional[str], clicked: Optional[str]) -> tuple:
    """(the key a click on node `clicked` selects or None, True when the node has no step).

    A click on the node already shown keeps its current visit (`critique#2` stays)."""
    if not clicked:
        return None, False
    if parse_step_key(current)[0] == clicked:
        return None, False
    first = next((c.key for c in choices if c.node == clicked), None)
    return first, first is None
