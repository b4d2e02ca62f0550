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
    if request.node.get_closest_marker("new_database"):
        yield from _new_pg_database()
        return
    yield request.getfixturevalue("recycled_pg").fresh(postgres_base_url())


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "new_database: the test watches a schema being made, so on PostgreSQL it gets "
        "a database created for it rather than an emptied one")


@pytest.fixture(scope="session")
def recycled_pg():
    db = RecycledDatabase()
    yield db
    db.drop()


class RecycledDatabase:
    """One PostgreSQL database per session, emptied for each test instead of created and dropped
    (CREATE DATABASE plus the schema costs ~0.3 s a test; emptying it ~25 ms). Each test gets it
    empty, at the current schema, under a name of its own: the previous test's sessions are
    closed and the database renamed, so a handle that test left open cannot reconnect to it. A
    test that changed anything but rows (a table, a column, a constraint, a function, an
    extension, a database setting) gets a new database. Tests about creating or migrating a
    schema use `pg_url` or `@pytest.mark.new_database`: a database made for them."""

    # all a test could change besides rows
    LAYOUT = ("SELECT md5(string_agg(x, ',' ORDER BY x)) FROM ("
              "SELECT c.relname || ':' || c.relkind::text AS x FROM pg_class c JOIN pg_namespace n "
              "ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
              "UNION ALL SELECT table_name || '.' || column_name || ':' || data_type "
              "FROM information_schema.columns WHERE table_schema = 'public' "
              "UNION ALL SELECT conname || ':' || pg_get_constraintdef(oid) FROM pg_constraint "
              "WHERE connamespace = 'public'::regnamespace "
              "UNION ALL SELECT tgname FROM pg_trigger WHERE NOT tgisinternal "
              "UNION ALL SELECT p.oid::regprocedure::text FROM pg_proc p "
              "WHERE p.pronamespace = 'public'::regnamespace "
              "UNION ALL SELECT extname || extversion FROM pg_extension "
              "UNION ALL SELECT array_to_string(setconfig, ';') FROM pg_db_role_setting "
              "WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database()) "
              "UNION ALL SELECT 'v' || version FROM schema_version) s")

    def __init__(self):
        self.url = None
        self.layout = None
        self.uses = 0

    def fresh(self, base_url: str) -> str:
        if self.url is not None:
            try:
                self._empty(base_url)
            except Exception:  # whatever the last test left, a new database is the answer
                self.drop()
        if self.url is None:
            self._create(base_url)
        return self.url

    def _empty(self, base_url: str) -> None:
        import psycopg2

        from rewind.store.pg_admin import _admin_connect, _dbname, _with_dbname

        self.uses += 1
        renamed = _with_dbname(self.url, f"rewind_recycled_{os.getpid()}_{self.uses}")
        admin = _admin_connect(base_url)
        try:
            with admin.cursor() as cur:
                cur.execute("SET statement_timeout = 0")
                for attempt in range(50):  # a session may reconnect between the two statements
                    cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE datname = %s", (_dbname(self.url),))
                    try:
                        cur.execute(f'ALTER DATABASE "{_dbname(self.url)}" RENAME TO "{_dbname(renamed)}"')
                        break
                    except psycopg2.errors.ObjectInUse:
                        if attempt == 49:
                            raise
        finally:
            admin.close()
        self.url = renamed
        conn = psycopg2.connect(self.url, options="-c statement_timeout=0")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(self.LAYOUT)
                if cur.fetchone()[0] != self.layout:
                    raise RuntimeError("the last test changed the layout")
                cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                            "AND tablename <> 'schema_version'")
                # DELETE, not TRUNCATE: a test leaves a few rows, and TRUNCATE makes new files
                # for every table and index (~65 ms against ~2); with triggers off, so the
                # cache_stat rows they would append are not there either
                cur.execute("SET session_replication_role = replica; " + "; ".join(
                    f'DELETE FROM "{t}"' for (t,) in cur.fetchall()) + "; SET session_replication_role = DEFAULT")
        finally:
            conn.close()

    def _create(self, base_url: str) -> None:
        import psycopg2

        from rewind import Rewind
        from rewind.store.pg_admin import create_test_database

        self.url = create_test_database(base_url, prefix="rewind_recycled")
        Rewind(self.url).close()  # the schema, once
        conn = psycopg2.connect(self.url)
        try:
            with conn.cursor() as cur:
                cur.execute(self.LAYOUT)
                self.layout = cur.fetchone()[0]
        finally:
            conn.close()

    def drop(self) -> None:
        from rewind.store.pg_admin import drop_database

        if self.url is not None:
            drop_database(self.url)
            self.url = None


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
    """A new PostgreSQL database (for tests that need one beside a SQLite file)."""
    yield from _new_pg_database()


def _new_pg_database():
    from rewind.store.pg_admin import create_test_database, drop_database

    url = create_test_database(postgres_base_url())
    try:
        yield url
    finally:
        drop_database(url)


@pytest.fixture
def pipeline_registry():
    """Pipelines a test registers for every handle of the process (`rewind.register_pipeline`,
    as the CLI needs) are forgotten after it: a later test's handle must not see them."""
    from rewind.engine import GLOBAL_PIPELINES

    saved = dict(GLOBAL_PIPELINES)
    yield GLOBAL_PIPELINES
    GLOBAL_PIPELINES.clear()
    GLOBAL_PIPELINES.update(saved)
