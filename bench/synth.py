"""A synthetic store for the scale figures: N runs (8 steps each) cloned from rows that the real
engine wrote for one real run and seven no-edit forks of it, with new ids; blobs are shared.

The generated database is cached under bench/out/ and rebuilt when its recipe changes (the
generator version, the run count, the schema, or the source of the rewind modules that decide
what a run writes)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import tempfile
import time

import rewind
from rewind import store as rw_store
from rewind.store import schema
from rewind.store.bulk import BulkLoader, table_rows

from . import workload as W

GENERATOR_VERSION = 3
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
PIPELINES = [("bench8", 0.4), ("research", 0.3), ("support", 0.2), ("etl", 0.1)]
FORK_SHARE = 0.2
FAILED_SHARE = 0.06
INTERRUPTED_SHARE = 0.02
SPAN_S = 90 * 86400
TABLES = (schema.RUNS.name, schema.NODES.name, schema.BURR_TABLE, schema.CACHE.name)
# the modules (or packages) whose source decides what a run writes
SOURCES = ("api", "engine", "store", "hashing", "serde")


def _source_files(pkg: str) -> list:
    files = []
    for name in SOURCES:
        path = os.path.join(pkg, name)
        if os.path.isdir(path):
            files += sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".py"))
        elif os.path.exists(path + ".py"):
            files.append(path + ".py")
    return files


def recipe(n_runs: int) -> dict:
    src = hashlib.sha256()
    pkg = os.path.dirname(os.path.abspath(rewind.__file__))
    for path in _source_files(pkg):
        with open(path, "rb") as f:
            src.update(f.read())
    return {
        "generator": GENERATOR_VERSION, "runs": n_runs, "schema": rw_store.SCHEMA_VERSION,
        "run_columns": list(schema.RUN_COLUMNS), "node_columns": list(schema.NODE_COLUMNS),
        "rewind_source": src.hexdigest(),
    }


class _Template:
    """Rows one real run (and one fork of it at each node) wrote, ready to clone."""

    def __init__(self, workdir: str):
        path = os.path.join(workdir, "template.db")
        pipeline = W.make_pipeline("bench8")
        with rewind.Rewind(path) as rw:
            root = rw.run(pipeline, {"topic": W.topic(10_000_000)}, use_cache=False)
            forks = {k: rw.fork(root.id, at=W.NODES[k]) for k in range(1, len(W.NODES))}
            assert root.status == "completed", root.status
            assert all(f.status == "completed" for f in forks.values())
        self.root_id = root.id
        self.fork_ids = {k: f.id for k, f in forks.items()}
        self.cols = {}
        self.by_run = {}
        for table, key in (("runs", "id"), ("nodes", "run_id"), (schema.BURR_TABLE, "app_id")):
            cols, rows = table_rows(path, table)
            self.cols[table] = cols
            ki = cols.index(key)
            for r in rows:
                self.by_run.setdefault((table, r[ki]), []).append(r)
        self.cols["cache"], self.cache_rows = table_rows(path, "cache")
        self.input_hashes = [r[self.cols["nodes"].index("input_hash")]
                             for r in self.by_run[("nodes", root.id)]]
        self.blob_cols, self.blobs = table_rows(path, "blobs")
        self.edges_cols, self.edges = table_rows(path, "edges")
        self.created = {
            rid: self.by_run[("runs", rid)][0][self.cols["runs"].index("created_at")]
            for rid in [root.id, *self.fork_ids.values()]
        }


def _remap(row: list, mapping: dict, shift: float, float_cols: set) -> list:
    out = []
    for i, v in enumerate(row):
        if isinstance(v, str):
            if v in mapping:
                v = mapping[v]
            else:
                for old, new in mapping.items():
                    if old in v:
                        v = v.replace(old, new)
        elif i in float_cols and isinstance(v, float):
            v = v + shift
        out.append(v)
    return out


def _clone_runs(load: BulkLoader, t: _Template, n_runs: int, rng: random.Random, started: float,
                log) -> int:
    """Insert `n_runs` runs cloned from the template, in batches; returns the steps written."""
    rc, nc, bc, cc = (t.cols[x] for x in TABLES)
    run_float = {rc.index(c) for c in ("created_at", "finished_at", "heartbeat_at")}
    node_float = {nc.index("started_at")}
    cache_float = {cc.index("cached_at")}
    ri = {c: rc.index(c) for c in ("pipeline", "status", "summary", "error", "owner_pid", "owner_host")}
    ni = {c: nc.index(c) for c in ("status", "error", "output_hash", "outputs", "reason")}
    names = [p for p, _ in PIPELINES]
    weights = [w for _, w in PIPELINES]
    now = time.time()
    roots: list = []  # (new id, input-hash mapping) of earlier root runs, forkable
    batch = {x: [] for x in TABLES}
    n_steps = 0
    for i in range(n_runs):
        rid = "%016x" % rng.getrandbits(64)
        created = now - SPAN_S + SPAN_S * (i + 1) / n_runs
        status = "completed"
        u = rng.random()
        if u < FAILED_SHARE:
            status = "failed"
        elif u < FAILED_SHARE + INTERRUPTED_SHARE:
            status = "interrupted"
        is_fork = roots and status == "completed" and rng.random() < FORK_SHARE
        if is_fork:
            k = rng.randrange(1, len(W.NODES))
            parent_id, parent_map = roots[rng.randrange(max(0, len(roots) - 2000), len(roots))]
            tid = t.fork_ids[k]
            mapping = {t.root_id: parent_id, tid: rid, **parent_map}
        else:
            tid = t.root_id
            mapping = {t.root_id: rid}
            for j, h in enumerate(t.input_hashes):
                mapping[h] = hashlib.sha256(f"{rid}:{j}".encode()).hexdigest()
        shift = created - t.created[tid]
        run = _remap(t.by_run[("runs", tid)][0], mapping, shift, run_float)
        pipeline = rng.choices(names, weights)[0]
        run[ri["pipeline"]] = pipeline
        run[ri["status"]] = status
        run[ri["summary"]] = f"synthetic {pipeline} run {i}: " + run[ri["summary"]][:120]
        if status != "completed":
            run[ri["error"]] = ("format: RuntimeError: synthetic failure" if status == "failed"
                                else "the process running it died")
        batch["runs"].append(run)
        nodes = [_remap(r, mapping, shift, node_float) for r in t.by_run[("nodes", tid)]]
        if status != "completed":
            last = nodes[-1]
            last[ni["status"]] = "failed"
            last[ni["error"]] = "RuntimeError: synthetic failure"
            last[ni["output_hash"]] = None
            last[ni["outputs"]] = "{}"
        batch["nodes"].extend(nodes)
        n_steps += len(nodes)
        batch["burr_state"].extend(_remap(r, mapping, 0.0, set()) for r in t.by_run[("burr_state", tid)])
        if not is_fork:
            batch["cache"].extend(
                _remap(r, mapping, shift, cache_float) for r in t.cache_rows
            )
            roots.append((rid, {h: mapping[h] for h in t.input_hashes}))
        if len(batch["runs"]) >= 5000:
            for x in TABLES:
                load.insert(x, t.cols[x], batch[x])
                batch[x] = []
            if (i + 1) % 50_000 == 0:
                log(f"  synthetic store: {i + 1}/{n_runs} runs ({time.perf_counter() - started:.0f}s)")
    for x in TABLES:
        load.insert(x, t.cols[x], batch[x])
    return n_steps


def generate(path: str, n_runs: int, seed: int = 7, log=print) -> dict:
    """Write a synthetic store of `n_runs` runs (8 steps each) at `path`."""
    started = time.perf_counter()
    rng = random.Random(seed)
    workdir = tempfile.mkdtemp(prefix="rewind-synth-")
    t = _Template(workdir)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    rewind.Rewind(path).close()  # the schema, exactly as the product creates it
    with BulkLoader(path) as load:
        load.insert("blobs", list(schema.BLOB_COLUMNS[:4]), [r[:4] for r in t.blobs])
        load.insert("edges", t.edges_cols, t.edges)
        n_steps = _clone_runs(load, t, n_runs, rng, started, log)
    shutil.rmtree(workdir, ignore_errors=True)
    return {"runs": n_runs, "steps": n_steps, "seconds": time.perf_counter() - started}


def synthetic_store(n_runs: int, log=print, rebuild: bool = False, keep: bool = False) -> tuple:
    """(path, info) of a cached synthetic store of `n_runs` runs, generated if needed; with
    `keep`, a cached store is reused even if the rewind sources changed since."""
    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, f"synthetic-{n_runs}.db")
    meta_path = path + ".json"
    want = recipe(n_runs)
    if not rebuild and os.path.exists(path) and os.path.exists(meta_path):
        try:
            with open(meta_path) as f:
                meta = json.load(f)
            same = meta.get("recipe") == want
            if keep:
                same = {k: v for k, v in meta.get("recipe", {}).items() if k != "rewind_source"} == {
                    k: v for k, v in want.items() if k != "rewind_source"}
            if same:
                meta["cached"] = True
                return path, meta
        except (OSError, ValueError):
            pass
    log(f"  generating a synthetic store of {n_runs} runs at {path} ...")
    info = generate(path, n_runs, log=log)
    meta = {"recipe": want, **info}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=1)
    meta["cached"] = False
    return path, meta


def pick_ids(path: str, seed: int = 11) -> dict:
    """A few run ids of the synthetic store for the read figures: a root with a fork."""
    store = rw_store.open_store(path, read_only=True)
    try:
        n = store.count_runs()
        rng = random.Random(seed)
        # a fork from somewhere in the middle and its parent
        (row,) = store.list_run_rows(forks_only=True, limit=1, offset=rng.randrange(n // 10))
        return {"fork": row["id"], "parent": row["parent_id"], "runs": n}
    finally:
        store.close()


@contextlib.contextmanager
def pg_copy_of_runs(path: str, base_url: str, log=print):
    """(url, seconds) of a fresh PostgreSQL database, schema by the product, holding the runs
    of the synthetic store at `path` (runs only: the queries measured there read no steps),
    analyzed as autovacuum would leave it (not vacuumed: GIN pending lists as writes leave them); dropped afterwards."""
    from psycopg2.extras import execute_values

    from rewind.store.pg_admin import create_test_database, drop_database

    started = time.perf_counter()
    url = create_test_database(base_url, prefix="rewind_bench")
    try:
        rewind.Rewind(url).close()  # the schema, exactly as the product creates it
        cols, rows = table_rows(path, schema.RUNS.name)
        store = rw_store.open_store(url)
        try:
            with store.transaction():
                cur = store.connection.cursor()
                for i in range(0, len(rows), 5000):
                    execute_values(cur, f"INSERT INTO runs ({', '.join(cols)}) VALUES %s",
                                   rows[i:i + 5000], page_size=5000)
            store.execute("ANALYZE runs")
        finally:
            store.close()
        yield url, time.perf_counter() - started
    finally:
        drop_database(url)
