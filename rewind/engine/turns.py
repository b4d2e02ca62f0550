"""Where a call stops (`Halts`) and the calls a run was driven with (`Turn`s).

A run is driven by one call per turn: `run`, then a `resume` for each next chat message, each
with its own `inputs=` and halt conditions. The run row keeps, per turn, the index of its first
step and its halts (`runs.turns_json`), so that a fork replays every later turn as the call it
was: it stops where that call stopped in plain Burr, not after the parent's step count (which
is wrong as soon as an edit makes a turn longer or shorter), and each step of a turn gets that
turn's inputs, as Burr hands every step of a call the same `inputs=`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, Optional

from ..errors import InvalidRequest
from . import burr_compat


@dataclasses.dataclass(frozen=True)
class Halts:
    """Where to stop: before/after these actions, or once the trajectory has `max_steps`."""

    before: frozenset = frozenset()
    after: frozenset = frozenset()
    # a fork of a halted run recorded before turns were (schema 8): it stops at the parent's length
    max_steps: Optional[int] = None

    @classmethod
    def of(cls, graph: Any, halt_before: Optional[list] = None, halt_after: Optional[list] = None,
           max_steps: Optional[int] = None) -> "Halts":
        for name, value in (("halt_before", halt_before), ("halt_after", halt_after)):
            if value is not None and (isinstance(value, str) or not hasattr(value, "__iter__")):
                raise InvalidRequest(f"{name} must be a list of action names, not {value!r}",
                                     field=name)
        before = burr_compat.expand_halts(graph, halt_before)
        after = burr_compat.expand_halts(graph, halt_after)
        known = {a.name for a in graph.actions}
        unknown = sorted((before | after) - known)
        if unknown:
            raise InvalidRequest(f"halt condition names no action of the pipeline: {unknown}; "
                                 f"its actions are {sorted(known)}", node=unknown[0])
        return cls(frozenset(before), frozenset(after), max_steps)

    @property
    def any(self) -> bool:
        return bool(self.before or self.after or self.max_steps is not None)


@dataclasses.dataclass(frozen=True)
class Turn:
    """One call that drove a run: the index of its first step, and where it was told to halt."""

    start: int
    halts: Halts = Halts()

    def moved_to(self, start: int) -> "Turn":
        return Turn(start, self.halts)


def encode_turns(turns: list) -> str:
    # json.dumps with default arguments reuses one encoder; one turn without halts (a first
    # run, most forks) is spelled here
    if len(turns) == 1 and not turns[0].halts.before and not turns[0].halts.after:
        return f"[[{int(turns[0].start)}, [], []]]"
    return json.dumps([[t.start, sorted(t.halts.before), sorted(t.halts.after)] for t in turns])


def decode_turns(text: Optional[str]) -> Optional[list]:
    """The turns of a run row; None for a run recorded before they were (or unreadable)."""
    if not text:
        return None
    turns = _decoded(text)
    return list(turns) if turns else None


@functools.lru_cache(maxsize=256)  # every fork of a run decodes the same text; Turns are frozen
def _decoded(text: str) -> tuple:
    try:
        return tuple(Turn(int(start), Halts(frozenset(before), frozenset(after)))
                     for start, before, after in json.loads(text))
    except (ValueError, TypeError):
        return ()


def turn_at(turns: list, index: int) -> int:
    """The turn the step at `index` belongs to (or, past the end, the last one)."""
    found = 0
    for k, t in enumerate(turns):
        if t.start <= index:
            found = k
    return found


def inputs_by_turn(steps: list, turns: list) -> list:
    """Per turn, the runtime inputs its steps were given, merged: Burr hands every step of a call
    the same `inputs=` and each action takes the names it declares, so the union is what the
    call passed (less any name no step of it took)."""
    out = []
    for k, t in enumerate(turns):
        end = turns[k + 1].start if k + 1 < len(turns) else len(steps)
        merged: dict = {}
        for s in steps[t.start:end]:
            if s.runtime_refs:
                for name, value in s.runtime_inputs.items():
                    merged.setdefault(name, value)
        out.append(merged)
    return out
