"""Secrets out of text Rewind stores or shows: an error a provider (or a gateway) wrote may
echo the API key it was sent ("Invalid API key: Bearer sk-..."), and a step's error, a model
call's error and a reason are all stored and shown on the dashboard. `redact` removes the key
this process was given, any `Bearer` token, and key-shaped words (sk-/rk-/pk-, also the masked
"sk-abc***xyz" some providers print)."""

from __future__ import annotations

import os
import re
from typing import Optional

MASK = "[redacted]"
_KEY_SHAPED = re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_\-*.]{6,}")
_BEARER = re.compile(r"(?i)\b(Bearer|Basic)\s+[A-Za-z0-9_\-.~+/=*:]{4,}")
KEY_VARIABLES = ("OPENAI_API_KEY",)  # where the process's keys come from


def redact(text: str, key: Optional[str] = None) -> str:
    """`text` without `key`, the keys in KEY_VARIABLES, Bearer tokens or key-shaped words."""
    if not text:
        return text
    for secret in (key, *(os.environ.get(v) for v in KEY_VARIABLES)):
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    return _KEY_SHAPED.sub(MASK, text)
