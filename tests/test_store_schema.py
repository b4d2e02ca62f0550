"""Schema creation and migration, on both backends: once, under the schema lock, numbered.

Opening a database whose schema is current runs no DDL and takes no lock (every statement of
the open is traced); a version-1 database is migrated once; a newer one is refused. On
PostgreSQL, 8 processes opening stores (new handles and `python -m rewind runs`) while 8 writer
processes record runs: no deadlock, no failed commit, no lost row (`pytest -s` prints the
figures).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from rewind import Rewind
from rewind.errors import StoreError
from rewind.store import SCHEMA_VERSION, open_store
from rewind.store.postgres import PostgresStore
from rewind.store.sqlite import SQLiteStore

pytestmark = pytest.mark.new_database
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DDL = re.compile(r"^\s*(CREATE|ALTER|DROP|LOCK)\b|pg_advisory|BEGIN IMMEDIATE", re.I)


@pytest.fixture
def traced(monkeypatch):
    """Every statement any store connection sends from now on, in order."""
    log: list = []
    sqlite_connect, pg_connect = SQLiteStore._connect, PostgresStore._connect

    def sqlite_traced(self):
        conn = sqlite_connect(self)
        conn._conn.set_trace_callback(log.append)
        return conn

    def pg_traced(self):
        import psycopg2.extensions

        class Cursor(psycopg2.extensions.cursor):
            def execute(self, sql, params=None):
                log.append(sql if isinstance(sql, str) else sql.decode())
                return super().execute(sql, params)

        conn = pg_connect(self)
        conn.cursor_factory = Cursor
        return conn

    monkeypatch.setattr(SQLiteStore, "_connect", sqlite_traced)
    monkeypatch.setattr(PostgresStore, "_connect", pg_traced)
    return log


def _set_version(url: str, version: int, drop_doc: bool = False) -> None:
    store = open_store(url)
    if drop_doc and isinstance(store, SQLiteStore):
        store.close()
        conn = sqlite3.connect(url)
        cols = [r[1] for r in conn.execute("PRAGMA table_info(nodes)") if r[1] != "doc"]
        conn.execute("ALTER TABLE nodes RENAME TO nodes_old")
        conn.execute(f"CREATE TABLE nodes AS SELECT {', '.join(cols)} FROM nodes_old")
        conn.execute("DROP TABLE nodes_old")
        conn.execute("UPDATE schema_version SET version = ?", (version,))
        conn.commit()
        conn.close()
        return
    with store.transaction():
        if drop_doc:
            store.execute("ALTER TABLE nodes DROP COLUMN doc")
        store.execute("UPDATE schema_version SET version = ?", (version,))
    store.close()


def test_a_fresh_database_is_created_under_the_schema_lock(db_url, traced):
    store = open_store(db_url)
    lock = "pg_advisory_xact_lock" if db_url.startswith("postgres") else "BEGIN IMMEDIATE"
    first_ddl = next(i for i, s in enumerate(traced) if s.lstrip().upper().startswith("CREATE"))
    assert any(lock in s for s in traced[:first_ddl]), traced[:first_ddl]
    assert store.query("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    assert SCHEMA_VERSION == 10
    assert _partial_run_indexes(store) == {"runs_parent": "parent_id", "runs_owner": "owner"}
    store.close()


def _cache_age_indexes(store) -> list:
    if isinstance(store, SQLiteStore):
        return sorted(name for (name,) in store.query(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'cache' "
            "AND sql LIKE '%(cached_at)%'"))
    return sorted(name for (name,) in store.query(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'cache' AND indexdef LIKE '%(cached_at)%'"))


def test_the_cache_has_one_age_index_fresh_and_migrated(db_url):
    store = open_store(db_url)
    assert _cache_age_indexes(store) == ["cache_cached_at"]
    with store.transaction():  # a database migrated to version 4 or 5 had two
        store.execute("CREATE INDEX cache_age ON cache (cached_at)")
    store.close()
    _set_version(db_url, 5)
    store = open_store(db_url)
    assert _cache_age_indexes(store) == ["cache_cached_at"]
    assert store.query("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    store.close()


def _partial_run_indexes(store) -> dict:
    """{index: the column its WHERE ... IS NOT NULL names} of the runs' partial indexes."""
    if isinstance(store, SQLiteStore):
        rows = store.query("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'")
    else:
        rows = store.query("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'runs'")
    out = {}
    for name, sql in rows:
        m = re.search(r"WHERE \(?(\w+) IS NOT NULL", sql or "")
        if m:
            out[name] = m.group(1)
    return out


def _hits_total(store) -> int:
    return int(store.query("SELECT COALESCE(SUM(hits), 0) FROM cache_stat")[0][0])


def test_version_8_counts_hits_in_the_total_and_keeps_the_ones_counted(db_url):
    """Up to version 7 each entry counted its hits (a trigger kept the total); from 8 a commit
    adds its hits to the total once. Migrating keeps the total, zeroes the entries (so a purge
    no longer takes hits out) and drops the trigger."""
    from rewind.store import migrations
    from tests import shapes

    pipeline = shapes.linear()
    rw = Rewind(db_url)
    run = rw.run(pipeline, {"topic": "wasps"})
    store = rw.store
    with store.transaction():  # the layout of version 7: the trigger, entries with counts
        if isinstance(store, SQLiteStore):
            migrations._sqlite_stat_triggers(store)
        else:
            migrations._pg_stat_triggers(store)
        store.execute("UPDATE cache SET hits = 3")
        for name, cols in (("runs_parent", "parent_id, created_at"), ("runs_owner", "owner, created_at")):
            store.execute(f"DROP INDEX {name}")
            store.execute(f"CREATE INDEX {name} ON runs ({cols})")  # whole, as up to 7
        store.execute("UPDATE schema_version SET version = 7")
    entries = store.query("SELECT COUNT(*) FROM cache")[0][0]
    assert _hits_total(store) == 3 * entries
    rw.close()

    rw = Rewind(db_url, pipelines=[pipeline])
    store = rw.store
    assert store.query("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    assert _hits_total(store) == 3 * entries  # nothing counted is lost
    assert store.query("SELECT COALESCE(MAX(hits), 0) FROM cache") == [(0,)]
    assert _partial_run_indexes(store) == {"runs_parent": "parent_id", "runs_owner": "owner"}
    fork = rw.fork(run.id, at="plan")
    served = sum(1 for s in fork.steps if s.status == "cached")
    assert served == 4
    assert _hits_total(store) == 3 * entries + served
    assert rw.cache_stats()["hits"] == 3 * entries + served
    rw.purge_cache(older_than_days=0)  # hits the cache served stay served
    assert rw.cache_stats()["hits"] == 3 * entries + served
    rw.close()


def test_opening_a_current_database_runs_no_ddl_and_takes_no_lock(db_url, traced):
    Rewind(db_url).close()
    traced.clear()
    rw = Rewind(db_url)
    assert rw.list_runs() == []
    opened = list(traced)
    assert opened, "the trace saw nothing"
    assert not [s for s in opened if DDL.search(s)], opened
    assert not [s for s in opened if re.match(r"\s*(INSERT|UPDATE|DELETE|BEGIN)\b", s, re.I)], opened
    rw.close()


def test_a_version_1_database_is_migrated_once(db_url, traced):
    Rewind(db_url).close()
    _set_version(db_url, 1, drop_doc=True)
    traced.clear()
    store = open_store(db_url)
    assert [s for s in traced if re.match(r"\s*ALTER TABLE nodes ADD COLUMN doc", s)], traced
    assert "doc" in store._columns("nodes")
    assert store.query("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    store.close()
    traced.clear()
    open_store(db_url).close()
    assert not [s for s in traced if DDL.search(s)]
    # a version-1 database that already had the column (it was added on every open) is fine too
    _set_version(db_url, 1)
    store = open_store(db_url)
    assert store.query("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    store.close()


def test_a_newer_database_is_refused(db_url):
    Rewind(db_url).close()
    _set_version(db_url, SCHEMA_VERSION + 7)
    with pytest.raises(StoreError, match="newer than this Rewind"):
        open_store(db_url)


# --- PostgreSQL: openers beside writers ---------------------------------------------------------
WRITERS, OPENERS = 8, 8
_CHILD = textwrap.dedent("""
    import json, os, subprocess, sys, time
    sys.path.insert(0, {root!r})
    from rewind import Rewind
    from tests.test_concurrency import PIPELINE

    role, url, tag, ready, gate, stop = sys.argv[1:7]
    rw = Rewind(url, pipelines=[PIPELINE]) if role == "writer" else None
    open(ready, "w").close()
    deadline = time.time() + 120
    while not os.path.exists(gate):
        if time.time() > deadline:
            sys.exit("gate never opened")
        time.sleep(0.002)
    out = {{"runs": [], "errors": [], "opens": 0}}
    if role == "writer":
        i = 0
        while i < 3 or (not os.path.exists(stop) and i < 500):
            try:
                run = rw.run(PIPELINE, {{"topic": f"{{tag}}-{{i}}"}}, use_cache=False)
                out["runs"].append([run.id, run.status, len(run.steps), run.error])
            except Exception as e:
                out["errors"].append(f"{{type(e).__name__}}: {{e}}")
            i += 1
    elif role == "handles":
        for _ in range(6):
            try:
                h = Rewind(url)
                h.list_runs(limit=5)
                h.close()
                out["opens"] += 1
            except Exception as e:
                out["errors"].append(f"{{type(e).__name__}}: {{e}}")
    else:  # the CLI
        for _ in range(1):
            p = subprocess.run([sys.executable, "-m", "rewind", "--db", url, "runs"],
                               capture_output=True, text=True, cwd={root!r})
            if p.returncode == 0:
                out["opens"] += 1
            else:
                out["errors"].append(f"exit {{p.returncode}}: {{p.stderr.strip()[-300:]}}")
    print(json.dumps(out))
""")


def test_postgres_openers_never_disturb_writers(pg_url, tmp_path):
    Rewind(pg_url).close()  # the schema exists: this is about opening a current database
    code = _CHILD.format(root=ROOT)
    gate, stop = str(tmp_path / "gate"), str(tmp_path / "stop")
    roles = ["writer"] * WRITERS + ["handles"] * (OPENERS // 2) + ["cli"] * (OPENERS - OPENERS // 2)
    ready = [str(tmp_path / f"ready-{i}") for i in range(len(roles))]
    procs = [subprocess.Popen([sys.executable, "-c", code, role, pg_url, f"w{i}", r, gate, stop],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, (role, r) in enumerate(zip(roles, ready))]
    results: list = [None] * len(procs)
    try:
        deadline = time.monotonic() + 180
        while not all(os.path.exists(r) for r in ready):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
            assert time.monotonic() < deadline, "the children never got ready"
            time.sleep(0.01)
        open(gate, "w").close()
        for i, p in enumerate(procs):  # openers first: the writers go on until they are done
            if roles[i] != "writer":
                results[i] = p.communicate(timeout=300)
        open(stop, "w").close()
        for i, p in enumerate(procs):
            if roles[i] == "writer":
                results[i] = p.communicate(timeout=300)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    reports = []
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    errors = [e for r in reports for e in r["errors"]]
    deadlocks = sum("deadlock" in e.lower() for e in errors)
    runs = [run for r in reports for run in r["runs"]]
    failed = [run for run in runs if run[1] != "completed"]
    opens = sum(r["opens"] for r in reports)

    rw = Rewind(pg_url)
    stored = {row["id"]: row for row in rw.store.list_run_rows(limit=100_000)}
    steps = dict(rw.store.query("SELECT run_id, COUNT(*) FROM nodes GROUP BY run_id"))
    lost = [run for run in runs if run[0] not in stored or steps.get(run[0]) != 4
            or stored[run[0]]["status"] != "completed"]
    extra = set(stored) - {run[0] for run in runs}
    rw.close()
    print(f"\n[postgres] {WRITERS} writers recorded {len(runs)} runs while {OPENERS} processes "
          f"opened the store {opens} times ({OPENERS // 2} with new handles, "
          f"{OPENERS - OPENERS // 2} with `python -m rewind runs`): {deadlocks} deadlocks, "
          f"{len(failed) + len(errors)} failed commits, {len(lost)} lost rows")
    assert deadlocks == 0 and errors == [], errors[:5]
    assert failed == [], failed[:5]
    assert lost == [] and not extra, (lost[:5], sorted(extra)[:5])
    assert opens == (OPENERS // 2) * 6 + (OPENERS - OPENERS // 2)
    assert len(runs) >= WRITERS * 3
