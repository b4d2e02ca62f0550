"""Secrets out of text Rewind stores or shows: an error a provider (or a gateway) wrote may
echo the API key it was sent ("Invalid API key: Bearer sk-..."), and a step's error, a model
call's error and a reason are all stored and shown on the dashboard. `redact` removes the key
this process was given, any `Bearer` token, and key-shaped words (sk-/rk-/pk-, also the masked
"sk-abc***xyz" some providers print), and the credentials a URL may carry: a user:password part
and query parameters named like secrets (`?api_key=`, `&token=`, `sig=`: gateways take keys there)."""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Optional

MASK = "[redacted]"
_KEY_SHAPED = re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_\-*.]{6,}")
_BEARER = re.compile(r"(?i)\b(Bearer|Basic)\s+[A-Za-z0-9_\-.~+/=*:]{4,}")
KEY_VARIABLES = ("OPENAI_API_KEY",)  # where the process's keys come from
URL_MASK = "***"
# a query parameter whose name says it holds a credential (api_key, x-api-key, access_token,
# client_secret, password, sig, code...)
_SECRET_WORDS = "key|token|secret|pass|pwd|auth|sig|credential|session|code"
_SECRET_NAME = re.compile(f"(?i)(?:{_SECRET_WORDS})")
_SECRET_PARAM = re.compile(  # the same, inside free text: `...?api_key=abc&...`
    rf"(?i)([?&;][\w.\-]*(?:{_SECRET_WORDS})[\w.\-]*=)" r"[^&#\s'\"<>]+")
_USERINFO = re.compile(r"(://[^/\s:@'\"<>]*):[^/\s@'\"<>]+@")


def redact_url(url: object, hide_user: bool = False) -> str:
    """`url` with its password and secret-named query values replaced by ***; any other text
    (a file path) as it is: `postgresql://u:***@host/db`, `https://gw/v1?api_key=***`. With
    `hide_user` the whole user part goes (`https://***@proxy/v1`: some proxies take a key there)."""
    s = "" if url is None else str(url)
    if "://" not in s:
        return s
    try:
        parts = urllib.parse.urlsplit(s)
        port = parts.port
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if parts.password is not None or (hide_user and parts.username):
        host = parts.hostname or ""
        host = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
        user = URL_MASK if hide_user else f"{parts.username or ''}:{URL_MASK}"
        netloc = f"{user}@{host}"
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        query = urllib.parse.urlencode(
            [(k, URL_MASK if _SECRET_NAME.search(k) else v) for k, v in pairs], safe="*")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def redact(text: str, key: Optional[str] = None) -> str:
    """`text` without `key`, the keys in KEY_VARIABLES, Bearer tokens, key-shaped words, URL
    passwords or secret-named query values."""
    if not text:
        return text
    for secret in (key, *(os.environ.get(v) for v in KEY_VARIABLES)):
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _SECRET_PARAM.sub(lambda m: m.group(1) + MASK, text)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    return _KEY_SHAPED.sub(MASK, text)
