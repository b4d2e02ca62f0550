"""The schema, spelled once: every table Rewind owns, its columns, their types and meaning.

The DDL (`Table.ddl`), the column tuples the SQL selects (`RUN_COLUMNS`, ...), row decoding
(`Table.row`), the import document's field rules (`Column.kind`) and the benchmark's synthetic
store (bench/synth.py) all read this module; nothing else names a column list. A column added
after the first layout says in which schema version (`since`); `migrations` adds it to older
databases. `burr_state` is Burr's persister table: its DDL is Burr's (created through the
persister), only its columns are listed here.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional, Sequence

# Portable type names, mapped to each backend's by its `types` dict.
TEXT, INT, BIGINT, FLOAT, BLOB = "text", "int", "bigint", "float", "blob"
_NATIVE = {TEXT: "TEXT", INT: "INTEGER"}


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    type: str = TEXT
    required: bool = False  # NOT NULL
    default: Any = None  # SQL DEFAULT; an imported NULL takes it too
    # What a value means, for the import document's checks (maintenance.documents):
    # ident (a non-empty name or id), text, int, number, hash (sha256 hex), json (JSON text),
    # refs (JSON text of {field: blob hash}), run_status, step_status, any.
    kind: str = "text"
    since: int = 1  # the schema version that added it

    def ddl(self, types: dict) -> str:
        sql = f"{self.name} {types.get(self.type) or _NATIVE[self.type]}"
        if self.required:
            sql += " NOT NULL"
        if self.default is not None:
            sql += f" DEFAULT {self.default}"
        return sql


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    columns: tuple
    primary_key: tuple = ()
    indexes: tuple = ()  # (index name, (columns...)[, partial index WHERE clause])

    @property
    def names(self) -> tuple:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"table {self.name} has no column {name!r}")

    def columns_since(self, version: int) -> list:
        return [c for c in self.columns if c.since == version]

    def ddl(self, types: dict) -> list:
        """CREATE TABLE (all current columns) and its indexes, for a fresh database."""
        body = [c.ddl(types) for c in self.columns]
        if self.primary_key:
            body.append(f"PRIMARY KEY ({', '.join(self.primary_key)})")
        out = [f"CREATE TABLE IF NOT EXISTS {self.name} ({', '.join(body)})"]
        out += [self.index_ddl(n) for n, *_ in self.indexes]
        return out

    def index_ddl(self, name: str) -> str:
        for n, cols, *where in self.indexes:
            if n == name:
                sql = f"CREATE INDEX IF NOT EXISTS {n} ON {self.name} ({', '.join(cols)})"
                return sql + (f" WHERE {where[0]}" if where else "")
        raise KeyError(f"table {self.name} has no index {name!r}")

    def row(self, values: Sequence, names: Optional[Sequence[str]] = None) -> dict:
        """A selected row as {column: value}; driver byte views become bytes."""
        return {k: bytes(v) if isinstance(v, memoryview) else v
                for k, v in zip(names or self.names, values)}

    def defaults(self) -> dict:
        """{column: default} of the columns an absent value falls back on (import)."""
        return {c.name: c.default for c in self.columns if c.default is not None}


C = Column
SCHEMA_VERSION_TABLE = Table("schema_version", (C("version", INT, required=True, kind="int"),))
RUNS = Table(
    "runs",
    (
        C("id", required=True, kind="ident"), C("pipeline", required=True, kind="ident"),
        C("status", required=True, kind="run_status"), C("parent_id", kind="ident"),
        C("fork_node", kind="ident"), C("fork_occurrence", INT, kind="int"), C("graph_id"),
        C("entrypoint"), C("created_at", FLOAT, required=True, kind="number"),
        C("finished_at", FLOAT, kind="number"), C("summary"),
        C("total_tokens", BIGINT, default=0, kind="int"),
        C("tokens_saved", BIGINT, default=0, kind="int"),
        C("latency_ms", FLOAT, default=0, kind="number"),
        C("step_count", INT, default=0, kind="int"), C("edit_json", kind="json"),
        C("params_json", kind="json"), C("allow_side_effects", INT, default=0, kind="int"),
        C("use_cache", INT, default=1, kind="int"), C("error"), C("owner_host"),
        C("owner_pid", INT, kind="int"), C("owner_started", FLOAT, kind="number"),
        C("heartbeat_at", FLOAT, kind="number"), C("start_seq", INT, kind="int"),
        C("fork_index", INT, default=0, kind="int"),
        # who the run belongs to (a signed-in user's email); NULL: single-user mode
        C("owner", kind="text", since=3),
        # per call that drove it (run, then each resume): its first step and halts (engine.turns)
        C("turns_json", kind="json", since=9),
    ),
    primary_key=("id",),
    indexes=(("runs_created", ("created_at",)), ("runs_pipeline", ("pipeline", "created_at")),
             ("runs_status", ("status", "created_at")),
             # partial (schema version 8): a first run has no parent and a single-user run no
             # owner, and a query names the value it wants (`= ?`, IS NOT NULL), which implies
             # the WHERE: those runs are in no entry of these indexes, and write none
             ("runs_parent", ("parent_id", "created_at"), "parent_id IS NOT NULL"),
             ("runs_owner", ("owner", "created_at"), "owner IS NOT NULL")),
)
# What a run search matches substrings of (`list_runs(search=...)`); schema version 5 indexes
# them by trigrams (SQLite: an FTS5 table kept by triggers; PostgreSQL: pg_trgm GIN indexes).
SEARCH_COLUMNS = ("id", "summary", "pipeline")
# One row per step. Space-saving conventions (undone when read, see `rows`): `state_app_id`
# NULL means the row's own run; `reason` NULL means the default for its status; what a step
# shares with the step it was cached from lives in its content-addressed `doc` (a blob).
NODES = Table(
    "nodes",
    (
        C("run_id", required=True, kind="ident"), C("idx", INT, required=True, kind="int"),
        C("node", required=True, kind="ident"), C("occurrence", INT, required=True, kind="int"),
        C("status", required=True, kind="step_status"), C("sequence_id", INT, kind="int"),
        C("state_app_id", kind="ident"), C("input_hash", kind="hash"),
        C("output_hash", kind="hash"), C("field_hashes", kind="json"), C("params", kind="json"),
        C("inputs", kind="refs"), C("outputs", kind="refs"),
        C("prompt_tokens", BIGINT, default=0, kind="int"),
        C("completion_tokens", BIGINT, default=0, kind="int"),
        C("tokens", BIGINT, default=0, kind="int"),
        C("tokens_saved", BIGINT, default=0, kind="int"),
        C("latency_ms", FLOAT, default=0, kind="number"), C("reason"), C("error"),
        C("started_at", FLOAT, kind="number"), C("source_run", kind="ident"),
        C("doc", kind="hash", since=2),
    ),
    primary_key=("run_id", "idx"),
)
EDGES = Table(
    "edges",
    (C("graph_id", required=True, kind="ident"), C("ord", INT, required=True, kind="int"),
     C("src", required=True, kind="ident"), C("dst"), C("condition")),
    primary_key=("graph_id", "ord"),
)
CACHE = Table(
    "cache",
    (
        C("node", required=True, kind="ident"), C("input_hash", required=True, kind="hash"),
        C("output_hash", required=True, kind="hash"), C("outputs", required=True, kind="refs"),
        C("prompt_tokens", BIGINT, default=0, kind="int"),
        C("completion_tokens", BIGINT, default=0, kind="int"),
        C("tokens", BIGINT, default=0, kind="int"),
        C("latency_ms", FLOAT, default=0, kind="number"),
        C("cached_at", FLOAT, required=True, kind="number"),
        C("hits", BIGINT, default=0, kind="int"), C("determinism"), C("source_run", kind="ident"),
        # what a hit needs beside the values (key hashes of the outputs, files read) and what
        # a later miss is explained against (the visit's field hashes and code units)
        C("meta", kind="json", since=3),
        # the visit's key without its code: finds the last visit with these same inputs
        C("shape_hash", kind="hash", since=3),
    ),
    primary_key=("node", "input_hash"),
    indexes=(("cache_cached_at", ("cached_at",)), ("cache_shape", ("node", "shape_hash"))),
)
TOOL_CACHE = Table(
    "tool_cache",
    (C("tool", required=True), C("args_hash", required=True), C("result_hash", required=True),
     C("cached_at", FLOAT, required=True), C("hits", BIGINT, default=0)),
    primary_key=("tool", "args_hash"),
)
BLOBS = Table(
    "blobs",
    (C("hash", required=True), C("data", BLOB, required=True), C("size", BIGINT, required=True),
     C("created_at", FLOAT, required=True),
     # NULL: the bytes are `data`; else the object store holding them (`data` empty), see objects
     C("location", since=10)),
    primary_key=("hash",),
)
ALARMS = Table(
    "alarms",
    (C("node", required=True), C("input_hash", required=True), C("output_hash_a", required=True),
     C("output_hash_b", required=True), C("run_id"), C("created_at", FLOAT, required=True)),
    primary_key=("node", "input_hash", "output_hash_b"),
)
# Burr's table (DDL by Burr's persister; `state` is TEXT on SQLite, JSONB on PostgreSQL).
BURR_TABLE = "burr_state"
BURR_STATE = Table(
    BURR_TABLE,
    (C("partition_key", kind="ident"), C("app_id", required=True, kind="ident"),
     C("sequence_id", INT, required=True, kind="int"), C("position", required=True, kind="ident"),
     C("status", required=True, kind="ident"), C("state", required=True, kind="any")),
    primary_key=("partition_key", "app_id", "sequence_id", "position"),
)

# The tables Rewind creates itself, in creation order.
OWN_TABLES = (SCHEMA_VERSION_TABLE, RUNS, NODES, EDGES, CACHE, TOOL_CACHE, BLOBS, ALARMS)
TABLES = {t.name: t for t in (*OWN_TABLES, BURR_STATE)}

RUN_COLUMNS = RUNS.names
NODE_COLUMNS = NODES.names
CACHE_COLUMNS = CACHE.names
ALARM_COLUMNS = ALARMS.names
EDGE_COLUMNS = EDGES.names
BLOB_COLUMNS = BLOBS.names
# the burr_state columns an export carries (created_at is Burr's own timestamp)
STATE_COLUMNS = ("partition_key", "app_id", "sequence_id", "position", "status", "state")


@functools.lru_cache(maxsize=256)
def _insert_sql(table: str, cols: tuple) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


def insert_sql(table: str, columns: Optional[Sequence[str]] = None) -> str:
    """INSERT of `columns` (default: all) into `table`, `?` placeholders."""
    return _insert_sql(table, tuple(columns or TABLES[table].names))


def select_sql(table: str, columns: Optional[Sequence[str]] = None) -> str:
    return f"SELECT {', '.join(columns or TABLES[table].names)} FROM {table}"
