"""A run is named by any unique prefix of its id, as git names a commit (issue 41, part 5).

Seen in the first ten minutes: `rewind fork 9c316 --plan` said "no run '9c316'". Now every
command that takes a run id takes a unique prefix of at least 4 characters; an ambiguous one is
refused in one line naming the runs it matches, and another owner's run never matches.
"""

from __future__ import annotations

import contextlib
import io
import time

import pytest
import shapes

import rewind
from rewind import InvalidRequest, NotFound, Rewind
from rewind.cli import main


def cli(db: str, *argv: str) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--db", db, *argv])
    return code, out.getvalue(), err.getvalue()


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rewind: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _fake_run(rw: Rewind, run_id: str, owner=None) -> None:
    """A bare run row: enough to be named, listed and matched by a prefix."""
    rw.store.insert_run({"id": run_id, "pipeline": "linear", "status": "completed",
                         "created_at": time.time(), "owner": owner})


@pytest.fixture
def db(store_url, pipeline_registry):
    """A real run of `linear` and three rows whose ids share the prefix `zzzz`."""
    pipeline = rewind.register_pipeline(shapes.linear())
    with Rewind(store_url) as rw:
        run = rw.run(pipeline, {"topic": "bees"})
        for n in range(1, 4):
            _fake_run(rw, f"zzzz{n:012d}")
    return store_url, run.id  # registered for the CLI here; the fixture forgets it after


def test_fork_plan_and_show_take_a_unique_prefix(db):
    url, run_id = db
    code, out, err = cli(url, "fork", run_id[:6], "--at", "draft", "--plan")
    assert code == 0, err
    assert "estimate:" in out and "draft" in out
    code, out, err = cli(url, "show", run_id[:5], "--json")
    assert code == 0, err
    assert f'"id": "{run_id}"' in out


def test_every_run_taking_command_resolves_a_prefix(db, tmp_path):
    url, run_id = db
    with Rewind(url) as rw:
        fork = rw.fork(run_id, at="draft", edit={"plan": "other"})
    code, out, err = cli(url, "diff", run_id[:6], fork.id[:6])
    assert code == 0, err
    assert f"A: {run_id}   B: {fork.id}" in out
    code, out, err = cli(url, "export", fork.id[:7])
    assert code == 0 and f'"{fork.id}"' in out, err
    code, out, err = cli(url, "export-burr", fork.id[:7], "--dir", str(tmp_path / "burr"))
    assert code == 0 and "wrote 2 Burr app(s)" in out, err
    code, out, err = cli(url, "audit", run_id[:6], "--repeats", "1", "-q")
    assert code == 0 and f"audit of run {run_id}" in out, err


def test_batch_runs_and_snapshot_take_unique_prefixes(store_url, monkeypatch, tmp_path):
    import test_batch_pipeline as app

    monkeypatch.setenv("REWIND_PIPELINES", "test_batch_pipeline:pipeline")
    with Rewind(store_url) as rw:
        ids = [rw.run(app.pipeline, {"n": n}).id for n in (1, 2)]
    code, out, err = cli(store_url, "batch", "--at", "judge", "--plan",
                         "--runs", ",".join(i[:6] for i in ids))
    assert code == 0, err
    assert "plan: fork 2 runs at judge" in out
    code, out, err = cli(store_url, "snapshot", ids[0][:6], "--to", str(tmp_path / "s.json"),
                         "--repeats", "0", "-q", "--pipeline", "test_batch_pipeline:pipeline")
    assert code == 0 and f"snapshot of run {ids[0]}" in out, err
    code, out, err = cli(store_url, "batch", "--at", "judge", "--plan", "--runs", "9999zz")
    assert code == 2 and "no run '9999zz'" in one_line(err)


def test_an_ambiguous_prefix_exits_2_naming_the_runs_it_matches(db):
    url, _ = db
    code, out, err = cli(url, "fork", "zzzz", "--at", "draft", "--plan")
    line = one_line(err)
    assert code == 2 and out == ""
    assert "'zzzz' matches 3 runs: zzzz000000000001, zzzz000000000002, zzzz000000000003" in line
    assert "type more of the id" in line
    code, _, err = cli(url, "show", "zzzz00000000000")
    assert code == 2 and "matches 3 runs" in one_line(err)
    code, out, err = cli(url, "show", "zzzz000000000002")  # an exact id is never ambiguous
    assert code == 0, err


def test_many_matches_list_five_and_say_how_many(db):
    url, _ = db
    with Rewind(url) as rw:
        for n in range(4, 9):
            _fake_run(rw, f"zzzz{n:012d}")
    code, _, err = cli(url, "show", "zzzz")
    line = one_line(err)
    assert code == 2 and "'zzzz' matches 8 runs: " in line
    assert "zzzz000000000005, ...;" in line and "zzzz000000000006" not in line


def test_an_unknown_or_short_prefix_exits_2(db):
    url, run_id = db
    code, out, err = cli(url, "fork", "9999zz", "--at", "draft", "--plan")
    assert code == 2 and out == ""
    assert "no run '9999zz'" in one_line(err)
    code, _, err = cli(url, "show", run_id[:3])
    line = one_line(err)
    assert code == 2 and "at least 4 characters" in line


def test_like_wildcards_and_case_match_only_themselves(store_url):
    with Rewind(store_url) as rw:
        _fake_run(rw, "ab_d000000000001")
        _fake_run(rw, "abcd000000000002")
        _fake_run(rw, "ab%d000000000003")
        assert rw.resolve_run_id("ab_d") == "ab_d000000000001"
        assert rw.resolve_run_id("ab%d") == "ab%d000000000003"
        assert rw.resolve_run_id("abcd") == "abcd000000000002"
        with pytest.raises(NotFound):
            rw.resolve_run_id("ABCD")  # SQLite's LIKE ignores case; a run id does not
        with pytest.raises(NotFound):
            rw.resolve_run_id("a_cd")


def test_another_owners_run_is_never_matched_by_a_prefix(store_url):
    with Rewind(store_url, owner="alice@example.com") as alice, \
            Rewind(store_url, owner="bob@example.com") as bob, \
            Rewind(store_url, owner="root@example.com", admin=True) as admin:
        _fake_run(alice, "zzzz000000000001", owner="alice@example.com")
        _fake_run(bob, "zzzz000000000002", owner="bob@example.com")
        _fake_run(bob, "yyyy000000000001", owner="bob@example.com")
        # alice sees one run under the prefix: hers, and bob's is not named in any message
        assert alice.resolve_run_id("zzzz") == "zzzz000000000001"
        with pytest.raises(NotFound) as e:
            alice.resolve_run_id("yyyy")
        assert "yyyy000000000001" not in str(e.value)
        with pytest.raises(NotFound):
            alice.resolve_run_id("zzzz000000000002")  # bob's exact id reads as missing too
        assert bob.resolve_run_id("zzzz") == "zzzz000000000002"
        with pytest.raises(InvalidRequest, match="matches 2 runs"):
            admin.resolve_run_id("zzzz")  # an admin sees every owner's runs


def test_a_pasted_prefix_with_spaces_or_capitals_is_taken(db):
    url, run_id = db
    code, out, err = cli(url, "show", f"  {run_id[:6].upper()} ", "--json")
    assert code == 0, err
    assert f'"id": "{run_id}"' in out
