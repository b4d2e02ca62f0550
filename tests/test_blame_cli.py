"""Issue 39: `rewind blame` on the demo pipeline, offline: a progress bar, a table of success
rates per step and the verdicts; a function outcome from the project; every bad input one line,
exit 2, nothing forked."""

from __future__ import annotations

import json

import pytest

from test_cli import Cli, RUN_ID, one_error_line


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("blame")
    cli = Cli(tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REWIND_OUTBOX", str(tmp / "outbox"))
        p = cli("demo")
        assert p.returncode == 0, p.stderr
        yield cli, RUN_ID.search(p.stdout).group(1), tmp


def test_blame_the_demo_with_a_field_outcome(demo):
    cli, run, _ = demo
    before = cli.run_count()
    # the demo's report cites 4 documents or so: "exactly 1 citation" fails on it
    p = cli("blame", run[:8], "--outcome", "critique!=null", "--samples", "2",
            "--strategy", "bisect", "--param", "temperature=0.9")
    assert p.returncode == 2 and "passes the outcome" in one_error_line(p)
    p = cli("blame", run[:8], "--outcome", 'question="never this question"', "--samples", "2",
            "--strategy", "each", "--resample", "critique,revise", "--param", "temperature=0.9")
    assert p.returncode == 0, p.stderr
    assert "success when re-rolled" in p.stdout and "95% interval" in p.stdout
    assert "no decisive step" in p.stdout  # the question never changes: nothing recovers
    assert "[" in p.stderr  # the progress bar
    assert cli.run_count() - before == 4  # 2 steps tried x 2 samples, each a normal run


def test_blame_json_with_a_function_outcome(demo, monkeypatch):
    cli, run, tmp = demo
    (tmp / "demo_checks.py").write_text(
        "def cites_one(state):\n    return state['verification']['citations'] == 1\n")
    monkeypatch.syspath_prepend(str(tmp))
    p = cli("blame", run, "--outcome", "demo_checks:cites_one", "--samples", "1",
            "--resample", "compose", "--json", "--budget", "100000")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["run_id"] == run and report["resample"] == ["compose"]
    assert [r["verdict"] for r in report["steps"] if r["resampled"]] in (["locked"], ["decisive"])
    assert report["tokens"] >= 0 and len(report["trial_runs"]) == 1


@pytest.mark.parametrize("args,words", [
    (["--outcome", "oops"], "expected FIELD=JSON"),
    (["--outcome", "okay=true"], "no field 'okay' in the final state"),
    (["--outcome", "x=not json"], "--outcome x"),
    (["--outcome", "no_such_module_xyz:f"], "No module named"),
    (["--outcome", "ok=true", "--resample", ","], "--resample"),
    (["--outcome", "ok=true", "--samples", "0"], "--samples"),
    (["--outcome", "ok=true", "--param", "nope=1"], "no re-sampled node"),
])
def test_bad_input_is_one_line_and_exit_2(demo, args, words):
    cli, run, _ = demo
    before = cli.run_count()
    p = cli("blame", run, *args)
    assert p.returncode == 2 and words in one_error_line(p)
    assert cli.run_count() == before
