"""`rewind batch`: exit 0 with a progress bar and the summary table, 2 for bad input (nothing
forked). Parsed by the CLI's own parser (`rewind.cli.commands.build_parser`)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

import rewind
from rewind.cli.commands import build_parser

from test_batch import make_runs


def cli(argv: list) -> tuple:
    """(exit code, stdout, stderr) of `rewind ARGV`, in-process, as rewind.cli.main maps errors."""
    out, err = io.StringIO(), io.StringIO()
    try:
        args = build_parser("rewind").parse_args(argv)
    except SystemExit as e:
        return e.code, "", ""
    with contextlib.redirect_stderr(err):
        try:
            code = args.func(args, out)
        except rewind.RewindError as e:
            return e.exit_code, out.getvalue(), str(e)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.setenv("REWIND_PIPELINES", "test_batch_pipeline:pipeline")  # as a user would
    url = str(tmp_path / "rewind.db")
    with rewind.Rewind(url) as rw:
        make_runs(rw)
    return url


def test_batch_prints_progress_and_the_table(db):
    code, out, err = cli(["--db", db, "batch", "--at", "judge", "--pipeline", "batch-test",
                          "--param", "threshold=20", "--workers", "2"])
    assert code == 0, err
    assert "outcomes: 4 changed, 23 same, 0 failed, 3 skipped (of 30)" in out
    assert "tokens: 163 spent" in out and "next: rewind diff " in out
    assert out.splitlines()[0].split() == ["run", "fork", "outcome", "first", "divergence",
                                           "tokens", "saved", "reason"]
    assert "30/30" in err  # the progress bar, on stderr


def test_batch_json_plan_and_explicit_runs(db):
    with rewind.Rewind(db) as rw:
        ids = [r.id for r in rw.list_runs(limit=3)]
    code, out, _ = cli(["--db", db, "batch", "--at", "judge", "--runs", ",".join(ids),
                        "--param", "threshold=20", "--json", "--workers", "1"])
    assert code == 0
    doc = json.loads(out)
    assert [r["run_id"] for r in doc["rows"]] == ids and doc["counts"]["skipped"] == 1
    code, out, _ = cli(["--db", db, "batch", "--at", "judge", "--pipeline", "batch-test",
                        "--plan", "--limit", "10"])
    assert code == 0 and "plan: fork 10 runs at judge: 9 reach it, 1 would be skipped" in out
    assert "nodes that may re-run: judge → tally → summarize" in out


@pytest.mark.parametrize("argv, words", [
    (["--at", "judge", "--pipeline", "batch-test", "--param", "threshold=oops"], "--param threshold"),
    (["--at", "judge", "--pipeline", "batch-test", "--edit", "n=1"], "does not read 'n'"),
    (["--at", "nowhere", "--pipeline", "batch-test"], "no node 'nowhere'"),
    (["--at", "judge"], "--pipeline P or --runs"),
    (["--at", "judge", "--runs", " , "], "--runs"),
    (["--at", "judge", "--runs", "missing-run"], "missing-run"),
    (["--at", "judge", "--pipeline", "batch-test", "--workers", "0"], ""),
    (["--at", "judge", "--pipeline", "batch-test", "--executor", "dask"], ""),
])
def test_bad_input_exits_2_and_forks_nothing(db, argv, words):
    code, _, err = cli(["--db", db, "batch", *argv])
    assert code == 2 and words in err
    with rewind.Rewind(db) as rw:
        assert rw.count_runs() == 30
