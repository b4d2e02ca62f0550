"""Who is looking at the dashboard and what the server lets them do: sign-in through Streamlit's
native OIDC (`[auth]` in `.streamlit/secrets.toml`), the signed-in email as the owner of runs,
`REWIND_ADMINS`, and the server's `REWIND_ALLOW_SIDE_EFFECTS`.

Two modes, decided by the secrets alone:
- `[auth]` configured: a visitor who has not signed in gets the sign-in page and nothing else
  (`gate()`, called by the shell before any page runs). A signed-in user's Rewind handle is
  scoped to their email; `REWIND_ADMINS` see every run and are the only ones who may purge the
  cache or run gc.
- no `[auth]`: single-user mode, as before sign-in existed. It only serves a loopback address
  (the shipped config says 127.0.0.1): started with another `server.address` it refuses to
  show anything, so a config edit alone cannot publish an unauthenticated dashboard.

Every decision fails closed: no email claim, an unverified email, or a non-loopback address
without sign-in show a message and stop the script; nothing here ever returns "see all" for a
visitor who should not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

import streamlit as st

ADMINS_ENV = "REWIND_ADMINS"
SIDE_EFFECTS_ENV = "REWIND_ALLOW_SIDE_EFFECTS"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_TRUE = frozenset({"1", "true", "yes", "on"})
# keys of an [auth] (or [auth.NAME]) section that make it a provider Streamlit can sign in with
_PROVIDER_KEYS = ("client_id", "server_metadata_url")


@dataclass(frozen=True)
class Viewer:
    """The person this script run serves. `owner` None means single-user mode (no sign-in)."""

    owner: Optional[str]
    admin: bool
    name: Optional[str] = None

    @property
    def signed_in(self) -> bool:
        return self.owner is not None


SINGLE_USER = Viewer(owner=None, admin=True)


class AccessDenied(RuntimeError):
    """Raised when data is asked for on behalf of nobody while sign-in is configured."""


# --- configuration -------------------------------------------------------------------------------

def auth_section() -> Optional[dict]:
    """The `[auth]` section of the secrets, or None. A missing secrets file is no section."""
    try:
        section = st.secrets.get("auth")
    except Exception:  # noqa: BLE001 - Streamlit raises its own error type when there is no file
        return None
    if section is None:
        return None
    return dict(section.to_dict() if hasattr(section, "to_dict") else section)


def configured() -> bool:
    return bool(auth_section())


def providers() -> list:
    """The providers to offer: [None] for a single provider in `[auth]` itself, else the names
    of its `[auth.NAME]` subsections (Streamlit's `st.login(NAME)`)."""
    section = auth_section() or {}
    if any(k in section for k in _PROVIDER_KEYS):
        return [None]
    return sorted(k for k, v in section.items()
                  if isinstance(v, dict) and any(p in v for p in _PROVIDER_KEYS))


def admins() -> frozenset:
    """The emails in `REWIND_ADMINS` (comma-separated), lower-cased."""
    raw = os.environ.get(ADMINS_ENV, "")
    return frozenset(e.strip().lower() for e in raw.split(",") if e.strip())


def side_effects_allowed() -> bool:
    """Whether this server lets the Fork page perform side effects (`REWIND_ALLOW_SIDE_EFFECTS`)."""
    return os.environ.get(SIDE_EFFECTS_ENV, "").strip().lower() in _TRUE


def server_address() -> str:
    return str(st.get_option("server.address") or "").strip()


def loopback_only() -> bool:
    """True when the server listens on a loopback address only (an empty address is all)."""
    return server_address().lower().strip("[]") in LOOPBACK


# --- who is signed in ----------------------------------------------------------------------------

def _user_info() -> dict:
    try:
        return dict(st.user.to_dict())
    except Exception:  # noqa: BLE001 - no script context (bare mode): nobody is signed in
        return {}


def _identity(info: dict) -> tuple:
    """(email or None, why not): the verified, normalised email of a signed-in user."""
    if not info.get("is_logged_in"):
        return None, "not signed in"
    email = str(info.get("email") or "").strip().lower()
    if not email or "@" not in email:
        return None, ("your identity provider did not send an email address; Rewind keys runs "
                      "by email, so ask for the `email` scope (client_kwargs in [auth])")
    if info.get("email_verified") is False:
        return None, f"your identity provider says {email} is not verified; verify it and sign in again"
    return email, None


def viewer() -> Viewer:
    """The viewer of this script run. Raises AccessDenied when sign-in is configured and nobody
    (with a usable email) is signed in: callers never get a see-all handle by accident."""
    if not configured():
        if not loopback_only():
            raise AccessDenied(_exposed_message())
        return SINGLE_USER
    info = _user_info()
    email, why = _identity(info)
    if email is None:
        raise AccessDenied(why)
    return Viewer(owner=email, admin=email in admins(), name=(str(info.get("name") or "") or None))


def _exposed_message() -> str:
    return (f"This dashboard has no sign-in configured and listens on {server_address() or 'all interfaces'!r}. "
            "Without sign-in it only serves loopback (server.address = \"127.0.0.1\"); configure "
            "[auth] in .streamlit/secrets.toml before exposing it (README: Sign-in and sharing).")


# --- the gate the shell runs before any page -----------------------------------------------------

def gate() -> Viewer:
    """Return the viewer, or draw the sign-in page (or why access is refused) and stop the
    script: no page, no run id, no setting is drawn for a visitor who is not signed in."""
    try:
        return viewer()
    except AccessDenied as e:
        reason = str(e)
    if not configured():
        st.title("Rewind")
        st.error(reason)
        st.stop()
    _sign_in_page(reason)
    st.stop()
    raise AssertionError("unreachable")  # st.stop raises


def _sign_in_page(reason: str) -> None:
    st.title("Rewind")
    st.subheader("Sign in")
    st.write("This dashboard is shared: sign in to see your runs.")
    info = _user_info()
    if info.get("is_logged_in"):  # signed in, but the identity is not usable
        st.error(reason)
        st.button("Sign out", key="_signin_logout", on_click=st.logout)
        return
    names = providers()
    if not names:
        st.error("[auth] in secrets.toml names no provider: set client_id, client_secret and "
                 "server_metadata_url in [auth] (or in [auth.NAME] sections).")
        return
    for name in names:
        label = "Sign in" if name is None else f"Sign in with {name}"
        st.button(label, key=f"_signin_{name or 'default'}", type="primary",
                  on_click=_login, args=(name,), icon=":material/login:")


def _login(name: Optional[str]) -> None:
    if name is None:
        st.login()
    else:
        st.login(name)


def sidebar_account(v: Viewer) -> None:
    """Who is signed in, and the way out (nothing in single-user mode)."""
    if not v.signed_in:
        return
    st.caption(f"Signed in as **{_md(v.owner)}**" + (" · admin" if v.admin else ""))
    st.button("Sign out", key="_logout", icon=":material/logout:", on_click=st.logout)


def _md(text: Any) -> str:
    from .fmt import md_escape

    return md_escape(text)
