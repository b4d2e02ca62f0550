"""Pointing Rewind at another application's database: a clear StoreError, and nothing changed.

Seen by a stranger: a SQLite file or PostgreSQL database of another app with a table named
`runs` gave the driver's "no such column: created_at" (the CLI called it an internal error),
the SQLite file was switched to WAL on the way, and a file whose tables had other names was
silently given Rewind's tables beside its own.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from rewind import Rewind
from rewind.errors import StoreError
from rewind.store import open_store


def _foreign_sqlite(path, table_ddl: str) -> bytes:
    conn = sqlite3.connect(path)
    conn.execute(table_ddl)
    conn.execute("INSERT INTO %s VALUES (1, 'precious')" % table_ddl.split()[2])
    conn.commit()
    conn.close()
    with open(path, "rb") as f:
        return f.read()


def _foreign_postgres(url: str, table_ddl: str) -> None:
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(table_ddl)
        cur.execute("INSERT INTO %s VALUES (1, 'precious')" % table_ddl.split()[2])
    conn.close()


def _pg_tables(url: str) -> tuple:
    """The database's tables and the other app's `runs` rows (if it has that table)."""
    import psycopg2

    conn = psycopg2.connect(url)
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema() ORDER BY 1")
        names = [r[0] for r in cur.fetchall()]
        rows = []
        if "runs" in names:
            cur.execute("SELECT name FROM runs")
            rows = cur.fetchall()
    conn.close()
    return names, rows


@pytest.mark.parametrize("ddl", ["CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT)",
                                 "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)"])
def test_another_apps_sqlite_file_is_refused_and_left_byte_for_byte(tmp_path, ddl):
    path = str(tmp_path / "app.db")
    before = _foreign_sqlite(path, ddl)
    table = ddl.split()[2]
    with pytest.raises(StoreError) as e:
        Rewind(path)
    message = str(e.value)
    assert "is not a Rewind database" in message and path in message and table in message, message
    assert "created_at" not in message
    with open(path, "rb") as f:
        assert f.read() == before, "the other application's file was changed"
    assert sorted(os.listdir(tmp_path)) == ["app.db"], "a -wal or -shm file was left beside it"


def test_the_cli_names_a_foreign_file_instead_of_an_internal_error(tmp_path):
    path = str(tmp_path / "app.db")
    before = _foreign_sqlite(path, "CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT)")
    cli = subprocess.run([sys.executable, "-m", "rewind", "--db", path, "runs"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode != 0
    assert "is not a Rewind database" in cli.stderr, cli.stderr
    assert "internal error" not in cli.stderr and "created_at" not in cli.stderr, cli.stderr
    with open(path, "rb") as f:
        assert f.read() == before


@pytest.mark.parametrize("ddl", ["CREATE TABLE runs (id int PRIMARY KEY, name text)",
                                 "CREATE TABLE users (id int PRIMARY KEY, name text)"])
def test_another_apps_postgres_database_is_refused_and_left_as_it_was(pg_url, ddl):
    _foreign_postgres(pg_url, ddl)
    before = _pg_tables(pg_url)
    with pytest.raises(StoreError, match="is not a Rewind database") as e:
        open_store(pg_url)
    assert ddl.split()[2] in str(e.value) and "created_at" not in str(e.value)
    assert _pg_tables(pg_url) == before == ([ddl.split()[2]], [("precious",)] if "runs" in ddl else [])


def test_an_empty_file_and_a_rewind_file_in_another_journal_mode_open(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    rw = Rewind(str(empty))
    assert rw.list_runs() == []
    rw.close()
    # a Rewind file someone switched back to a rollback journal is Rewind's: WAL again
    conn = sqlite3.connect(str(empty))
    assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    conn.close()
    rw = Rewind(str(empty))
    assert rw.list_runs() == []
    rw.close()
    conn = sqlite3.connect(str(empty))
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
