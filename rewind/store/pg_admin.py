"""PostgreSQL server administration for tests and tools: fresh databases, dropping them, and
URLs without their password (for messages).

`create_test_database(base_url)` / `drop_database(url)` give each test a database of its own.
"""

from __future__ import annotations

import re
import uuid
from typing import Optional
from urllib.parse import urlsplit, urlunsplit

from ..errors import InvalidRequest, StoreError
from ..redaction import redact_url

CONNECT_TIMEOUT_S = 10
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _with_dbname(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/") or "postgres"


def _admin_connect(url: str):
    """An autocommit connection to the server of `url`, on a database other than the target."""
    import psycopg2

    last: Optional[Exception] = None
    for db in ("postgres", "template1", _dbname(url)):
        try:
            conn = psycopg2.connect(_with_dbname(url, db), connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg2.Error as e:
            last = e
            continue
        conn.autocommit = True
        return conn
    raise StoreError(f"cannot connect to the server of {redact_url(url)}: {last}")


def create_test_database(base_url: str, prefix: str = "rewind_t") -> str:
    """Create a uniquely named, empty database on the server of `base_url`; return its URL."""
    if not base_url.startswith(("postgresql://", "postgres://")):
        raise InvalidRequest(f"{base_url!r} is not a postgresql:// URL")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}".lower()
    if not _DB_NAME.match(name):
        raise InvalidRequest(f"database name {name!r} is not a plain identifier")
    _admin_run(base_url, f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING \'UTF8\'',
               f"cannot create database {name} on {redact_url(base_url)}")
    return _with_dbname(base_url, name)


def drop_database(url: str) -> None:
    """Drop the database of `url` (made by `create_test_database`), closing its sessions."""
    name = _dbname(url)
    if not _DB_NAME.match(name):
        raise InvalidRequest(f"refusing to drop {name!r}: not a plain identifier")
    if name in ("postgres", "template0", "template1"):
        raise InvalidRequest(f"refusing to drop the system database {name!r}")
    _admin_run(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f"cannot drop database {name}")


def _admin_run(url: str, sql: str, failure: str) -> None:
    """Run one statement on the server's maintenance connection; `StoreError` saying `failure`."""
    import psycopg2

    conn = _admin_connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    except psycopg2.Error as e:
        raise StoreError(f"{failure}: {e}") from e
    finally:
        conn.close()
