"""Run search through its trigram index and keyset paging, on both backends (schema version 5).

Search answers exactly what the LIKE scan answered before the index (every query is checked
against the same store with the index bypassed, and against a model of LIKE: SQLite folds
ASCII letters only, PostgreSQL matches case as typed): substrings of the id, the summary and
the pipeline, 1- and 2-character searches (no trigram: they scan), SQL metacharacters, NUL
(stored and searched as U+FFFD), odd Unicode. The index follows every insert, update, delete,
gc and import; an existing version-4 database gains it on open. `after=` pages return the same
sequence as `offset` pages across created_at ties; a bad cursor names the field `after`.
"""

from __future__ import annotations

import logging
import random
import re
import sqlite3

import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, action
from rewind.errors import InvalidRequest
from rewind.store import SCHEMA_VERSION, open_store
from rewind.store.runs import SQLRuns


@action(reads=["topic"], writes=["echo"])
def echo(state):
    return state.update(echo=f"{state['topic']}!")


PIPELINE = Pipeline(name="searchpipe", graph=GraphBuilder().with_actions(echo=echo).build(),
                    entrypoint="echo")

# (id, summary, pipeline): ids and names with the characters LIKE treats specially
ROWS = [
    ("run-alpha-01", "Hello World: the first question", "research"),
    ("RUN-BETA-02", "hello world, shouted: HELLO", "support"),
    ("ab", "100% natural", "etl"),
    ("x_y", "snake_case topic", "p'%_\\; DROP TABLE runs; --"),
    ("back\\slash", "back\\slash and 'quotes' and \"double\"", "bench8"),
    ("nul-run", "a\ufffdb (a NUL, as display text stores it)", "research"),
    ("uni-1", "Café ÉCOLE straße Kelvin \u212a emoji \U0001F600 rtl \u202eabc", "support"),
    ("uni-2", "CAFÉ école STRASSE kelvin k", "etl"),
    ("q?", "x?y %s $1 [a-z] * ' OR '1'='1", "research"),
    ("nosummary", None, "etl"),
    # holds every trigram of "abcdy", "bench8x" and "etlresearch", none as a substring: the
    # index offers it, the LIKE refuses it
    ("spread-1", "abcd xbcdy bench research", "etl"),
]
QUERIES = [
    # 1 and 2 characters: no trigram, a LIKE scan
    "a", "A", "b", "%", "_", "\\", "'", '"', "?", "é", "É", "\U0001F600", "ab", "AB", "k", "K",
    "\x00", "a\x00", "%%", "\\%", "\\_", "--", ";", "*", "$1", "%s",
    # 3 and more: through the index
    "hello", "HELLO", "Hello World", "world:", "run-", "RUN-", "alpha-01", "beta", "100%",
    "snake_", "ake_c", "back\\", "\\slash", "'quotes'", '"double"', "'; DROP TABLE runs; --",
    "p'%_\\", "a\x00b", "a\ufffdb", "café", "CAFÉ", "Café", "école", "ÉCOLE", "straße", "STRASSE",
    "kelvin \u212a", "kelvin k", "KELVIN", "\U0001F600 r", "\u202eabc", "[a-z]", "' OR '1'='1",
    "x?y", "research", "RESEARCH", "ETL", "etl", "no such text anywhere", "ld, sh", "ld: t",
    "nosummary", "x_y", "X_Y", "q?", "abcdy", "bcdy", "bench8x", "etlresearch",
    # longer than the trigrams asked of the index: the rest is the LIKE's
    "Hello World: the first question", "hello world: the first question!",
    "Hello World: the first questioN", "Café ÉCOLE straße Kelvin K emoji",
]

ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def is_pg(rw: Rewind) -> bool:
    return rw.store.placeholder == "%s"


def like_model(rw: Rewind, query: str, rows: list) -> set:
    """What `LIKE '%query%'` matched before the index: SQLite folds ASCII letters only,
    PostgreSQL folds nothing; a NUL is searched as U+FFFD."""
    q = query.replace("\x00", "\ufffd")
    fold = (lambda s: s) if is_pg(rw) else (lambda s: s.translate(ASCII_LOWER))
    return {r[0] for r in rows if any(fold(q) in fold(v or "") for v in r)}


def scanned(rw: Rewind, monkeypatch, **filters) -> tuple:
    """(ids, count) of the same search with the index bypassed: what LIKE alone answers."""
    with monkeypatch.context() as m:
        m.setattr(type(rw.store), "_search_prefilter", SQLRuns._search_prefilter)  # SQLite
        if is_pg(rw):  # PostgreSQL serves the LIKE from its indexes: forbid them
            rw.store.execute("SET enable_bitmapscan = off")
            rw.store.execute("SET enable_indexscan = off")
        try:
            return [r.id for r in rw.list_runs(limit=10_000, **filters)], rw.count_runs(**filters)
        finally:
            if is_pg(rw):
                rw.store.execute("RESET enable_bitmapscan")
                rw.store.execute("RESET enable_indexscan")


@pytest.fixture
def rw(db_url):
    handle = Rewind(db_url, pipelines=[PIPELINE])
    yield handle
    handle.close()


def insert(rw: Rewind, rows: list, t0: float = 1_000_000.0) -> None:
    with rw.store.transaction():
        for i, (rid, summary, pipeline) in enumerate(rows):
            rw.store.insert_run({"id": rid, "pipeline": pipeline, "status": "completed",
                                 "created_at": t0 + i, "finished_at": t0 + i + 1, "summary": summary})


def found(rw: Rewind, query: str, **filters) -> set:
    got = [r.id for r in rw.list_runs(search=query, limit=10_000, **filters)]
    assert len(got) == len(set(got)) == rw.count_runs(search=query, **filters), query
    return set(got)


def uses_index(rw: Rewind, query: str) -> bool:
    """Whether the count of this search reads the trigram index (the plan, on each backend)."""
    clause, params = rw.store._run_filters(search=query)
    sql = f"SELECT COUNT(*) FROM runs{clause}"
    if is_pg(rw):
        rw.store.execute("SET enable_seqscan = off")  # a 10-row table scans otherwise
        try:
            plan = " ".join(r[0] for r in rw.store.query(f"EXPLAIN {sql}", params))
        finally:
            rw.store.execute("RESET enable_seqscan")
        return "runs_search" in plan
    plan = " ".join(str(r[-1]) for r in rw.store.query(f"EXPLAIN QUERY PLAN {sql}", params))
    return "runs_search" in plan


# --- search semantics ------------------------------------------------------------------------
def test_search_matches_exactly_what_like_matched(rw, monkeypatch):
    insert(rw, ROWS)
    checked = indexed = 0
    for q in QUERIES:
        got = found(rw, q)
        assert got == like_model(rw, q, ROWS), (q, got)
        ids, n = scanned(rw, monkeypatch, search=q)
        assert set(ids) == got and n == len(got), q
        # combined with the other filters, the same rows
        assert found(rw, q, pipeline="etl") == {r for r in got if dict((x[0], x[2]) for x in ROWS)[r] == "etl"}
        if len(q.replace("\x00", "\ufffd")) >= 3:
            assert uses_index(rw, q), q
            indexed += 1
        checked += 1
    # the rows the cases are about
    pg = is_pg(rw)
    assert found(rw, "hello") == ({"RUN-BETA-02"} if pg else {"run-alpha-01", "RUN-BETA-02"})
    assert found(rw, "café") == (set() if pg else {"uni-1"})  # É is not ASCII: never folded
    assert found(rw, "100%") == {"ab"} and found(rw, "x_y") == {"x_y"}
    assert found(rw, "a\x00b") == {"nul-run"}
    assert found(rw, "kelvin k") == {"uni-2"}  # the Kelvin sign is not a k
    assert found(rw, "no such text anywhere") == set()
    assert found(rw, "abcdy") == found(rw, "bench8x") == found(rw, "etlresearch") == set()
    assert found(rw, "Hello World: the first question") == {"run-alpha-01"}
    assert found(rw, "Hello World: the first questioN") == (set() if pg else {"run-alpha-01"})
    print(f"\n[{'postgres' if pg else 'sqlite'}] {checked} searches as LIKE answered them "
          f"({indexed} through the trigram index)")


def test_runs_recorded_by_the_engine_are_searchable(rw):
    runs = [rw.run(PIPELINE, {"topic": t}) for t in ("Über question one", "a\x00b nul topic",
                                                    "emoji \U0001F600 topic")]
    fork = rw.fork(runs[0].id, at="echo", edit={"topic": "changed"})
    for run in runs:
        assert run.id in found(rw, run.id) and run.id in found(rw, run.id[3:9])
    assert found(rw, "Über question") == {runs[0].id, fork.id}  # a fork keeps its parent's summary
    assert runs[1].id in found(rw, "a\x00b nul")
    assert runs[2].id in found(rw, "\U0001F600 to")
    assert set(found(rw, "searchpipe")) == {r.id for r in runs} | {fork.id}


# --- the index follows every write ---------------------------------------------------------
def test_the_index_follows_insert_update_delete_gc_and_import(rw, db_url, tmp_path):
    insert(rw, ROWS)
    rw.store.update_run("run-alpha-01", summary="Renamed question")
    assert found(rw, "first question") == set() and found(rw, "Renamed quest") == {"run-alpha-01"}
    rw.store.update_run("run-alpha-01", heartbeat_at=5.0, status="failed")  # not a search column
    assert "run-alpha-01" in found(rw, "Renamed")
    rw.store.update_run("ab", pipeline="renamed-pipe")
    assert found(rw, "renamed-pipe") == {"ab"} and "ab" not in found(rw, "etl")
    rw.store.delete_runs(["x_y"])
    assert found(rw, "snake_case") == set() and found(rw, "x_y") == set()

    # gc purges old runs: they leave the index with their rows
    old = rw.run(PIPELINE, {"topic": "an old topic to purge"})
    kept = rw.run(PIPELINE, {"topic": "a recent topic to keep"})
    assert found(rw, "topic to ") == {old.id, kept.id}
    rw.store.update_run(old.id, created_at=1.0)
    assert rw.gc(older_than_days=1)["runs"] >= 1
    assert found(rw, "topic to ") == {kept.id} and found(rw, old.id) == set()

    # import into another store of the same backend: the imported runs are found
    doc = rw.export_run(kept.id)
    other_url = str(tmp_path / "other.db") if not is_pg(rw) else None
    if other_url is None:
        from rewind.store.pg_admin import create_test_database, drop_database
        from tests.conftest import postgres_base_url

        other_url = create_test_database(postgres_base_url())
    try:
        other = Rewind(other_url)
        assert other.import_run(doc) == [kept.id]
        assert found(other, "recent topic") == {kept.id} and found(other, kept.id) == {kept.id}
        other.close()
    finally:
        if is_pg(rw):
            drop_database(other_url)
    if not is_pg(rw):
        integrity_check(db_url)


def integrity_check(path: str, flush: bool = True) -> None:
    """FTS5's own check that the index holds exactly the rows' text (external content), once
    the runs waiting for their batch (schema version 7) are indexed (`flush`), or as it is."""
    if flush:
        store = open_store(path)
        store.index_pending_runs()
        store.close()
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT INTO runs_search(runs_search, rank) VALUES ('integrity-check', 1)")
    finally:
        conn.close()


def test_sqlite_index_integrity_after_many_writes(tmp_path):
    path = str(tmp_path / "many.db")
    rw = Rewind(path)
    rng = random.Random(5)
    rows = [(f"id{i:04d}", f"summary {rng.random():.6f} {'x' * (i % 7)}", f"p{i % 5}") for i in range(400)]
    insert(rw, rows)
    for i in range(0, 400, 3):
        rw.store.update_run(rows[i][0], summary=f"changed {i}")
    rw.store.delete_runs([r[0] for r in rows[1::4]])
    rw.close()
    integrity_check(path)
    rw = Rewind(path)
    assert found(rw, "changed 12") == {"id0012", "id0120", "id0123", "id0126", "id0129"} - {
        r[0] for r in rows[1::4]}
    rw.close()


# --- migration -------------------------------------------------------------------------------
def _to_version_4(rw: Rewind) -> None:
    """What a version-4 database holds: no search index."""
    store = rw.store
    with store.transaction():
        if is_pg(rw):
            store.execute("DROP INDEX runs_search")
        else:
            for t in ("insert", "delete", "update", "batch"):
                store.execute(f"DROP TRIGGER IF EXISTS runs_search_{t}")
            store.execute("DROP TABLE runs_search")
            store.execute("DROP TABLE IF EXISTS runs_search_mark")
        store.execute("UPDATE schema_version SET version = 4")


def test_a_version_4_database_migrates_to_5_with_its_runs_searchable(rw, db_url):
    insert(rw, ROWS)
    _to_version_4(rw)
    rw.close()
    store = open_store(db_url)
    assert store.query("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    store.close()
    again = Rewind(db_url)
    try:
        for q in ("hello", "Hello World", "100%", "snake_", "café", "research", "a\x00b"):
            assert found(again, q) == like_model(again, q, ROWS), q
            assert uses_index(again, q), q
        insert(again, [("after-migration", "a new question", "etl")], t0=2_000_000.0)
        assert found(again, "new quest") == {"after-migration"}
    finally:
        again.close()
    if not is_pg(rw):
        integrity_check(db_url)


def test_postgres_without_pg_trgm_rights_still_opens_and_searches(pg_url, caplog):
    """A role that may not CREATE EXTENSION: the migration logs it and searches scan."""
    import psycopg2

    from rewind.store.pg_admin import _dbname

    role = "rewind_t_norights"
    admin = psycopg2.connect(pg_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"DROP ROLE IF EXISTS {role}")
        cur.execute(f"CREATE ROLE {role} LOGIN")
        cur.execute(f'GRANT CONNECT ON DATABASE "{_dbname(pg_url)}" TO {role}')
        cur.execute(f"GRANT USAGE, CREATE ON SCHEMA public TO {role}")
    user_url = re.sub(r"//[^@/]*@", f"//{role}@", pg_url)
    assert user_url != pg_url
    try:
        with caplog.at_level(logging.WARNING, logger="rewind"):
            rw = Rewind(user_url, pipelines=[PIPELINE])
        assert any("no search index" in r.getMessage() and "pg_trgm" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        assert rw.store.query("SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
        insert(rw, ROWS)
        for q in ("hello", "Hello", "100%", "a", "x_y"):
            assert found(rw, q) == like_model(rw, q, ROWS), q
        run = rw.run(PIPELINE, {"topic": "recorded without the index"})
        assert found(rw, "without the index") == {run.id}
        rw.close()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'")
            cur.execute(f'REASSIGN OWNED BY {role} TO CURRENT_USER')
            cur.execute(f"DROP OWNED BY {role}")
            cur.execute(f"DROP ROLE {role}")
        admin.close()


# --- keyset paging ---------------------------------------------------------------------------
def _tied_store(rw: Rewind, n: int = 237) -> list:
    """n runs on few distinct created_at values (many ties), ids in random order."""
    rng = random.Random(3)
    ids = [f"{rng.getrandbits(40):010x}-{i}" for i in range(n)]
    rng.shuffle(ids)
    with rw.store.transaction():
        for i, rid in enumerate(ids):
            rw.store.insert_run({"id": rid, "pipeline": ("etl", "research")[i % 2],
                                 "status": ("completed", "failed")[i % 3 == 0],
                                 "created_at": 1_000.0 + (i % 9) * 0.25,
                                 "summary": f"question {i} {'tie' if i % 9 == 4 else ''}"})
    return ids


@pytest.mark.parametrize("limit", [1, 7, 50])
def test_keyset_pages_are_the_offset_pages(rw, limit):
    _tied_store(rw)
    for filters in ({}, {"pipeline": "etl"}, {"status": "failed", "pipeline": "research"},
                    {"search": "tie"}, {"search": "question 1"}, {"search": "1"}):
        everything = [r.id for r in rw.list_runs(limit=10_000, **filters)]
        assert len(everything) == rw.count_runs(**filters)
        by_offset, by_cursor, after = [], [], None
        while True:
            page = [r.id for r in rw.list_runs(limit=limit, offset=len(by_offset), **filters)]
            cursor_page = rw.list_runs(limit=limit, after=after, **filters)
            assert [r.id for r in cursor_page] == page, (filters, len(by_offset))
            if not page:
                break
            by_offset += page
            by_cursor += [r.id for r in cursor_page]
            after = cursor_page[-1] if len(by_cursor) % 2 else cursor_page[-1].id  # a Run or its id
        assert by_offset == by_cursor == everything, filters
    # offset counts from the cursor when both are given
    first = [r.id for r in rw.list_runs(limit=20)]
    assert [r.id for r in rw.list_runs(limit=5, after=first[9], offset=3)] == first[13:18]


def test_a_bad_cursor_is_a_clear_error_naming_after(rw):
    _tied_store(rw, 20)
    for bad in ("no-such-run", "", 5, b"bytes", "\ud800", ["a"]):
        with pytest.raises(InvalidRequest) as e:
            rw.list_runs(after=bad)
        assert e.value.field == "after" and "after" in str(e.value), (bad, str(e.value))
    # another owner's run reads like a missing one
    mine = Rewind(rw.url, owner="me@example.com")
    theirs = Rewind(rw.url, owner="them@example.com")
    try:
        other = theirs.run(PIPELINE, {"topic": "theirs"})
        own = mine.run(PIPELINE, {"topic": "mine"})
        assert mine.list_runs(after=own.id) == []
        with pytest.raises(InvalidRequest, match="no run") as e:
            mine.list_runs(after=other.id)
        assert e.value.field == "after"
    finally:
        mine.close()
        theirs.close()


def test_keyset_page_uses_the_created_at_index(rw):
    """The page after a cursor reads a bounded range of the created_at index, not a scan."""
    _tied_store(rw, 50)
    clause, params = rw.store._run_filters(after=(1_001.0, "zz"))
    sql = f"SELECT id FROM runs{clause} ORDER BY created_at DESC, id DESC LIMIT 5"
    if is_pg(rw):
        rw.store.execute("SET enable_seqscan = off")
        try:
            plan = " ".join(r[0] for r in rw.store.query(f"EXPLAIN {sql}", params))
        finally:
            rw.store.execute("RESET enable_seqscan")
        assert "runs_created" in plan and "Index Cond" in plan, plan
    else:
        plan = " ".join(str(r[-1]) for r in rw.store.query(f"EXPLAIN QUERY PLAN {sql}", params))
        assert "runs_created (created_at<?)" in plan, plan


def test_a_common_search_scans_with_the_same_results(tmp_path, monkeypatch):
    """Past MAX_CANDIDATES rows holding its trigrams a search scans (a page fills sooner that
    way); the rows are the same either way."""
    from rewind.store import sqlite as backend

    rw = Rewind(str(tmp_path / "common.db"))
    insert(rw, ROWS)
    rw.store.index_pending_runs()  # the plan is chosen by what the index holds
    want = {q: found(rw, q) for q in QUERIES}
    plan = lambda q: " ".join(str(r[-1]) for r in rw.store.query(
        "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM runs" + rw.store._run_filters(search=q)[0],
        rw.store._run_filters(search=q)[1]))
    assert "runs_search" in plan("hello")
    monkeypatch.setattr(backend, "MAX_CANDIDATES", 0)
    rw.store._search_plans.clear()
    assert "runs_search" not in plan("hello") and "runs_search" in plan("no such text anywhere")
    assert {q: found(rw, q) for q in QUERIES} == want
    rw.close()


# --- schema version 7: new runs join the index in batches ------------------------------------
def _indexed(path: str) -> tuple:
    """(runs in the index, the mark) of a SQLite database, read with no Rewind in between."""
    conn = sqlite3.connect(path)
    try:
        # (COUNT(*) of an external-content table counts the runs: ask for a trigram every
        # test run's pipeline has)
        held = conn.execute("SELECT COUNT(*) FROM runs_search WHERE runs_search MATCH '\"pip\"'").fetchone()[0]
        mark = conn.execute("SELECT indexed_through FROM runs_search_mark").fetchone()[0]
        return held, mark
    finally:
        conn.close()


def _one_by_one(rw: Rewind, rows: list, t0: float = 2_000_000.0) -> None:
    for i, (rid, summary, pipeline) in enumerate(rows):
        with rw.store.transaction():  # a commit per run, as runs and forks are written
            rw.store.insert_run({"id": rid, "pipeline": pipeline, "status": "completed",
                                 "created_at": t0 + i, "finished_at": t0 + i + 1, "summary": summary})


def test_runs_waiting_for_their_batch_are_found(tmp_path):
    from rewind.store.sqlite import SEARCH_BATCH

    path = str(tmp_path / "batch.db")
    rw = Rewind(path)
    rows = [(f"w{i:04d}", f"waiting {i} zebra" if i % 10 == 3 else f"other {i}", "pipe")
            for i in range(SEARCH_BATCH - 6)]
    _one_by_one(rw, rows)
    assert _indexed(path) == (0, 0)  # none indexed yet: every one is searched by rowid
    assert found(rw, "zebra") == {r[0] for r in rows if "zebra" in r[1]}
    assert found(rw, "w0011") == {"w0011"}
    rw.close()


def test_the_batch_is_indexed_by_the_insert_that_fills_it(tmp_path):
    from rewind.store.sqlite import SEARCH_BATCH

    path = str(tmp_path / "batch.db")
    rw = Rewind(path)
    rows = [(f"b{i:04d}", f"run {i} {'giraffe' if i % 7 == 0 else ''}", "pipe")
            for i in range(SEARCH_BATCH + 40)]
    _one_by_one(rw, rows[:SEARCH_BATCH])
    assert _indexed(path) == (SEARCH_BATCH, SEARCH_BATCH)
    integrity_check(path, flush=False)  # the trigger's batch, with no flush
    _one_by_one(rw, rows[SEARCH_BATCH:], t0=3_000_000.0)
    assert _indexed(path) == (SEARCH_BATCH, SEARCH_BATCH)
    assert found(rw, "giraffe") == {r[0] for r in rows if "giraffe" in r[1]}
    # an update and a delete of a waiting run leave the index alone; of an indexed one, keep it
    rw.store.update_run(rows[-1][0], summary="renamed okapi")
    rw.store.update_run(rows[0][0], summary="renamed okapi too")
    rw.store.delete_runs([rows[-2][0], rows[1][0]])
    assert found(rw, "okapi") == {rows[-1][0], rows[0][0]}
    rw.close()
    integrity_check(path)


def test_a_reused_rowid_is_indexed_at_once(tmp_path):
    """After the newest run is deleted, SQLite gives its rowid to the next run: below the mark,
    so it must be indexed at once or no search would see it."""
    from rewind.store.sqlite import SEARCH_BATCH

    path = str(tmp_path / "reuse.db")
    rw = Rewind(path)
    rows = [(f"r{i:04d}", f"run {i}", "pipe") for i in range(SEARCH_BATCH)]
    _one_by_one(rw, rows)
    rw.store.delete_runs([rows[-1][0]])
    _one_by_one(rw, [("newcomer", "a pangolin", "pipe")], t0=4_000_000.0)
    assert rw.store.query("SELECT rowid FROM runs WHERE id = 'newcomer'")[0][0] <= _indexed(path)[1]
    assert found(rw, "pangolin") == {"newcomer"}
    rw.close()
    integrity_check(path, flush=False)


def test_a_selective_search_page_is_read_from_the_index(tmp_path):
    """The page query (ORDER BY created_at LIMIT ? OFFSET ?) must look the candidates up by
    rowid, not walk every run in created_at order testing each (25 ms at 100k runs)."""
    from rewind.store.runs import _SELECT

    rw = Rewind(str(tmp_path / "plan.db"))
    insert(rw, [(f"p{i:05d}", f"summary {i}", "pipe") for i in range(3000)])
    rw.store.execute("ANALYZE")
    clause, params = rw.store._run_filters(search="no such text")
    plan = " | ".join(str(r[-1]) for r in rw.store.query(
        f"EXPLAIN QUERY PLAN {_SELECT}{clause} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
        [*params, 50, 0]))
    assert "runs_search" in plan and "USING INDEX runs_created" not in plan, plan
    rw.close()


def _plan(rw: Rewind, sql: str, params: list) -> str:
    if is_pg(rw):
        rw.store.execute("SET enable_seqscan = off")  # a small table scans otherwise
        try:
            return " ".join(r[0] for r in rw.store.query(f"EXPLAIN {sql}", params))
        finally:
            rw.store.execute("RESET enable_seqscan")
    return " ".join(str(r[-1]) for r in rw.store.query(f"EXPLAIN QUERY PLAN {sql}", params))


@pytest.mark.parametrize("filters, index", [
    ({"owner": "ann@example.com"}, "runs_owner"),
    ({"parent_id": "p-1"}, "runs_parent"),
])
def test_the_partial_parent_and_owner_indexes_serve_their_filters(rw, filters, index):
    """Schema version 8: runs_parent and runs_owner hold only runs that have a parent or an
    owner (a first run, a single-user run write no entry); a listing filtered by one still
    reads its index, and finds exactly the runs a scan finds."""
    with rw.store.transaction():
        for i in range(40):
            rw.store.insert_run({
                "id": f"r-{i}", "pipeline": "pipe", "status": "completed", "created_at": 1e6 + i,
                "parent_id": "p-1" if i % 3 == 0 else None,
                "owner": "ann@example.com" if i % 4 == 0 else None})
    clause, params = rw.store._run_filters(**filters)
    sql = f"SELECT id FROM runs{clause} ORDER BY created_at DESC, id DESC LIMIT 10"
    assert index in _plan(rw, sql, params), _plan(rw, sql, params)
    (column, value), = filters.items()
    want = sorted(r[0] for r in rw.store.query("SELECT id FROM runs") if
                  rw.store.query(f"SELECT {column} FROM runs WHERE id = ?", (r[0],))[0][0] == value)
    assert sorted(r["id"] for r in rw.store.list_run_rows(limit=100, **filters)) == want and want
    forks = rw.store._run_filters(forks_only=True)
    assert "runs_parent" in _plan(rw, f"SELECT COUNT(*) FROM runs{forks[0]}", forks[1])
    if not is_pg(rw):  # the entries the index holds: only runs with a value
        held = rw.store.query(f"SELECT COUNT(*) FROM runs INDEXED BY {index} WHERE {column} IS NOT NULL")
        assert held == [(len(want),)]
