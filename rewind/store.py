"""Storage: one interface (`Store`), two backends (SQLite by default, PostgreSQL for teams).

The store owns every table: runs, nodes (one row per step), edges (each pipeline graph once),
cache, tool_cache, blobs (content-addressed values, stored once), alarms, burr_state (Burr's own
persister, subclassed so its rows refer to blobs) and the schema version. The engine and the UI
only talk to it through the methods below; the SQL is shared, and a backend supplies its
connection, its types and its persister.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import json
import os
import socket
import threading
import time
from typing import Any, Iterable, Iterator, Optional, Sequence

from . import serde
from .errors import IntegrityError, InvalidRequest, NotFound, StoreError
from .hashing import canonical_hash, sha256_hex, canonical_json

SCHEMA_VERSION = 1
PARTITION_KEY = "rewind"
BURR_TABLE = "burr_state"
REFS_KEY = "__rewind_refs__"  # a state row of the first layout: {REFS_KEY: {field: hash}, ...}
# A state row now holds the hash of its {field: hash} doc (a blob) instead of the map:
#   {DOC_KEY: hash, <Burr's internal keys>}, or, for the common row saved after a step whose
#   __PRIOR_STEP is the row's position and __SEQUENCE_ID its sequence_id, just {STEP_DOC_KEY: hash}
#   (those two keys are restored from the row's columns when it is read).
DOC_KEY = "__rw"
STEP_DOC_KEY = "__rws"
PRIOR_STEP_KEY, SEQUENCE_ID_KEY = "__PRIOR_STEP", "__SEQUENCE_ID"
DOC_MEMORY = 50_000  # parsed docs (state refs maps, step docs) kept in memory per store
HEARTBEAT_LEASE_S = 60.0
BLOB_MEMORY_BYTES = 32 << 20  # verified blobs kept in memory per store
_IMMUTABLE = (str, int, float, bool, type(None))

RUN_COLUMNS = (
    "id", "pipeline", "status", "parent_id", "fork_node", "fork_occurrence", "graph_id",
    "entrypoint", "created_at", "finished_at", "summary", "total_tokens", "tokens_saved",
    "latency_ms", "step_count", "edit_json", "params_json", "allow_side_effects", "use_cache",
    "error", "owner_host", "owner_pid", "owner_started", "heartbeat_at", "start_seq",
    "fork_index",
)
NODE_COLUMNS = (
    "run_id", "idx", "node", "occurrence", "status", "sequence_id", "state_app_id",
    "input_hash", "output_hash", "field_hashes", "params", "inputs", "outputs",
    "prompt_tokens", "completion_tokens", "tokens", "tokens_saved", "latency_ms", "reason",
    "error", "started_at", "source_run", "doc",
)
# What a step row keeps in its content-addressed doc (a blob) instead of in columns: a cached
# step and its parent's step share one doc, so a no-edit fork adds no copy of them.
# Space-saving conventions of a step row (all undone by `engine.step_from_row`):
# - `state_app_id` is NULL when it is the row's own run id;
# - `reason` is NULL when it is the default for its status (see `default_reason`);
# - an inherited row's `input_hash` is NULL (it is in the doc).
STEP_DOC_FIELDS = ("field_hashes", "params", "inputs", "outputs", "output_hash", "input_hash")


def default_reason(status: str, source_run: Optional[str], parent_id: Optional[str]) -> Optional[str]:
    """The reason a cached or inherited step gets unless something more is said."""
    if status == "cached":
        return f"cache hit: same inputs as run {source_run}" if source_run else "cache hit"
    if status == "inherited" and parent_id:
        return f"inherited from run {parent_id}"
    return None


def is_pointer(row: dict) -> bool:
    """An inherited step stored as a pointer: only (run_id, idx, node, occurrence, status); the
    rest is its run's parent's step `idx` (see `inherit_row`). A fork adds no copies of the
    steps it inherits; gc turns pointers into full rows before it purges the parent."""
    return (row["status"] == "inherited" and row.get("doc") is None
            and row.get("field_hashes") is None and row.get("input_hash") is None)


def pointer_row(parent_row: dict, run_id: str, idx: int) -> dict:
    return {"run_id": run_id, "idx": idx, "node": parent_row["node"],
            "occurrence": parent_row["occurrence"], "status": "inherited", "prompt_tokens": 0,
            "completion_tokens": 0, "tokens": 0, "tokens_saved": 0, "latency_ms": 0.0}


def inherit_row(parent_row: dict, run_id: str, idx: int) -> dict:
    """Step `idx` of a fork as inherited from its parent's step row (resolved)."""
    p = parent_row
    return {
        **p, "run_id": run_id, "idx": idx, "status": "inherited", "prompt_tokens": 0,
        "completion_tokens": 0, "tokens": 0, "tokens_saved": 0, "latency_ms": 0.0,
        "reason": None, "error": None,  # NULL: the default reason, naming the run's parent
        "source_run": p["run_id"] if p["status"] != "inherited" else p["source_run"],
        "state_app_id": row_state_app(p),
        # in the doc it shares with the parent's row (a first-layout row has no doc)
        "input_hash": None if p.get("doc") else p["input_hash"],
    }


def row_state_app(row: dict) -> Optional[str]:
    """The app id of the saved state a step row points at (NULL in the row means its run)."""
    if row.get("sequence_id") is None:
        return row.get("state_app_id")
    return row.get("state_app_id") or row.get("run_id")
CACHE_COLUMNS = (
    "node", "input_hash", "output_hash", "outputs", "prompt_tokens", "completion_tokens",
    "tokens", "latency_ms", "cached_at", "hits", "determinism", "source_run",
)


def _schema(t: dict) -> list:
    """DDL shared by both backends; `t` maps the portable type names to the backend's."""
    return [
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
        f"""CREATE TABLE IF NOT EXISTS runs (
            id TEXT PRIMARY KEY, pipeline TEXT NOT NULL, status TEXT NOT NULL,
            parent_id TEXT, fork_node TEXT, fork_occurrence INTEGER, graph_id TEXT,
            entrypoint TEXT, created_at {t['float']} NOT NULL, finished_at {t['float']},
            summary TEXT, total_tokens {t['bigint']} DEFAULT 0, tokens_saved {t['bigint']} DEFAULT 0,
            latency_ms {t['float']} DEFAULT 0, step_count INTEGER DEFAULT 0, edit_json TEXT,
            params_json TEXT, allow_side_effects INTEGER DEFAULT 0, use_cache INTEGER DEFAULT 1,
            error TEXT, owner_host TEXT, owner_pid INTEGER, owner_started {t['float']},
            heartbeat_at {t['float']}, start_seq INTEGER, fork_index INTEGER DEFAULT 0)""",
        "CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at)",
        "CREATE INDEX IF NOT EXISTS runs_pipeline ON runs (pipeline, created_at)",
        "CREATE INDEX IF NOT EXISTS runs_status ON runs (status, created_at)",
        "CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_id, created_at)",
        f"""CREATE TABLE IF NOT EXISTS nodes (
            run_id TEXT NOT NULL, idx INTEGER NOT NULL, node TEXT NOT NULL,
            occurrence INTEGER NOT NULL, status TEXT NOT NULL, sequence_id INTEGER,
            state_app_id TEXT, input_hash TEXT, output_hash TEXT, field_hashes TEXT,
            params TEXT, inputs TEXT, outputs TEXT, prompt_tokens {t['bigint']} DEFAULT 0,
            completion_tokens {t['bigint']} DEFAULT 0, tokens {t['bigint']} DEFAULT 0,
            tokens_saved {t['bigint']} DEFAULT 0, latency_ms {t['float']} DEFAULT 0,
            reason TEXT, error TEXT, started_at {t['float']}, source_run TEXT, doc TEXT,
            PRIMARY KEY (run_id, idx))""",
        f"""CREATE TABLE IF NOT EXISTS edges (
            graph_id TEXT NOT NULL, ord INTEGER NOT NULL, src TEXT NOT NULL, dst TEXT,
            condition TEXT, PRIMARY KEY (graph_id, ord))""",
        f"""CREATE TABLE IF NOT EXISTS cache (
            node TEXT NOT NULL, input_hash TEXT NOT NULL, output_hash TEXT NOT NULL,
            outputs TEXT NOT NULL, prompt_tokens {t['bigint']} DEFAULT 0,
            completion_tokens {t['bigint']} DEFAULT 0, tokens {t['bigint']} DEFAULT 0,
            latency_ms {t['float']} DEFAULT 0, cached_at {t['float']} NOT NULL,
            hits {t['bigint']} DEFAULT 0, determinism TEXT, source_run TEXT,
            PRIMARY KEY (node, input_hash))""",
        "CREATE INDEX IF NOT EXISTS cache_cached_at ON cache (cached_at)",
        f"""CREATE TABLE IF NOT EXISTS tool_cache (
            tool TEXT NOT NULL, args_hash TEXT NOT NULL, result_hash TEXT NOT NULL,
            cached_at {t['float']} NOT NULL, hits {t['bigint']} DEFAULT 0,
            PRIMARY KEY (tool, args_hash))""",
        f"""CREATE TABLE IF NOT EXISTS blobs (
            hash TEXT PRIMARY KEY, data {t['blob']} NOT NULL, size {t['bigint']} NOT NULL,
            created_at {t['float']} NOT NULL)""",
        f"""CREATE TABLE IF NOT EXISTS alarms (
            node TEXT NOT NULL, input_hash TEXT NOT NULL, output_hash_a TEXT NOT NULL,
            output_hash_b TEXT NOT NULL, run_id TEXT, created_at {t['float']} NOT NULL,
            PRIMARY KEY (node, input_hash, output_hash_b))""",
    ]


def process_started(pid: int) -> Optional[float]:
    """The start time of a process (Linux clock ticks since boot), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return float(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int, started: Optional[float]) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return False  # a zombie: dead, only not yet reaped by its parent
    except (OSError, IndexError):
        pass
    now_started = process_started(pid)
    return started is None or now_started is None or abs(now_started - started) < 1e-6


HOST = socket.gethostname()
PID = os.getpid()


def _decodes_to(data: bytes, h: str) -> bool:
    """Do stored bytes decode to a value whose canonical hash is `h`? Bytes that no longer
    decode at all (truncated, overwritten) are as corrupt as a wrong value."""
    try:
        return canonical_hash(serde.decode(data)) == h
    except Exception:
        return False


def invalid_unicode(e: UnicodeEncodeError) -> InvalidRequest:
    return InvalidRequest(
        f"a value is not valid Unicode text ({e.reason} at position {e.start}); "
        "lone surrogates cannot be stored or searched for"
    )


def refs_json(refs: dict) -> str:
    return json.dumps(refs, sort_keys=True, separators=(",", ":"))


def make_doc(doc: dict) -> tuple:
    """(hash, bytes) of a content-addressed document (plain JSON data): its canonical JSON,
    stored as a blob, so `get_blobs` verifies it by its raw digest."""
    data = canonical_json(doc)
    return sha256_hex(data), data


class Store(abc.ABC):
    """What the engine needs from a database. Backends subclass `SQLStore` below."""

    url: str

    # blobs ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def put_blobs(self, blobs: dict) -> None: ...

    @abc.abstractmethod
    def get_blobs(self, hashes: Iterable[str]) -> dict: ...

    # runs and steps ------------------------------------------------------------------------
    @abc.abstractmethod
    def insert_run(self, row: dict) -> None: ...

    @abc.abstractmethod
    def update_run(self, run_id: str, **fields: Any) -> None: ...

    @abc.abstractmethod
    def get_run_row(self, run_id: str) -> Optional[dict]: ...

    @abc.abstractmethod
    def list_run_rows(self, **filters: Any) -> list: ...

    @abc.abstractmethod
    def get_node_rows(self, run_id: str) -> list: ...

    # cache ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def cache_get(self, node: str, input_hash: str) -> Optional[dict]: ...

    @abc.abstractmethod
    def tool_cache_get(self, tool: str, args_hash: str, ttl: Optional[float], now: float): ...

    @abc.abstractmethod
    def tool_cache_put(self, tool: str, args_hash: str, result: Any, now: float) -> None: ...


class SQLStore(Store):
    """The SQL every backend shares. Placeholders are written `?`; backends translate."""

    placeholder = "?"
    types = {"float": "REAL", "bigint": "INTEGER", "blob": "BLOB"}

    def __init__(self, url: str):
        self.url = url
        self._local = threading.local()
        self._all_connections: list = []
        self._lock = threading.Lock()
        self.live_contexts: dict = {}  # app_id -> execution context (field hashes of its state)
        # Blobs this process read and verified, oldest first, up to BLOB_MEMORY_BYTES: a
        # content-addressed value never changes, so a hot blob (a cached output that every
        # fork replays) is served from memory. Immutable values are kept decoded (shared
        # safely), others as bytes (decoded per read, so no caller sees another's mutation).
        self._verified: collections.OrderedDict = collections.OrderedDict()
        self._verified_bytes = 0
        self._docs: collections.OrderedDict = collections.OrderedDict()
        self._doc_memo: dict = {}
        self._create_schema()
        self.recover_interrupted()

    # connections ---------------------------------------------------------------------------
    @abc.abstractmethod
    def _connect(self): ...

    @abc.abstractmethod
    def _make_persister(self, connection): ...

    def _slot(self):
        slot = getattr(self._local, "slot", None)
        if slot is None or slot.get("pid") != os.getpid():
            connection = self._connect()
            slot = {"pid": os.getpid(), "conn": connection, "persister": None,
                    "thread": threading.current_thread()}
            self._local.slot = slot
            with self._lock:
                # A server that runs each request on a new thread (Streamlit: one per rerun)
                # would otherwise keep one open connection per finished thread.
                dead = [s for s in self._all_connections
                        if s.get("pid") == os.getpid() and not s["thread"].is_alive()]
                self._all_connections = [s for s in self._all_connections if s not in dead]
                self._all_connections.append(slot)
            for s in dead:
                s["persister"] = None
                try:
                    s["conn"].close()
                except Exception:
                    pass
        return slot

    @property
    def connection(self):
        return self._slot()["conn"]

    def persister(self):
        """This thread's Burr persister; it lives as long as its connection (Burr closes the
        connection in the persister's `__del__`)."""
        slot = self._slot()
        if slot["persister"] is None:
            slot["persister"] = self._make_persister(slot["conn"])
        return slot["persister"]

    def close(self) -> None:
        """Close this process's connections. A connection inherited across fork() belongs to
        the parent: closing it here would end the parent's session (PostgreSQL's Terminate)."""
        pid = os.getpid()
        with self._lock:
            mine = [s for s in self._all_connections if s.get("pid") == pid]
            self._all_connections = [s for s in self._all_connections if s.get("pid") != pid]
        for slot in mine:
            slot["persister"] = None
            try:
                slot["conn"].close()
            except Exception:
                pass
        self._local = threading.local()

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def execute(self, sql: str, params: Sequence = ()):
        cur = self.connection.cursor()
        try:
            cur.execute(self._sql(sql), tuple(params))
        except UnicodeEncodeError as e:
            raise invalid_unicode(e) from None
        return cur

    def executemany(self, sql: str, rows: Sequence) -> None:
        """One statement over many parameter rows (backends may batch it)."""
        for params in rows:
            self.execute(sql, params)

    def query(self, sql: str, params: Sequence = ()) -> list:
        cur = self.execute(sql, params)
        rows = cur.fetchall()
        self._end_read()
        return rows

    def _end_read(self) -> None:
        """Backends whose reads open a transaction end it here."""

    @abc.abstractmethod
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]: ...

    def _create_schema(self) -> None:
        with self.transaction():
            for ddl in _schema(self.types):
                self.execute(ddl)
            rows = self.execute("SELECT version FROM schema_version").fetchall()
            if not rows:
                self.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif rows[0][0] > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.url} has schema version {rows[0][0]}, newer than this Rewind "
                    f"({SCHEMA_VERSION}); upgrade Rewind to open it"
                )
            self._add_column_if_missing("nodes", "doc", "TEXT")
        self.persister().initialize()

    @abc.abstractmethod
    def _add_column_if_missing(self, table: str, column: str, ddl_type: str) -> None:
        """A database created before `column` existed gets it (NULL in its old rows)."""

    # blobs ---------------------------------------------------------------------------------
    def put_blobs(self, blobs: dict) -> None:
        """Insert values once: `blobs` maps a content hash to encoded bytes."""
        now = time.time()
        self.executemany(
            "INSERT INTO blobs (hash, data, size, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (hash) DO NOTHING",
            [(h, data, len(data), now) for h, data in blobs.items()],
        )

    def get_blobs(self, hashes: Iterable[str]) -> dict:
        """Decoded values by hash; each checked against its hash (`IntegrityError` if not)."""
        wanted = [h for h in dict.fromkeys(hashes) if h]
        out = {}
        missing = []
        verified = self._verified
        for h in wanted:
            hit = verified.get(h)
            if hit is None:
                missing.append(h)
            else:
                out[h] = hit[0]
        for i in range(0, len(missing), 500):
            chunk = missing[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for h, data in self.query(f"SELECT hash, data FROM blobs WHERE hash IN ({marks})", chunk):
                data = bytes(data)
                # Fast path: for most values (strings, sorted plain data) the stored bytes are
                # the canonical JSON itself; otherwise decode and re-hash.
                if sha256_hex(data) != h and not _decodes_to(data, h):
                    raise IntegrityError(
                        f"blob {h[:12]}… no longer matches its hash: the database was altered "
                        "outside Rewind; run `python -m rewind gc` to drop it"
                    )
                out[h] = self._remember(h, data)
        for h in missing:
            if h not in out:
                raise NotFound(f"blob {h[:12]}… is missing from {self.url}")
        return {h: serde.decode(out[h]) if isinstance(out[h], bytes) else out[h] for h in wanted}

    def _remember(self, h: str, data: bytes) -> Any:
        """Keep a verified blob (decoded if immutable); returns what `get_blobs` hands out."""
        value = serde.decode(data)
        kept = value if type(value) in _IMMUTABLE else data
        with self._lock:
            if h not in self._verified:
                self._verified[h] = (kept, len(data))
                self._verified_bytes += len(data)
                while self._verified_bytes > BLOB_MEMORY_BYTES and self._verified:
                    _, (_, size) = self._verified.popitem(last=False)
                    self._verified_bytes -= size
        return kept

    def existing_blobs(self, hashes: Sequence[str]) -> set:
        """Which of these blob hashes the database holds now (not the in-memory copies)."""
        found: set = set()
        for i in range(0, len(hashes), 500):
            chunk = list(hashes[i : i + 500])
            found.update(
                r[0] for r in self.query(
                    f"SELECT hash FROM blobs WHERE hash IN ({','.join('?' * len(chunk))})", chunk
                )
            )
        return found

    def forget_blobs(self) -> None:
        """Drop the in-memory blobs (after a gc deleted rows from `blobs`)."""
        with self._lock:
            self._verified.clear()
            self._verified_bytes = 0
            self._docs.clear()

    def memo_doc(self, key: tuple, build) -> tuple:
        """(hash, bytes) of the doc `build()` returns, remembered under `key` (a tuple that
        determines the doc): a replay makes the same docs its parent made, so it skips their
        encoding and hashing. The bytes are still written (INSERT .. DO NOTHING) each time."""
        memo = self._doc_memo
        got = memo.get(key)
        if got is None:
            got = make_doc(build())
            if len(memo) >= DOC_MEMORY:
                memo.clear()
            memo[key] = got
        return got

    def get_docs(self, hashes: Iterable[str]) -> dict:
        """Parsed content-addressed docs by hash (verified like any blob). The dicts are shared
        between callers: read them, never mutate them."""
        docs = self._docs
        out = {}
        missing = []
        for h in hashes:
            if not h or h in out:
                continue
            d = docs.get(h)
            if d is None:
                missing.append(h)
            else:
                out[h] = d
        if missing:
            got = self.get_blobs(missing)
            with self._lock:
                for h in missing:
                    d = got[h]
                    if not isinstance(d, dict):
                        raise IntegrityError(f"blob {h[:12]}… is not a Rewind document")
                    out[h] = docs[h] = d
                while len(docs) > DOC_MEMORY:
                    docs.popitem(last=False)
        return out

    def values(self, refs: dict) -> dict:
        """Resolve a {field: blob hash} mapping into {field: value}."""
        if not refs:
            return {}
        blobs = self.get_blobs(refs.values())
        return {k: blobs[h] for k, h in refs.items()}

    # runs ----------------------------------------------------------------------------------
    def insert_run(self, row: dict) -> None:
        cols = [c for c in RUN_COLUMNS if c in row]
        self.execute(
            f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            [row[c] for c in cols],
        )

    def update_run(self, run_id: str, **fields: Any) -> None:
        unknown = set(fields) - set(RUN_COLUMNS)
        if unknown:
            raise ValueError(f"unknown run columns {sorted(unknown)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*fields.values(), run_id])

    def get_run_row(self, run_id: str) -> Optional[dict]:
        rows = self.query(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id = ?", (run_id,))
        return dict(zip(RUN_COLUMNS, rows[0])) if rows else None

    def get_run_rows(self, run_ids: Sequence[str]) -> dict:
        out = {}
        ids = list(dict.fromkeys(i for i in run_ids if i))
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            for row in self.query(
                f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id IN ({','.join('?' * len(chunk))})",
                chunk,
            ):
                out[row[0]] = dict(zip(RUN_COLUMNS, row))
        return out

    @staticmethod
    def _like(text: str) -> str:
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return f"%{escaped}%"

    def _run_filters(self, pipeline=None, status=None, parent_id=None, search=None, forks_only=False):
        where, params = [], []
        if pipeline:
            where.append("pipeline = ?")
            params.append(pipeline)
        if status:
            where.append("status = ?")
            params.append(status)
        if parent_id:
            where.append("parent_id = ?")
            params.append(parent_id)
        if forks_only:
            where.append("parent_id IS NOT NULL")
        if search:
            # LIKE stops at a NUL on SQLite (matching everything) and PostgreSQL text cannot
            # hold one: display text stores NUL as U+FFFD, so search for that
            like = self._like(str(search).replace("\x00", "\ufffd"))
            where.append(
                "(id LIKE ? ESCAPE '\\' OR summary LIKE ? ESCAPE '\\' OR pipeline LIKE ? ESCAPE '\\')"
            )
            params += [like, like, like]
        return (" WHERE " + " AND ".join(where)) if where else "", params

    def list_run_rows(self, limit: int = 50, offset: int = 0, **filters: Any) -> list:
        clause, params = self._run_filters(**filters)
        rows = self.query(
            f"SELECT {', '.join(RUN_COLUMNS)} FROM runs{clause} "
            "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
            [*params, int(limit), int(offset)],
        )
        return [dict(zip(RUN_COLUMNS, r)) for r in rows]

    def count_runs(self, **filters: Any) -> int:
        clause, params = self._run_filters(**filters)
        return int(self.query(f"SELECT COUNT(*) FROM runs{clause}", params)[0][0])

    def pipelines(self) -> list:
        return [r[0] for r in self.query("SELECT DISTINCT pipeline FROM runs ORDER BY pipeline")]

    def children(self, run_id: str) -> list:
        rows = self.query(
            f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE parent_id = ? ORDER BY created_at",
            (run_id,),
        )
        return [dict(zip(RUN_COLUMNS, r)) for r in rows]

    # steps ---------------------------------------------------------------------------------
    def delete_failed_steps(self, run_id: str) -> None:
        """Drop a run's failed step rows (resume retries the step)."""
        self.execute("DELETE FROM nodes WHERE run_id = ? AND status = 'failed'", (run_id,))

    def insert_nodes(self, rows: list) -> None:
        self.executemany(
            f"INSERT INTO nodes ({', '.join(NODE_COLUMNS)}) VALUES "
            f"({', '.join('?' * len(NODE_COLUMNS))})",
            [[row.get(c) for c in NODE_COLUMNS] for row in rows],
        )

    def get_node_rows(self, run_id: str, parent_id: Any = False) -> list:
        """A run's step rows in order, inherited steps resolved (see `is_pointer`); pass the
        run's `parent_id` if known (saves a query when some of its rows are pointers)."""
        rows = self.query(
            f"SELECT {', '.join(NODE_COLUMNS)} FROM nodes WHERE run_id = ? ORDER BY idx", (run_id,)
        )
        rows = [dict(zip(NODE_COLUMNS, r)) for r in rows]
        return self._resolve_pointers(run_id, rows, parent_id)

    def raw_node_rows(self, run_id: str) -> list:
        """A run's step rows as stored (inherited steps may be pointers)."""
        rows = self.query(
            f"SELECT {', '.join(NODE_COLUMNS)} FROM nodes WHERE run_id = ? ORDER BY idx", (run_id,)
        )
        return [dict(zip(NODE_COLUMNS, r)) for r in rows]

    def _resolve_pointers(self, run_id: str, rows: list, parent_id: Any = False, depth: int = 0) -> list:
        if not any(is_pointer(r) for r in rows):
            return rows
        if parent_id is False:
            run = self.get_run_row(run_id)
            parent_id = run["parent_id"] if run else None
        parent_rows: dict = {}
        if parent_id:
            if depth > 10_000:
                raise StoreError(f"run {run_id}: its parent chain does not end")
            got = self.raw_node_rows(parent_id)
            parent_rows = {r["idx"]: r for r in self._resolve_pointers(parent_id, got, False, depth + 1)}
        out = []
        for r in rows:
            if is_pointer(r):
                p = parent_rows.get(r["idx"])
                if p is None:
                    raise NotFound(
                        f"step {r['idx']} of run {run_id} is inherited from run {parent_id}, "
                        "whose step rows are missing"
                    )
                r = inherit_row(p, run_id, r["idx"])
            out.append(r)
        return out

    def get_node_rows_for_runs(self, run_ids: Sequence[str]) -> dict:
        out: dict = {rid: [] for rid in run_ids}
        ids = list(run_ids)
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            for r in self.query(
                f"SELECT {', '.join(NODE_COLUMNS)} FROM nodes WHERE run_id IN "
                f"({','.join('?' * len(chunk))}) ORDER BY run_id, idx",
                chunk,
            ):
                row = dict(zip(NODE_COLUMNS, r))
                out[row["run_id"]].append(row)
        return {rid: self._resolve_pointers(rid, rows) for rid, rows in out.items()}

    # edges ---------------------------------------------------------------------------------
    def put_graph(self, graph_id: str, nodes: Sequence[str], edges: Sequence[tuple]) -> None:
        if self.query("SELECT 1 FROM edges WHERE graph_id = ? LIMIT 1", (graph_id,)):
            return
        with self.transaction():
            rows = [(n, None, None) for n in nodes] + list(edges)
            for i, (src, dst, cond) in enumerate(rows):
                self.execute(
                    "INSERT INTO edges (graph_id, ord, src, dst, condition) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (graph_id, ord) DO NOTHING",
                    (graph_id, i, src, dst, cond),
                )

    def get_graph(self, graph_id: str) -> tuple:
        """(node names in order, [(src, dst, condition)]) of a stored pipeline graph."""
        rows = self.query(
            "SELECT src, dst, condition FROM edges WHERE graph_id = ? ORDER BY ord", (graph_id,)
        )
        nodes = [r[0] for r in rows if r[1] is None]
        edges = [(r[0], r[1], r[2]) for r in rows if r[1] is not None]
        return nodes, edges

    # node cache ----------------------------------------------------------------------------
    def cache_get(self, node: str, input_hash: str) -> Optional[dict]:
        rows = self.query(
            f"SELECT {', '.join(CACHE_COLUMNS)} FROM cache WHERE node = ? AND input_hash = ?",
            (node, input_hash),
        )
        return dict(zip(CACHE_COLUMNS, rows[0])) if rows else None

    def cache_get_many(self, keys: Sequence[tuple]) -> dict:
        """{(node, input_hash): entry} for the keys that have a cache entry (one query)."""
        keys = list(dict.fromkeys(k for k in keys if k[1]))
        out: dict = {}
        for i in range(0, len(keys), 200):
            chunk = keys[i : i + 200]
            where = " OR ".join(["(node = ? AND input_hash = ?)"] * len(chunk))
            for r in self.query(f"SELECT {', '.join(CACHE_COLUMNS)} FROM cache WHERE {where}",
                                [x for k in chunk for x in k]):
                entry = dict(zip(CACHE_COLUMNS, r))
                out[(entry["node"], entry["input_hash"])] = entry
        return out

    def cache_put(self, row: dict, keep_existing: bool = False) -> None:
        """Insert a cache entry; replace an existing one unless `keep_existing` (a
        deterministic entry keeps its first output)."""
        cols = list(CACHE_COLUMNS)
        updates = ", ".join(
            f"{c} = excluded.{c}" for c in cols if c not in ("node", "input_hash", "hits")
        )
        conflict = "DO NOTHING" if keep_existing else f"DO UPDATE SET {updates}"
        self.execute(
            f"INSERT INTO cache ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
            f"ON CONFLICT (node, input_hash) {conflict}",
            [row.get(c, 0 if c == "hits" else None) for c in cols],
        )

    def cache_hits(self, keys: list) -> None:
        self.executemany(
            "UPDATE cache SET hits = hits + 1 WHERE node = ? AND input_hash = ?",
            [tuple(k) for k in keys],
        )

    def cache_stats(self) -> dict:
        entries, hits, oldest = self.query("SELECT COUNT(*), COALESCE(SUM(hits), 0), MIN(cached_at) FROM cache")[0]
        tools, tool_hits = self.query("SELECT COUNT(*), COALESCE(SUM(hits), 0) FROM tool_cache")[0]
        blob_count, blob_bytes = self.query("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blobs")[0]
        return {
            "entries": int(entries), "hits": int(hits), "oldest": oldest,
            "tool_entries": int(tools), "tool_hits": int(tool_hits),
            "blobs": int(blob_count), "blob_bytes": int(blob_bytes),
        }

    # tool cache ----------------------------------------------------------------------------
    def tool_cache_get(self, tool: str, args_hash: str, ttl: Optional[float], now: float):
        rows = self.query(
            "SELECT result_hash, cached_at FROM tool_cache WHERE tool = ? AND args_hash = ?",
            (tool, args_hash),
        )
        if not rows or (ttl is not None and now - rows[0][1] >= ttl):
            return None
        try:
            value = self.get_blobs([rows[0][0]])[rows[0][0]]
        except (IntegrityError, NotFound):
            return None
        with self.transaction():
            self.execute(
                "UPDATE tool_cache SET hits = hits + 1 WHERE tool = ? AND args_hash = ?",
                (tool, args_hash),
            )
        return (value,)

    def tool_cache_put(self, tool: str, args_hash: str, result: Any, now: float) -> None:
        data = serde.encode(result, tool)
        h = canonical_hash(result, tool)
        with self.transaction():
            self.put_blobs({h: data})
            self.execute(
                "INSERT INTO tool_cache (tool, args_hash, result_hash, cached_at, hits) "
                "VALUES (?, ?, ?, ?, 0) ON CONFLICT (tool, args_hash) DO UPDATE SET "
                "result_hash = excluded.result_hash, cached_at = excluded.cached_at",
                (tool, args_hash, h, now),
            )

    # alarms --------------------------------------------------------------------------------
    def add_alarm(self, node: str, input_hash: str, hash_a: str, hash_b: str, run_id: str) -> None:
        self.execute(
            "INSERT INTO alarms (node, input_hash, output_hash_a, output_hash_b, run_id, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (node, input_hash, output_hash_b) DO NOTHING",
            (node, input_hash, hash_a, hash_b, run_id, time.time()),
        )

    def alarms(self, node: Optional[str] = None) -> list:
        cols = ("node", "input_hash", "output_hash_a", "output_hash_b", "run_id", "created_at")
        sql = f"SELECT {', '.join(cols)} FROM alarms"
        params: list = []
        if node:
            sql += " WHERE node = ?"
            params.append(node)
        return [dict(zip(cols, r)) for r in self.query(sql + " ORDER BY created_at", params)]

    # Burr state ------------------------------------------------------------------------------
    def load_state_refs(self, app_id: str, sequence_id: int) -> Optional[dict]:
        rows = self.query(
            f"SELECT state, position, sequence_id FROM {BURR_TABLE} WHERE partition_key = ? "
            "AND app_id = ? AND sequence_id = ?",
            (PARTITION_KEY, app_id, sequence_id),
        )
        if not rows:
            return None
        data, position, seq = rows[0]
        data = json.loads(data) if isinstance(data, (str, bytes)) else data
        return self.resolve_state_doc(data, position, seq)

    def resolve_state_doc(self, data: dict, position: Any, sequence_id: Any) -> dict:
        """A state row's document in its resolved form {REFS_KEY: {field: hash}, internal keys}
        (a row holds the refs map by hash, in a blob; rows of the first layout inline)."""
        h = data.get(DOC_KEY) or data.get(STEP_DOC_KEY)
        if h is None:
            return data
        out = {k: v for k, v in data.items() if k not in (DOC_KEY, STEP_DOC_KEY)}
        if STEP_DOC_KEY in data:
            out[PRIOR_STEP_KEY] = position
            out[SEQUENCE_ID_KEY] = int(sequence_id)
        out[REFS_KEY] = dict(self.get_docs([h])[h])
        return out

    def has_state(self, app_id: str, sequence_id: int) -> bool:
        return bool(self.query(
            f"SELECT 1 FROM {BURR_TABLE} WHERE partition_key = ? AND app_id = ? AND sequence_id = ?",
            (PARTITION_KEY, app_id, sequence_id),
        ))

    def insert_state_rows(self, rows: list) -> None:
        self.executemany(
            f"INSERT INTO {BURR_TABLE} (partition_key, app_id, sequence_id, position, "
            "state, status) VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )

    def state_snapshot(self, app_id: str, sequence_id: int) -> Optional[dict]:
        """The whole state Burr saved after a step, resolved from blobs."""
        data = self.load_state_refs(app_id, sequence_id)
        if data is None:
            return None
        refs = data.get(REFS_KEY, {})
        values = self.values(refs)
        values.update({k: v for k, v in data.items() if k != REFS_KEY})
        return values

    # liveness ------------------------------------------------------------------------------
    def recover_interrupted(self) -> list:
        """Mark runs whose owner process is gone as `interrupted`; return their ids."""
        now = time.time()
        rows = self.query(
            "SELECT id, owner_host, owner_pid, owner_started, heartbeat_at FROM runs WHERE status = 'running'"
        )
        dead = []
        for run_id, host, pid, started, heartbeat in rows:
            if host == HOST and pid is not None:
                if pid == PID and started == process_started(PID):
                    continue  # ours: a run in another thread of this process
                if process_alive(int(pid), started):
                    continue
            elif heartbeat is not None and now - heartbeat < HEARTBEAT_LEASE_S:
                continue
            dead.append(run_id)
        for run_id in dead:
            with self.transaction():
                totals = self.query(
                    "SELECT COUNT(*), COALESCE(SUM(tokens), 0), COALESCE(SUM(tokens_saved), 0), "
                    "COALESCE(SUM(latency_ms), 0) FROM nodes WHERE run_id = ?",
                    (run_id,),
                )[0]
                self.execute(
                    "UPDATE runs SET status = 'interrupted', step_count = ?, total_tokens = ?, "
                    "tokens_saved = ?, latency_ms = ?, finished_at = COALESCE(heartbeat_at, created_at), "
                    "error = COALESCE(error, 'the process running it died') "
                    "WHERE id = ? AND status = 'running'",
                    (int(totals[0]), int(totals[1]), int(totals[2]), float(totals[3]), run_id),
                )
        return dead

    # maintenance -----------------------------------------------------------------------------
    def purge_cache(self, older_than_s: float, dry_run: bool = False) -> int:
        cutoff = time.time() - older_than_s
        n = int(self.query("SELECT COUNT(*) FROM cache WHERE cached_at < ?", (cutoff,))[0][0])
        n += int(self.query("SELECT COUNT(*) FROM tool_cache WHERE cached_at < ?", (cutoff,))[0][0])
        if not dry_run:
            with self.transaction():
                self.execute("DELETE FROM cache WHERE cached_at < ?", (cutoff,))
                self.execute("DELETE FROM tool_cache WHERE cached_at < ?", (cutoff,))
        return n

    def db_size_bytes(self) -> Optional[int]:
        return None


class BlobRefPersisterMixin:
    """Burr persister behaviour shared by backends: a state row holds the hash of its refs map
    ({field: blob hash}, itself a content-addressed blob) plus Burr's small internal keys, never
    the values nor the map, so a fork whose states equal its parent's adds small rows only."""

    rewind_store: SQLStore

    def save(self, partition_key, app_id, sequence_id, position, state, status, **kwargs):
        store = self.rewind_store
        values = state.get_all()
        ctx = store.live_contexts.get(app_id)
        internal = {k: v for k, v in values.items() if k.startswith("__")}
        if ctx is not None:
            refs = ctx.state_refs(values)
            blobs = ctx.take_new_blobs()
        else:
            refs, blobs = {}, {}
            for k, v in values.items():
                if k.startswith("__"):
                    continue
                refs[k] = canonical_hash(v, k)
                blobs[refs[k]] = serde.encode(v, k)
        doc_hash, doc_data = store.memo_doc(tuple(refs.items()), lambda: refs)
        blobs[doc_hash] = doc_data
        if internal == {PRIOR_STEP_KEY: position, SEQUENCE_ID_KEY: sequence_id}:
            doc = json.dumps({STEP_DOC_KEY: doc_hash}, separators=(",", ":"))
        else:
            doc = json.dumps({DOC_KEY: doc_hash, **internal}, sort_keys=True, separators=(",", ":"))
        row = (partition_key if partition_key is not None else PARTITION_KEY, app_id, sequence_id,
               position, doc, status)
        if ctx is not None:
            # The context commits state rows together with their step rows; cheap steps share
            # a commit, and on_step hears of a step only once its commit is done.
            ctx.pending_states.append(row)
            ctx.new_blobs.update(blobs)
            if ctx.must_commit():
                ctx.commit()
            return
        with store.transaction():
            store.put_blobs(blobs)
            store.insert_state_rows([row])

    def load(self, partition_key, app_id, sequence_id=None, **kwargs):
        from burr.core import State

        result = super().load(partition_key, app_id, sequence_id, **kwargs)
        if result is None:
            return None
        raw = self.rewind_store.resolve_state_doc(
            result["state"].get_all(), result["position"], result["sequence_id"])
        refs = raw.get(REFS_KEY, {})
        values = self.rewind_store.values(refs)
        values.update({k: v for k, v in raw.items() if k != REFS_KEY})
        self.last_loaded_refs = dict(refs)
        result["state"] = State(values)
        return result


def open_store(url: Optional[str] = None) -> SQLStore:
    """Open the store at `url`: a path, `sqlite:///path`, or `postgresql://…`.

    With no url: `REWIND_DB` from the environment, else `./rewind.db`.
    """
    url = url or os.environ.get("REWIND_DB") or "rewind.db"
    url = os.fspath(url)
    if url.startswith(("postgresql://", "postgres://")):
        from .store_postgres import PostgresStore

        return PostgresStore(url)
    from .store_sqlite import SQLiteStore

    path = url[len("sqlite:///"):] if url.startswith("sqlite:///") else url
    if path.startswith("sqlite://"):
        raise StoreError(f"{url!r} is not a SQLite URL; write sqlite:///path/to/file.db")
    return SQLiteStore(path)
