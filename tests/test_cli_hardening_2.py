"""CLI hardening, second round: where a command writes (snapshot --to, export-burr --dir), which
database a flag names (--db), and what listings, help and reports say (runs --status halted,
pipelines, serve-llm on 0.0.0.0, batch's outcome fields). In-process against SQLite files in
tmp_path, like tests/test_cli.py; bad input is one line and exit 2, checked before any work."""

from __future__ import annotations

import contextlib
import io
import os
import re

import pytest

import rewind
import rewind.testing
from rewind.model import server as llm_server
from rewind.cli import main
from rewind.testing import format as snapshot_format

from test_cli import RUN_ID, Cli, one_error_line


def run_main(*argv: str):
    """(exit code, stdout, stderr) of `rewind ARGV` with no --db added."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(cli, the id of a completed demo run, the id of a halted one)."""
    tmp = tmp_path_factory.mktemp("hardening")
    cli = Cli(tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REWIND_OUTBOX", str(tmp / "outbox"))
        p = cli("demo", "-q")
        assert p.returncode == 0, p.stderr
        from rewind.pipelines.research import pipeline

        with rewind.Rewind(str(cli.db)) as rw:
            halted = rw.run(pipeline, dict(pipeline.sample_state), halt_after=["plan"])
    assert halted.status == "halted"
    return cli, RUN_ID.search(p.stdout).group(1), halted.id


@pytest.fixture
def no_audit(monkeypatch):
    """Fails the test if the snapshot's work (the run's capture and audit) is started."""
    def boom(*a, **k):
        raise AssertionError("the snapshot was taken before its destination was checked")

    monkeypatch.setattr(rewind.testing, "snapshot_run", boom)


# --- snapshot --to ------------------------------------------------------------------------------

def test_snapshot_to_a_symlink_writes_its_target_and_keeps_the_link(demo, tmp_path):
    cli, run_id, _ = demo
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    link.symlink_to(target)
    p = cli("snapshot", run_id, "--to", str(link), "--repeats", "0", "-q")
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert snapshot_format.is_snapshot_file(target)
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real.json"]  # no .tmp left


def test_snapshot_to_a_fifo_is_refused_before_any_work(demo, tmp_path, no_audit):
    cli, run_id, _ = demo
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    p = cli("snapshot", run_id, "--to", str(fifo), "-q")
    assert p.returncode == 2
    err = one_error_line(p)
    assert "--to" in err and "not a regular file" in err
    assert fifo.is_fifo() and os.listdir(tmp_path) == ["pipe.json"]
    # a symlink to it is followed, so refused too
    (tmp_path / "via.json").symlink_to(fifo)
    p = cli("snapshot", run_id, "--to", str(tmp_path / "via.json"), "-q")
    assert p.returncode == 2 and "not a regular file" in one_error_line(p)
    assert fifo.is_fifo()


def test_snapshot_to_a_directory_is_refused_before_any_work_and_leaves_nothing(demo, tmp_path,
                                                                             no_audit):
    cli, run_id, _ = demo
    folder = tmp_path / "snaps"
    folder.mkdir()
    p = cli("snapshot", run_id, "--to", str(folder), "-q")
    assert p.returncode == 2
    err = one_error_line(p)
    assert "--to" in err and "is a directory" in err and "IsADirectoryError" not in err
    assert os.listdir(tmp_path) == ["snaps"] and os.listdir(folder) == []


def test_snapshot_under_a_file_is_refused_before_any_work(demo, tmp_path, no_audit):
    cli, run_id, _ = demo
    (tmp_path / "plain").write_text("x")
    for to in ("plain/x.json", "plain/deeper/x.json"):
        p = cli("snapshot", run_id, "--to", str(tmp_path / to), "-q")
        assert p.returncode == 2
        err = one_error_line(p)
        assert "--to" in err and "is not a directory" in err and "FileExistsError" not in err
    assert os.listdir(tmp_path) == ["plain"] and (tmp_path / "plain").read_text() == "x"


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder nobody may add to: a read-only bind mount for root (whom permission bits do
    not stop), a mode-555 folder for anyone else."""
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    for cmd in (["mount", "--bind", str(folder), str(folder)],
                ["mount", "-o", "remount,ro,bind", str(folder)]):
        subprocess.run(cmd, check=True, capture_output=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True, capture_output=True)


def test_snapshot_and_export_into_a_read_only_folder_are_refused_before_any_work(
        demo, read_only_folder, no_audit):
    cli, run_id, _ = demo
    p = cli("snapshot", run_id, "--to", str(read_only_folder / "r.json"), "-q")
    assert p.returncode == 2
    err = one_error_line(p)
    assert "--to" in err and "not writable" in err and "OSError" not in err
    p = cli("export-burr", run_id, "--dir", str(read_only_folder / "out"))
    assert p.returncode == 2
    err = one_error_line(p)
    assert "--dir" in err and "not writable" in err and "OSError" not in err
    assert os.listdir(read_only_folder) == []


def test_write_refuses_what_is_not_a_file_and_never_writes_through_a_planted_tmp(tmp_path):
    doc = {"format": snapshot_format.FORMAT, "version": snapshot_format.VERSION}
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    with pytest.raises(rewind.InvalidRequest, match="not a regular file"):
        snapshot_format.write(doc, fifo)
    assert fifo.is_fifo()
    # a symlink at the temporary name is replaced, not followed
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "s.json.tmp").symlink_to(victim)
    snapshot_format.write(doc, tmp_path / "s.json")
    assert victim.read_text() == "keep"
    assert snapshot_format.is_snapshot_file(tmp_path / "s.json")
    assert not os.path.lexists(tmp_path / "s.json.tmp")


# --- export-burr --dir --------------------------------------------------------------------------

def test_export_burr_into_a_file_exits_2_naming_dir(demo, tmp_path):
    cli, run_id, _ = demo
    (tmp_path / "plain").write_text("x")
    for d in ("plain", "plain/sub"):
        p = cli("export-burr", run_id, "--dir", str(tmp_path / d))
        assert p.returncode == 2
        err = one_error_line(p)
        assert "--dir" in err and "not a directory" in err and "NotADirectoryError" not in err
    assert os.listdir(tmp_path) == ["plain"]


# --- statuses, help, listings ---------------------------------------------------------------------

def test_runs_filters_by_every_run_status_halted_included(demo):
    cli, run_id, halted_id = demo
    p = cli("runs", "--status", "halted")
    assert p.returncode == 0, p.stderr
    assert re.search(rf"^{halted_id}\s+research\s+halted\b", p.stdout, re.M), p.stdout
    assert run_id not in p.stdout
    for status in rewind.RunStatus:  # the flag's choices are the enum, whatever it grows
        assert cli("runs", "--status", status.value).returncode == 0, status


def test_resume_help_mentions_halted_runs(capsys):
    assert main(["resume", "--help"]) == 0
    assert "halted" in capsys.readouterr().out


def test_pipelines_reports_each_broken_entry_on_stderr(demo, monkeypatch):
    cli, _, _ = demo
    monkeypatch.setenv("REWIND_PIPELINES", "nope:x, alsonope_mod:y")
    p = cli("pipelines")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^research\s+plan\b", p.stdout, re.M)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 2, p.stderr
    assert "'nope:x'" in lines[0] and "'alsonope_mod:y'" in lines[1]
    assert all(line.startswith("rewind: warning: REWIND_PIPELINES entry") for line in lines)


def test_serve_llm_on_all_interfaces_says_so(monkeypatch, capsys):
    monkeypatch.setattr(llm_server.SimulatorServer, "serve_forever", lambda self, **k: None)
    llm_server.serve("0.0.0.0", 0)
    err = capsys.readouterr().err
    m = re.search(r"listening on 0\.0\.0\.0:(\d+) \(all interfaces\)", err)
    assert m, err
    assert f"http://127.0.0.1:{m.group(1)}/v1" in err  # what a client on this machine uses
    # a named host is printed as before (tests and users read the URL off this line)
    llm_server.serve("127.0.0.1", 0)
    err = capsys.readouterr().err
    assert re.search(r"listening on http://127\.0\.0\.1:\d+/v1 ", err) and "all interfaces" not in err


# --- --db -----------------------------------------------------------------------------------------

def test_db_with_an_unsupported_scheme_exits_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main("--db", "mysql://x/y", "runs")
    assert code == 2, err
    assert err.strip() == ("rewind: error: --db: unsupported database URL scheme 'mysql' "
                           "(use a SQLite file path or postgresql://...)")
    monkeypatch.setenv("REWIND_DB", "mysql://x/y")
    code, _, err = run_main("runs")
    assert code == 2 and "REWIND_DB" in err and "'mysql'" in err
    with pytest.raises(rewind.InvalidRequest, match="scheme 'redis'"):
        rewind.Rewind("redis://h/0")
    assert os.listdir(tmp_path) == []
    # paths (a colon in a name, sqlite:///) still open
    for url in (str(tmp_path / "a:b.db"), f"sqlite:///{tmp_path / 'c.db'}"):
        code, out, err = run_main("--db", url, "runs")
        assert code == 0 and out.strip() == "no runs", err


def test_empty_db_is_refused_and_no_argument_still_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main("--db", "", "runs")
    assert code == 2 and err.startswith("rewind: error: --db is empty"), err
    monkeypatch.setenv("REWIND_DB", "")
    code, _, err = run_main("runs")
    assert code == 2 and "REWIND_DB is set but empty" in err, err
    with pytest.raises(rewind.InvalidRequest, match="empty"):
        rewind.Rewind("")
    assert os.listdir(tmp_path) == []
    monkeypatch.delenv("REWIND_DB")
    with rewind.Rewind() as rw:  # documented: ./rewind.db
        assert rw.count_runs() == 0
    assert (tmp_path / "rewind.db").exists()


# --- batch's default outcome ----------------------------------------------------------------------

def test_batch_help_and_report_name_the_outcome_fields(demo, capsys):
    cli, run_id, _ = demo
    assert main(["batch", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "last node that is not a side effect" in help_text
    p = cli("batch", "--at", "critique", "--runs", run_id, "--param", "temperature=0.7",
            "--workers", "1", "-q")
    assert p.returncode == 0, p.stderr
    assert "outcome fields compared: verification" in p.stdout, p.stdout


def test_a_pipeline_spec_naming_a_function_that_needs_arguments_is_refused(demo):
    cli, _, _ = demo
    p = cli("run", "--pipeline", "os:system")
    assert p.returncode == 2
    err = one_error_line(p)
    assert "'os:system'" in err and "rewind.Pipeline" in err and "internal error" not in err


def test_show_counts_inherited_steps_as_saved_like_the_dashboard(demo):
    """`rewind show` printed only the cached steps' savings (0 for a fork that inherits its
    steps); `rewind.costs` and the dashboard count the inherited ones too."""
    from rewind.cli.output import run_headline
    from rewind.costs import run_costs

    cli, run_id, _ = demo
    with rewind.Rewind(str(cli.db)) as rw:
        fork = rw.get_run(rw.fork(run_id, at="verify").id)
        saved = run_costs(fork)["saved"] if isinstance(run_costs(fork), dict) else fork.saved
        assert fork.saved > fork.tokens_saved and saved == fork.saved
        assert f"{fork.saved} saved" in run_headline(fork)


def test_snapshot_into_a_folder_that_takes_no_file_is_refused_before_any_work(demo, no_audit):
    """`/proc` passes root's access checks yet takes no new entry: the refusal came after the
    whole audit, as a FileNotFoundError with exit code 1 (a stranger's find). The folder is
    now tried with a file of its own first."""
    cli, run_id, _ = demo
    p = cli("snapshot", run_id, "--to", "/proc/nope/x.json", "-q")
    assert p.returncode == 2
    err = one_error_line(p)
    assert "--to" in err and "/proc" in err and "takes no new file" in err
