"""Shared fixtures: a fresh store URL per test on each backend, and an offline model."""

from __future__ import annotations

import os

import pytest

# In this process pytest's `pythonpath` (pyproject.toml) puts this checkout first; the processes
# tests start inherit it here, so neither imports the checkout an editable install points at.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [ROOT, os.path.join(ROOT, "tests")] + [p for p in [os.environ.get("PYTHONPATH")] if p])


@pytest.fixture(autouse=True)
def offline_model(monkeypatch, tmp_path):
    """Every test runs on the offline simulator and writes its side effects under tmp_path."""
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REWIND_MODEL", "REWIND_PROVIDER", "REWIND_DB",
                "REWIND_PIPELINES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("REWIND_OUTBOX", str(tmp_path / "outbox"))
    from rewind import llm

    llm.reset()
    yield
    llm.reset()


def postgres_base_url() -> str:
    url = os.environ.get("REWIND_TEST_PG_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("REWIND_TEST_PG_URL is not set: .ci/run starts PostgreSQL and sets it")
        pytest.skip("REWIND_TEST_PG_URL not set (run `bash scripts/pg.sh start` and export it)")
    return url


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path):
    """A fresh, empty database URL on each backend."""
    if request.param == "sqlite":
        yield str(tmp_path / "rewind.db")
        return
    from rewind.store.pg_admin import create_test_database, drop_database

    url = create_test_database(postgres_base_url())
    try:
        yield url
    finally:
        drop_database(url)


def pytest_sessionfinish(session, exitstatus):
    """With REWIND_NO_SKIP set (scripts/test.sh, CI) a skipped test fails the run: a missing
    browser or database must never pass as green."""
    if not os.environ.get("REWIND_NO_SKIP"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        reporter.write_line(f"REWIND_NO_SKIP: {len(skipped)} test(s) skipped; failing the run", red=True)
        session.exitstatus = 1


@pytest.fixture
def db_url(store_url):
    """The same fresh database as `store_url` (the name the storage suites use)."""
    return store_url


@pytest.fixture
def pg_url():
    """A fresh PostgreSQL database (for tests that need one beside a SQLite file)."""
    from rewind.store.pg_admin import create_test_database, drop_database

    url = create_test_database(postgres_base_url())
    try:
        yield url
    finally:
        drop_database(url)
