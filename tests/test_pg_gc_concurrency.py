"""`gc` beside writers on one PostgreSQL (issue 12's nothing-lost, found by a stranger running
`rewind gc` while four instances recorded runs): gc locked its tables in one order and writers
take them in theirs (a run row, then blobs), so gc holding `blobs` while waiting for `runs`
deadlocked with a writer holding `runs` and reaching for `blobs`; PostgreSQL aborted one of
them. gc now lets go and tries again, so both go through."""

from __future__ import annotations

import threading
import time

import psycopg2

from rewind import Rewind

import shapes


def _gc_waiting_for_runs(watcher) -> bool:
    with watcher.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                    "WHERE c.relname = 'runs' AND l.mode = 'ExclusiveLock' AND NOT l.granted")
        return cur.fetchone()[0] > 0


def test_gc_and_a_writer_taking_the_tables_in_the_other_order_both_go_through(pg_url):
    with Rewind(pg_url, pipelines=[shapes.linear()]) as rw:
        run = rw.run(shapes.linear(), {"topic": "kept"})
    writer = psycopg2.connect(pg_url)  # a writer mid-commit: it has written its run row
    watcher = psycopg2.connect(pg_url)
    watcher.autocommit = True
    outcome: dict = {}

    def collect():
        try:
            with Rewind(pg_url) as admin:
                outcome["gc"] = admin.gc(older_than_days=365)
        except Exception as e:  # the deadlock surfaced here, or in the writer
            outcome["gc error"] = e

    try:
        with writer.cursor() as cur:
            cur.execute("UPDATE runs SET summary = summary WHERE id = %s", (run.id,))
            gc = threading.Thread(target=collect)
            gc.start()
            deadline = time.monotonic() + 60
            while not _gc_waiting_for_runs(watcher):  # gc holds blobs and waits for runs
                assert time.monotonic() < deadline and gc.is_alive(), outcome
            cur.execute("LOCK TABLE blobs IN ROW EXCLUSIVE MODE")  # what its blob insert takes
        writer.commit()
        gc.join(120)
    finally:
        writer.close()
        watcher.close()
    assert "gc error" not in outcome, outcome
    assert outcome["gc"]["runs"] == 0
    with Rewind(pg_url, pipelines=[shapes.linear()]) as rw:
        assert rw.get_run(run.id).status == "completed"
