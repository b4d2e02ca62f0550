"""A SQLite connection remembers what a fork reads (the parent's run row, the saved state it
starts from, the cache entries it serves) between forks (issue 16), and never answers with a
row another connection, or itself, has changed or removed since.

The memory is only good while `PRAGMA data_version` says no other connection committed and this
connection only added rows: each test below breaks one of those and checks that the next fork
reads again (a stale cache entry would show as `cached` with the old output, a stale run row
as the old summary, a stale state as a fork from a state that is gone).
"""

import time

import pytest

from rewind import Rewind
from rewind.errors import ForkError
from tests import shapes


def _first_run(path):
    rw = Rewind(path)
    run = rw.run(shapes.linear(), {"topic": "wasps"})
    fork = rw.fork(run.id, at="plan")  # reads (and remembers) every entry of the trajectory
    assert [s.status for s in fork.steps][:4] == ["cached"] * 4
    return rw, run


def test_an_entry_another_connection_purged_is_not_served(tmp_path):
    path = str(tmp_path / "r.db")
    rw, run = _first_run(path)
    other = Rewind(path)
    assert other.purge_cache(older_than_days=0) > 0  # every entry, from another connection
    other.close()
    shapes.CALLS.clear()
    fork = rw.fork(run.id, at="plan")
    assert [s.status for s in fork.steps][:4] == ["executed"] * 4
    assert shapes.CALLS[:4] == ["plan", "draft", "polish", "stats"]
    rw.close()


def test_an_entry_this_connection_purged_is_not_served(tmp_path):
    rw, run = _first_run(str(tmp_path / "r.db"))
    assert rw.purge_cache(older_than_days=0) > 0
    shapes.CALLS.clear()
    fork = rw.fork(run.id, at="plan")
    assert [s.status for s in fork.steps][:4] == ["executed"] * 4
    rw.close()


def test_an_entry_another_connection_replaced_is_served_as_replaced(tmp_path):
    path = str(tmp_path / "r.db")
    rw, run = _first_run(path)
    other = Rewind(path)
    # the other connection re-keys the plan entry's outputs to those of the draft step
    store = other.store
    plan_key = (run.steps[0].node, run.steps[0].input_hash)
    entry = store.cache_get_many([plan_key])[plan_key]
    draft = run.steps[1]
    with store.transaction():
        store.cache_put({**entry, "output_hash": draft.output_hash,
                         "outputs": '{"plan": "%s"}' % draft.output_refs["draft"],
                         "cached_at": time.time()})
    other.close()
    fork = rw.fork(run.id, at="plan")
    assert fork.steps[0].status == "cached"
    assert fork.steps[0].output_hash == draft.output_hash  # the entry as it is now
    rw.close()


def test_remembered_entries_save_the_read(tmp_path):
    """What it is for: the second fork of a run reads no cache entry from the database."""
    rw, run = _first_run(str(tmp_path / "r.db"))
    seen = []
    rw.store.connection.set_trace_callback(seen.append)
    rw.fork(run.id, at="plan")
    rw.store.connection.set_trace_callback(None)
    assert not [s for s in seen if s.lstrip().startswith("SELECT") and "FROM cache" in s]
    rw.close()


def test_a_run_row_changed_by_either_connection_is_read_again(tmp_path):
    """The parent's row is remembered too: a fork copies its summary, so a stale row shows."""
    path = str(tmp_path / "r.db")
    rw, run = _first_run(path)
    other = Rewind(path)
    other.store.update_run(run.id, summary="renamed elsewhere")
    other.close()
    assert rw.fork(run.id, at="plan").summary == "renamed elsewhere"
    rw.store.update_run(run.id, summary="renamed here")
    assert rw.fork(run.id, at="plan").summary == "renamed here"
    rw.close()


def test_a_saved_state_another_connection_removed_is_not_forked_from(tmp_path):
    path = str(tmp_path / "r.db")
    rw, run = _first_run(path)
    rw.fork(run.id, at=run.steps[2].node)  # reads (and remembers) the state after step 1
    other = Rewind(path)
    step = run.steps[1]
    other.store.delete_state("rewind", step.state_app_id or run.id, step.sequence_id, step.node)
    other.close()
    with pytest.raises(ForkError, match="not found"):
        rw.fork(run.id, at=run.steps[2].node)
    rw.close()


def test_a_run_read_as_missing_is_found_once_this_connection_adds_it(tmp_path):
    """Inserts keep what the connection remembers, so an absence is never remembered."""
    from rewind.errors import NotFound

    rw, run = _first_run(str(tmp_path / "r.db"))
    row = dict(rw.store.get_run_row(run.id), id="added-later", parent_id=None)
    with pytest.raises(NotFound):
        rw.get_run("added-later")
    with rw.store.transaction():
        rw.store.insert_run(row)
    assert rw.get_run("added-later").id == "added-later"
    rw.close()


def test_a_run_gc_removed_is_not_forked_from_memory(tmp_path):
    """gc deletes through this connection (or another): a remembered run row, state or entry
    must not outlive it."""
    from rewind.errors import NotFound

    path = str(tmp_path / "r.db")
    rw, run = _first_run(path)
    rw.fork(run.id, at="draft")  # remembers the run row, the state before draft, the entries
    removed = rw.gc(older_than_days=0)
    assert removed, removed
    if rw.store.get_run_row(run.id) is None:  # gc took the run: so must the memory
        with pytest.raises(NotFound):
            rw.fork(run.id, at="draft")
    else:  # it kept the run (lineage) but purged the cache: the fork runs its nodes again
        shapes.CALLS.clear()
        fork = rw.fork(run.id, at="draft")
        assert [str(s.status) for s in fork.steps][1:4] == ["executed"] * 3
    rw.close()


def test_a_state_row_this_connection_replaced_is_read_again(tmp_path):
    """A sub-application's row replaces the one at its key (an INSERT ... DO UPDATE): the
    connection must not keep answering with the row it replaced."""
    from rewind.store import PARTITION_KEY

    rw, run = _first_run(str(tmp_path / "r.db"))
    persister = rw.store.persister()
    first, second = run.steps[0], run.steps[1]
    app = first.state_app_id or run.id
    before = persister.load(PARTITION_KEY, app, first.sequence_id)  # remembered
    other_doc = rw.store.query("SELECT state FROM burr_state WHERE app_id = ? AND sequence_id = ?",
                               (second.state_app_id or run.id, second.sequence_id))[0][0]
    with rw.store.transaction():
        rw.store.replace_state_row((PARTITION_KEY, app, first.sequence_id, first.node, other_doc,
                                    "completed"))
    after = persister.load(PARTITION_KEY, app, first.sequence_id)
    assert after["state"].get_all() != before["state"].get_all()
    assert after["state"]["draft"] == rw.state_at(second)["draft"]
    rw.close()


def _pragmas(store) -> list:
    """Every `PRAGMA data_version` this thread's connection runs from now on."""
    seen: list = []
    store.connection._conn.set_trace_callback(
        lambda sql: seen.append(sql) if sql.startswith("PRAGMA data_version") else None)
    return seen


def test_a_fork_asks_whether_others_wrote_once_for_all_its_reads(tmp_path):
    """Inside `snapshot_reads` (a fork's setup) the first remembered read asks; the others
    answer as of that moment; after `end_snapshot` each read asks again."""
    rw, run = _first_run(str(tmp_path / "r.db"))
    store = rw.store
    seen = _pragmas(store)
    with store.snapshot_reads():
        for _ in range(3):
            assert store.get_run_row(run.id)["id"] == run.id
        assert len(seen) == 1
        store.end_snapshot()
        store.get_run_row(run.id)
        store.get_run_row(run.id)
        assert len(seen) == 3
    store.get_run_row(run.id)
    assert len(seen) == 4
    # a fork's setup: the api's read of the run and the fork's own (its start state, its cache
    # entries) share one question; the commit asks once more, inside its transaction
    del seen[:]
    rw.fork(run.id, at="plan")
    assert len(seen) == 2, seen
    rw.close()


def test_a_write_before_the_snapshot_is_seen_by_every_read_in_it(tmp_path):
    """The one question is asked at the snapshot's first read, so what another connection
    committed before the fork started is never answered from memory."""
    path = str(tmp_path / "r.db")
    rw, run = _first_run(path)
    other = Rewind(path)
    other.store.execute("UPDATE runs SET summary = 'renamed elsewhere' WHERE id = ?", (run.id,))
    other.close()
    with rw.store.snapshot_reads():
        assert rw.store.get_run_row(run.id)["summary"] == "renamed elsewhere"
        assert rw.store.get_run_row(run.id)["summary"] == "renamed elsewhere"
    fork = rw.fork(run.id, at="plan")
    assert fork.summary == "renamed elsewhere"
    rw.close()
