"""Why a node ran again: its field hashes against the parent's (or the last visit's) named in
words ("critique ran again because `analysis` changed"). Reads only the per-field hashes a key
keeps, never values.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from .fingerprint import changed_units
from .policy import SIDE_EFFECT, Policy

_LAYERS = (("read:", "{} changed"), ("prior:", "prior value of {} changed"),
           ("param:", "param {} changed"), ("input:", "input {} changed"),
           ("class:", "the code of class {} changed"))
# a value that kept its canonical hash but not its form (1 -> 1.0, another key order)
_FORMS = (("form:param:", "param:", "param {} changed form (its types or key order)"),
          ("form:input:", "input:", "input {} changed form (its types or key order)"),
          ("form:", None, "{} changed form (its types or key order)"))


def changed_fields(before: dict, now: dict, units_before: Optional[dict] = None,
                   units_now: Optional[dict] = None) -> list:
    """Human phrases naming what differs between two visits' field hashes (and, when both
    visits' code units are known, which unit of code changed)."""
    parts = []
    keys = set(before) | set(now)
    for prefix, phrase in _LAYERS:
        names = sorted(k[len(prefix):] for k in keys
                       if k.startswith(prefix) and before.get(k) != now.get(k))
        if names:
            parts.append(phrase.format(", ".join(f"`{n}`" for n in names)))
    for prefix, hashed, phrase in _FORMS:
        names = []
        for k in sorted(keys):
            if not k.startswith(prefix) or before.get(k) == now.get(k):
                continue
            name = k[len(prefix):]
            if hashed is None and name.startswith(("param:", "input:")):
                continue  # the layers above name those
            twins = [hashed + name] if hashed else ["read:" + name, "prior:" + name]
            if all(before.get(t) == now.get(t) for t in twins):  # else named as changed above
                names.append(name)
        if names:
            parts.append(phrase.format(", ".join(f"`{n}`" for n in names)))
    if before.get("code") != now.get("code"):
        units = changed_units(units_before, units_now) if units_before and units_now else []
        parts.append(", ".join(f"`{u}`" for u in units) + " changed" if units
                     else "the node's code changed")
    return parts


def miss_reason(node: str, policy: Policy, field_hashes: dict, parent: Any, entry: Optional[dict],
                expired: bool, use_cache: bool, allow_side_effects: bool,
                has_parent_run: bool, units: Optional[dict] = None,
                earlier: Any = None) -> str:
    """Why a step runs again, named against the parent's same step where there is one."""
    if policy.determinism == SIDE_EFFECT:
        if allow_side_effects and has_parent_run:
            return "side effect performed again: allow_side_effects=True"
        return "side-effect node: never cached"
    if expired and entry is not None:
        age = time.time() - entry["cached_at"]
        return f"ttl expired: cached {age:.0f}s ago, ttl {policy.ttl:g}s"
    if parent is None and earlier is not None and earlier.field_hashes:
        # a fresh run: name what changed since the last visit with these same inputs
        parts = changed_fields(earlier.field_hashes, field_hashes, earlier.units, units)
        if parts:
            return f"{node} ran again because " + "; ".join(parts)
    if parent is not None and parent.field_hashes:
        parts = changed_fields(parent.field_hashes, field_hashes, parent.units, units)
        if parts:
            return f"{node} ran again because " + "; ".join(parts)
        if parent.status == "failed":
            return "same inputs as the parent's step, which failed (failures are never cached)"
        if not use_cache:
            return "cache bypassed (use_cache=False)"
        return "same inputs as the parent's step, but no cache entry (purged or never stored)"
    if not use_cache:
        return "cache bypassed (use_cache=False)"
    return "no earlier entry for these inputs"
