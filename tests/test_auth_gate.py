"""The shell's gate under AppTest: with `[auth]` configured, a visitor who has not signed in gets
the sign-in page on every page and deep link (no run id, no run data, no Settings); a signed-in
user's pages are scoped to their email; REWIND_ADMINS alone may purge or run gc; a signed-in
identity with no usable email is refused; without `[auth]` a non-loopback server address shows
nothing. The per-owner scoping itself needs the core's `Rewind(url, owner=...)`."""

from __future__ import annotations

from pathlib import Path

import pytest
from burr.core.graph import GraphBuilder
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

import rewind
from rewind import Pipeline, action

APP = str(Path(__file__).resolve().parents[1] / "app.py")
AUTH = {"auth": {"redirect_uri": "http://127.0.0.1:8501/oauth2callback", "cookie_secret": "x" * 32,
                 "client_id": "rewind", "client_secret": "s" * 16,
                 "server_metadata_url": "http://127.0.0.1:9/.well-known/openid-configuration"}}
ALICE, BOB, ADMIN = "alice@example.com", "bob@example.com", "root@example.com"


@action(reads=["x"], writes=["y"])
def g_first(state):
    return state.update(y=state["x"] + 1)


PIPELINE = Pipeline(name="gate", graph=GraphBuilder().with_actions(first=g_first).build(), entrypoint="first")


@pytest.fixture
def db(tmp_path, monkeypatch):
    url = str(tmp_path / "gate.db")
    monkeypatch.setenv("REWIND_DB", url)
    monkeypatch.setenv("REWIND_ADMINS", f"{ADMIN}, ops@example.com")
    rewind.register_pipeline(PIPELINE)
    return url


def app(user: dict | None, query: dict | None = None, page: str | None = None, auth: bool = True) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    if auth:
        at.secrets = {k: dict(v) for k, v in AUTH.items()}
    at.user = user if user is not None else {"is_logged_in": False}
    if page:
        at.run()
        at.switch_page(f"pages/{page}.py")
    if query:
        at.query_params.update(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def dump(at: AppTest) -> str:
    """Every element of the page in protobuf text form (labels, values, bodies, help texts)."""
    def walk(node):
        yield node
        for child in (getattr(node, "children", None) or {}).values():
            yield from walk(child)

    return "\n".join(str(getattr(n, "proto", "")) for n in walk(at._tree))


def signed_in(email: str) -> dict:
    return {"is_logged_in": True, "email": email, "name": email.split("@")[0]}


@pytest.mark.parametrize("page,query", [
    (None, None), (None, {"run": "RUNID"}), ("fork", {"run": "RUNID", "node": "first"}),
    ("diff", {"a": "RUNID", "b": "RUNID"}), ("settings", None), ("runs", None),
])
def test_a_visitor_who_has_not_signed_in_sees_the_sign_in_page_only(db, page, query):
    with rewind.Rewind(db) as rw:
        run = rw.run(PIPELINE, {"x": 1})
    if query:
        query = {k: (run.id if v == "RUNID" else v) for k, v in query.items()}
    at = app(None, query=query, page=page)
    text = dump(at)
    assert [b.label for b in at.button] == ["Sign in"]
    assert run.id not in text
    for word in ("Model provider", "All runs", "Fork & replay", "Refresh data", "Purge"):
        assert word not in text, word
    assert not at.sidebar.button


def test_named_providers_get_one_button_each(db):
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets = {"auth": {"redirect_uri": AUTH["auth"]["redirect_uri"], "cookie_secret": "x" * 32,
                           "okta": {k: AUTH["auth"][k] for k in ("client_id", "client_secret", "server_metadata_url")},
                           "google": {k: AUTH["auth"][k] for k in ("client_id", "client_secret", "server_metadata_url")}}}
    at.user = {"is_logged_in": False}
    at.run()
    assert [b.label for b in at.button] == ["Sign in with google", "Sign in with okta"]


@pytest.mark.parametrize("user,why", [
    ({"is_logged_in": True, "name": "no email"}, "did not send an email address"),
    ({"is_logged_in": True, "email": "eve@example.com", "email_verified": False}, "not verified"),
])
def test_an_identity_without_a_usable_email_is_refused(db, user, why):
    with rewind.Rewind(db) as rw:
        run = rw.run(PIPELINE, {"x": 1})
    at = app(user)
    assert any(why in e.value for e in at.error), [e.value for e in at.error]
    assert run.id not in dump(at)
    assert [b.label for b in at.button] == ["Sign out"]


def test_a_signed_in_user_sees_their_runs_only_and_no_maintenance(db):
    with rewind.Rewind(db, owner=ALICE) as rw:
        mine = rw.run(PIPELINE, {"x": 1})
    with rewind.Rewind(db, owner=BOB) as rw:
        theirs = rw.run(PIPELINE, {"x": 2})
    at = app(signed_in(ALICE))
    text = dump(at)
    assert mine.id in text and theirs.id not in text
    assert any("Signed in as" in c.value for c in at.sidebar.caption)
    assert [b.label for b in at.sidebar.button] == ["↻ Refresh data", "Sign out"]
    at = app(signed_in(ALICE), query={"run": theirs.id})
    assert any(f"no run {theirs.id}" in w.value for w in at.warning), [w.value for w in at.warning]
    at = app(signed_in(ALICE), page="settings")
    assert not [b for b in at.button if b.label in ("Purge", "Run gc")]
    assert {m.label: m.value for m in at.metric}["Runs"] == "1"


def test_an_admin_sees_every_run_and_maintains_the_cache(db):
    with rewind.Rewind(db, owner=ALICE) as rw:
        a = rw.run(PIPELINE, {"x": 1})
    with rewind.Rewind(db, owner=BOB) as rw:
        b = rw.run(PIPELINE, {"x": 2})
    at = app(signed_in(ADMIN.upper()), page="settings")  # emails compare case-insensitively
    assert {m.label: m.value for m in at.metric}["Runs"] == "2"
    assert {b.label for b in at.button} >= {"Purge", "Run gc"}
    for rid in (a.id, b.id):
        at = app(signed_in(ADMIN), query={"run": rid})
        assert f"Run {rid}" in dump(at)


def test_maintenance_refuses_a_non_admin_even_if_called(db, monkeypatch):
    from rewind_ui import access, core

    monkeypatch.setattr(access, "viewer", lambda: access.Viewer(owner=BOB, admin=False))
    with pytest.raises(access.AccessDenied, match="admins only"):
        core.purge_cache(0)
    with pytest.raises(access.AccessDenied, match="admins only"):
        core.gc(0)


def test_without_auth_a_non_loopback_address_shows_nothing(db):
    with rewind.Rewind(db) as rw:
        run = rw.run(PIPELINE, {"x": 1})
    old = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    try:
        at = app({"email": "test@example.com"}, auth=False)
    finally:
        st_config.set_option("server.address", old)
    assert any("only serves loopback" in e.value for e in at.error)
    assert run.id not in dump(at) and not at.button


def test_without_auth_single_user_mode_sees_everything(db):
    with rewind.Rewind(db) as rw:
        run = rw.run(PIPELINE, {"x": 1})
    at = app({"email": "test@example.com"}, auth=False)
    assert run.id in dump(at)
    assert [b.label for b in at.sidebar.button] == ["↻ Refresh data"]


def test_admins_parse_and_side_effects_flag(monkeypatch):
    from rewind_ui import access

    monkeypatch.setenv("REWIND_ADMINS", " A@x.org ,, b@Y.org ")
    assert access.admins() == {"a@x.org", "b@y.org"}
    monkeypatch.delenv("REWIND_ALLOW_SIDE_EFFECTS", raising=False)
    assert not access.side_effects_allowed()
    for v, want in (("1", True), ("true", True), ("0", False), ("", False), ("no", False)):
        monkeypatch.setenv("REWIND_ALLOW_SIDE_EFFECTS", v)
        assert access.side_effects_allowed() is want
