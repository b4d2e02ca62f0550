"""PostgreSQL statement pipelining: writes whose result nobody reads are held inside a
transaction and sent with the next statement that returns rows, or with the COMMIT; a failure
in a held write still rolls the whole transaction back (or only its savepoint)."""

from __future__ import annotations

import psycopg2
import psycopg2.extensions
import pytest

import rewind
from bench.measure import count_round_trips


def _pipeline():
    @rewind.action(reads=["x"], writes=["y"])
    def a(state):
        return state.update(y=state["x"] + 1)

    @rewind.action(reads=["y"], writes=["z"])
    def b(state):
        return state.update(z=state["y"] * 2)

    @rewind.action(reads=["z"], writes=["w"])
    def c(state):
        return state.update(w=state["z"] - 3)

    from burr.core.graph import GraphBuilder

    g = GraphBuilder().with_actions(a=a, b=b, c=c).with_transitions(("a", "b"), ("b", "c")).build()
    return rewind.Pipeline("pipe", g, "a")


def test_a_no_edit_fork_takes_at_most_six_round_trips(pg_url):
    rw = rewind.Rewind(pg_url)
    try:
        p = _pipeline()
        root = rw.run(p, {"x": 1})
        rw.fork(root.id, at="b")
        count = count_round_trips(rw.store.connection)
        fork = rw.fork(root.id, at="b")
        assert [s.status for s in fork.steps] == ["inherited", "cached", "cached"]
        assert count["n"] <= 6, count
        again = rw.get_run(fork.id)
        assert [s.status for s in again.steps] == ["inherited", "cached", "cached"]
        assert again.status == "completed"
    finally:
        rw.close()


def test_a_failing_held_write_rolls_the_transaction_back(pg_url):
    rw = rewind.Rewind(pg_url)
    store = rw.store
    try:
        with store.transaction():
            store.execute("INSERT INTO alarms (node, input_hash, output_hash_a, output_hash_b, "
                          "run_id, created_at) VALUES ('n', 'i', 'a', 'b', 'r', 1)")
        with pytest.raises(psycopg2.IntegrityError):
            with store.transaction():
                store.execute("INSERT INTO alarms (node, input_hash, output_hash_a, "
                              "output_hash_b, run_id, created_at) VALUES ('n2', 'i', 'a', 'b', 'r', 1)")
                # held: the duplicate key fails when the transaction sends it, at COMMIT
                store.execute("INSERT INTO alarms (node, input_hash, output_hash_a, "
                              "output_hash_b, run_id, created_at) VALUES ('n', 'i', 'a', 'b', 'r', 1)")
        assert [a["node"] for a in store.alarms()] == ["n"]  # n2 rolled back with it
        assert store.connection.depth == 0 and store.connection.held == []
        # a held write is visible to a read later in the same transaction
        with store.transaction():
            store.execute("INSERT INTO alarms (node, input_hash, output_hash_a, output_hash_b, "
                          "run_id, created_at) VALUES ('n3', 'i', 'a', 'b', 'r', 1)")
            assert sorted(a["node"] for a in store.alarms()) == ["n", "n3"]
    finally:
        rw.close()


def test_a_failing_savepoint_rolls_back_to_it_only(pg_url):
    rw = rewind.Rewind(pg_url)
    store = rw.store
    sql = ("INSERT INTO alarms (node, input_hash, output_hash_a, output_hash_b, run_id, "
           "created_at) VALUES (?, 'i', 'a', 'b', 'r', 1)")
    try:
        with store.transaction():
            store.execute(sql, ("outer",))
            with pytest.raises(psycopg2.IntegrityError):
                with store.transaction():
                    store.execute(sql, ("inner",))
                    store.execute(sql, ("outer",))  # duplicate: fails at the savepoint's end
            store.execute(sql, ("after",))
        assert sorted(a["node"] for a in store.alarms()) == ["after", "outer"]
    finally:
        rw.close()
