"""Run isolation (issue 13): a handle with an owner sees only that owner's runs; every call on
another owner's run reads as not found and writes nothing; admins see all; the cache never
tells one owner what another computed."""

from __future__ import annotations

import pytest

import rewind
from rewind import NotFound, Rewind, RewindError

import shapes


def _count_rows(rw):
    return {t: rw.store.query(f"SELECT COUNT(*) FROM {t}")[0][0]
            for t in ("runs", "nodes", "cache", "blobs", "burr_state")}


@pytest.fixture
def two_owners(store_url):
    alice = Rewind(store_url, owner="alice@example.com")
    bob = Rewind(store_url, owner="bob@example.com")
    run = alice.run(shapes.linear(), {"topic": "alice's secret"})
    fork = alice.fork(run.id, at=run.steps[1].node)
    yield alice, bob, run, fork
    alice.close()
    bob.close()


def test_an_owner_lists_only_their_runs(two_owners):
    alice, bob, run, fork = two_owners
    assert {r.id for r in alice.list_runs()} == {run.id, fork.id}
    assert bob.list_runs() == [] and bob.count_runs() == 0 and bob.stored_pipelines() == []
    assert bob.list_runs(search="secret") == []
    assert alice.count_runs() == 2


@pytest.mark.parametrize("call", [
    lambda rw, r: rw.get_run(r.id),
    lambda rw, r: rw.fork(r.id, at=r.steps[0].node),
    lambda rw, r: rw.plan_fork(r.id, at=r.steps[0].node),
    lambda rw, r: rw.diff(r.id, r.id),
    lambda rw, r: rw.export_run(r.id),
    lambda rw, r: rw.audit(r.id),
    lambda rw, r: rw.resume(r.id),
    lambda rw, r: rw.lineage(r.id),
    lambda rw, r: rw.next_node(r.id),
    lambda rw, r: rw.state_at(r.steps[0]),
], ids=["get_run", "fork", "plan_fork", "diff", "export_run", "audit", "resume", "lineage",
        "next_node", "state_at"])
def test_every_call_on_another_owners_run_is_not_found_and_writes_nothing(two_owners, call):
    alice, bob, run, _fork = two_owners
    before = _count_rows(bob)
    with pytest.raises(NotFound) as e:
        call(bob, run)
    assert run.id in str(e.value) and "alice" not in str(e.value)
    assert _count_rows(bob) == before


def test_a_deep_link_to_a_fork_of_another_owner_is_not_found(two_owners):
    _alice, bob, run, fork = two_owners
    with pytest.raises(NotFound):
        bob.diff(run.id, fork.id)
    with pytest.raises(NotFound):
        bob.get_run(fork.id)


def test_single_user_and_admin_handles_see_every_run(two_owners, store_url):
    alice, _bob, run, fork = two_owners
    with Rewind(store_url) as everyone, Rewind(store_url, owner="root@example.com", admin=True) as admin:
        for rw in (everyone, admin):
            assert {run.id, fork.id} <= {r.id for r in rw.list_runs()}
            assert rw.get_run(run.id).id == run.id
        assert admin.diff(run.id, fork.id).first_divergence is None


def test_only_admins_purge_the_cache_gc_or_import(two_owners, store_url):
    alice, bob, run, _fork = two_owners
    before = _count_rows(bob)
    for call in (lambda: bob.purge_cache(0), lambda: bob.gc(0), lambda: bob.import_run({})):
        with pytest.raises(RewindError, match="only an admin"):
            call()
    assert _count_rows(bob) == before
    with Rewind(store_url, owner="root@example.com", admin=True) as admin:
        assert admin.purge_cache(0, dry_run=True) >= 1


def test_the_cache_is_not_shared_across_owners(two_owners):
    alice, bob, run, _fork = two_owners
    same = bob.run(shapes.linear(), {"topic": "alice's secret"})
    # bob pays for his own run: a hit would tell him alice ran these inputs, and show her run id
    assert all(s.status != "cached" for s in same.steps)
    assert not any(run.id in (s.reason or "") for s in same.steps)
    again = bob.run(shapes.linear(), {"topic": "alice's secret"})  # his own entries serve him
    assert all(s.status == "cached" for s in again.steps if s.node != "publish")  # a side effect
    mine = alice.run(shapes.linear(), {"topic": "alice's secret"})
    assert {s.source_run for s in mine.steps if s.status == "cached"} <= {run.id}


def test_an_owner_must_be_a_non_empty_string(store_url):
    for bad in ("", "   ", 3):
        with pytest.raises(rewind.InvalidRequest):
            Rewind(store_url, owner=bad)
