"""The model settings of one browser session: provider, base URL, model, the user's own API key
and the default temperature the Fork page offers. They live in st.session_state only, never in
the process environment or a module global, so one visitor's choice never reaches another's
model calls.

They reach rewind through `rewind.llm.session_settings(...)`, a context manager the shell
enters around every page run (`active()`); the core applies them to the model calls made inside
it and to nobody else's. The key rule is the core's as well as ours: the server's
OPENAI_API_KEY only ever goes to the base URL of the server's environment; a base URL chosen
here gets the user's own key, if they gave one, or none at all.

The user's key is held for the session (so their runs can use it) and never shown again: the
form that takes it clears itself, and no widget keeps its value.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator, Optional

import streamlit as st

import rewind

from .fmt import mask_url

PROVIDERS = ("auto", "simulator", "openai")
DEFAULT_TEMPERATURE = 0.7
_SETTINGS = "_model_settings"   # {"provider", "base_url", "model"}: None = the server's
_KEY = "_model_own_key"         # the user's own key for this session; never rendered
_TEMPERATURE = "_model_default_temperature"


class SettingsError(ValueError):
    """A setting the user entered cannot be used (the message says which and why)."""


def supported() -> bool:
    """Whether this rewind core can apply settings to one session (rewind.llm.session_settings)."""
    return callable(getattr(rewind.llm, "session_settings", None))


def current() -> dict:
    """This session's choices: provider ("auto" when not chosen), base_url and model ("" when
    not chosen), own_key (True when the user gave a key for this session)."""
    s = st.session_state.get(_SETTINGS) or {}
    return {"provider": s.get("provider") or "auto", "base_url": s.get("base_url") or "",
            "model": s.get("model") or "", "own_key": bool(st.session_state.get(_KEY))}


def shown_base_url() -> str:
    """The session's base URL as its input box shows it: a password or a secret query value
    masked (`fmt.mask_url`), for the box's value reaches the browser."""
    return mask_url(current()["base_url"])


def customised() -> bool:
    s = st.session_state.get(_SETTINGS) or {}
    return any(s.get(k) for k in ("provider", "base_url", "model")) or bool(st.session_state.get(_KEY))


def apply(provider: str, base_url: str, model: str, api_key: Optional[str] = None) -> None:
    """Set this session's provider, base URL and model (empty: the server's). A non-empty
    `api_key` replaces the session's own key; None or "" keeps the one already given."""
    p = (provider or "auto").strip().lower()
    if p not in PROVIDERS:
        raise SettingsError(f"unknown provider {provider!r}: choose one of {', '.join(PROVIDERS)}")
    url = (base_url or "").strip()
    chosen = (st.session_state.get(_SETTINGS) or {}).get("base_url") or ""
    if chosen and url == mask_url(chosen):  # the box's masked value, untouched: the URL stays
        url = chosen
    elif "***" in url:  # an edited masked URL would send *** as the password
        raise SettingsError("the base URL still holds a masked secret (***): type the whole URL "
                            "again, with its password or key")
    if url and not re.match(r"^https?://[^\s/]+", url, re.I):
        raise SettingsError("the base URL must start with http:// or https:// and name a host")
    if not supported():
        raise SettingsError("this Rewind core cannot apply model settings to one session "
                            "(rewind.llm.session_settings is missing): upgrade rewind")
    st.session_state[_SETTINGS] = {"provider": None if p == "auto" else p, "base_url": url or None,
                                   "model": (model or "").strip() or None}
    if api_key and api_key.strip():
        st.session_state[_KEY] = api_key.strip()


def forget_key() -> None:
    st.session_state.pop(_KEY, None)


def reset() -> None:
    """Back to the server's settings for this session (the own key is forgotten too)."""
    st.session_state.pop(_SETTINGS, None)
    forget_key()


def _kwargs() -> dict:
    s = st.session_state.get(_SETTINGS) or {}
    return {"provider": s.get("provider"), "base_url": s.get("base_url"),
            "model": s.get("model"), "api_key": st.session_state.get(_KEY)}


@contextlib.contextmanager
def active() -> Iterator[None]:
    """Apply this session's settings to the model calls of this script run. With none chosen
    the server's settings apply as they are; with some chosen and a core that cannot scope
    them to a session, the run stops with an error rather than fall back to shared settings."""
    if not customised():
        yield
        return
    if not supported():
        st.error("This session has model settings, but this Rewind core cannot apply them to "
                 "one session: reset them on the Settings page.")
        st.stop()
    with rewind.llm.session_settings(**_kwargs()):
        yield


def provider_info() -> dict:
    """What the Settings page shows for this session (never a key)."""
    if customised() and supported():
        with rewind.llm.session_settings(**_kwargs()):
            return dict(rewind.llm.provider_info())
    return dict(rewind.llm.provider_info())


def default_temperature() -> float:
    return float(st.session_state.get(_TEMPERATURE, DEFAULT_TEMPERATURE))


def set_default_temperature(value: Any) -> None:
    st.session_state[_TEMPERATURE] = float(value)
