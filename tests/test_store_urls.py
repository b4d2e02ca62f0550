"""Hostile database URLs, database paths, OTLP endpoints and run states (issue 38, points 5
and 6): a SQLite URL is read as SQLAlchemy reads it (`sqlite:///relative`, `sqlite:////absolute`,
`?mode=ro|rw|rwc`, any other option refused by name); a device or another non-regular file is
refused as a database; an OTLP endpoint must be http(s); a state that is not a mapping is an
`InvalidRequest` naming the state. Each refusal is one line (exit 2 on the CLI) and writes
nothing."""

from __future__ import annotations

import os
import socket

import pytest

from rewind import Rewind
from rewind.cli import main
from rewind.errors import InvalidRequest
from rewind.store import open_store

import shapes


def _files(folder) -> list:
    return sorted(os.listdir(folder))


def _cli(capsys, *argv) -> tuple:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- SQLite URLs ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["rw", "rwc"])
def test_a_mode_option_is_understood_not_part_of_the_file_name(tmp_path, monkeypatch, mode):
    monkeypatch.chdir(tmp_path)
    Rewind("m.db", pipelines=[shapes.linear()]).close()  # rw needs the file to exist
    rw = Rewind(f"sqlite:///m.db?mode={mode}", pipelines=[shapes.linear()])
    assert not rw.store.read_only
    assert rw.run(shapes.linear(), {"topic": mode}).status == "completed"
    rw.close()
    assert "m.db" in _files(tmp_path)
    assert not [f for f in _files(tmp_path) if "?" in f or "mode" in f], _files(tmp_path)
    with Rewind(str(tmp_path / "m.db")) as again:
        assert [r.summary for r in again.list_runs()] == [mode]


def test_mode_rw_does_not_create_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidRequest) as e:
        Rewind("sqlite:///absent.db?mode=rw")
    assert "absent.db" in str(e.value) and "mode=rw" in str(e.value)
    assert _files(tmp_path) == []
    with Rewind("sqlite:///created.db?mode=rwc"):
        pass
    assert "created.db" in _files(tmp_path)


def test_relative_and_absolute_urls_as_sqlalchemy_spells_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with Rewind("sqlite:///sub/rel.db") as rw:
        assert rw.store.path == str(tmp_path / "sub" / "rel.db")
    absolute = tmp_path / "abs.db"
    with Rewind(f"sqlite:///{absolute}") as rw:  # four slashes: sqlite:////tmp/...
        assert rw.store.path == str(absolute)
    with Rewind(f"sqlite:///{absolute}?mode=ro") as rw:
        assert rw.store.read_only
    for memory in ("sqlite://", "sqlite:///:memory:"):
        with Rewind(memory) as rw:
            assert rw.store.path == ":memory:"
    assert not [f for f in _files(tmp_path) if "memory" in f or "sqlite" in f]


@pytest.mark.parametrize("url, named", [
    ("sqlite:///m.db?mode=rx", "mode"),
    ("sqlite:///m.db?mode=ro&mode=rw", "mode"),
    ("sqlite:///m.db?cache=shared", "cache"),
    ("sqlite:///m.db?journal_mode=delete", "journal_mode"),
    ("sqlite:///m.db?mode", "mode"),
    ("sqlite://host/m.db", "host"),
    ("sqlite://user:pw@/m.db", "user"),
])
def test_unknown_or_bad_url_options_are_refused_by_name(tmp_path, monkeypatch, capsys, url, named):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidRequest) as e:
        open_store(url)
    assert named in str(e.value) and "\n" not in str(e.value)
    assert "pw" not in str(e.value)  # a password in the URL is not repeated
    code, out, err = _cli(capsys, "--db", url, "runs")
    assert code == 2 and out == ""
    assert err.startswith("rewind: error: --db: ") and err.count("\n") == 1 and named in err
    monkeypatch.setenv("REWIND_DB", url)
    code, out, err = _cli(capsys, "runs")
    assert code == 2 and err.startswith("rewind: error: REWIND_DB: ") and err.count("\n") == 1
    assert _files(tmp_path) == []  # no file of any name was made


# --- devices and other non-regular files -----------------------------------------------------

def _fifo(tmp_path) -> str:
    path = str(tmp_path / "pipe.db")
    os.mkfifo(path)
    return path


def _socket(tmp_path) -> str:
    path = str(tmp_path / "sock.db")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()
    return path


def _symlink_to_null(tmp_path) -> str:
    path = str(tmp_path / "null.db")
    os.symlink("/dev/null", path)
    return path


@pytest.mark.parametrize("make", [lambda p: "/dev/null", lambda p: "/dev/zero", _fifo, _socket,
                                  _symlink_to_null], ids=["null", "zero", "fifo", "socket", "link"])
def test_a_device_or_special_file_is_refused_as_a_database(tmp_path, monkeypatch, capsys, make):
    path = make(tmp_path)
    before = _files(tmp_path)
    for url in (path, f"sqlite:///{path}", f"sqlite:///{path}?mode=ro"):
        with pytest.raises(InvalidRequest) as e:
            open_store(url)
        assert path in str(e.value) and "not a regular file" in str(e.value), str(e.value)
    code, out, err = _cli(capsys, "--db", path, "runs")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "not a regular file" in err and "disk I/O" not in err and "internal error" not in err
    monkeypatch.setenv("REWIND_DB", path)
    code, out, err = _cli(capsys, "runs")
    assert code == 2 and err.startswith("rewind: error: REWIND_DB: ") and err.count("\n") == 1
    assert _files(tmp_path) == before  # no -wal, no -shm beside it


# --- OTLP endpoints ----------------------------------------------------------------------------

@pytest.mark.parametrize("endpoint", ["file:///etc/passwd", "javascript:alert(1)", "ftp://h/x",
                                      "localhost:4318", "http://", "https:///v1/traces"])
def test_an_otlp_endpoint_must_be_an_http_url(tmp_path, monkeypatch, capsys, endpoint):
    db = str(tmp_path / "rewind.db")
    with Rewind(db, pipelines=[shapes.linear()]) as rw:
        run = rw.run(shapes.linear(), {"topic": "otel"})
        with pytest.raises(InvalidRequest) as e:
            rw.export_otel(run.id, endpoint=endpoint)
        assert endpoint in str(e.value) and "http" in str(e.value)
        assert "is it running" not in str(e.value)
    code, out, err = _cli(capsys, "--db", db, "export-otel", run.id, "--endpoint", endpoint)
    assert code == 2 and err.count("\n") == 1 and endpoint in err and "is it running" not in err
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    code, out, err = _cli(capsys, "--db", db, "export-otel", run.id)
    assert code == 2 and err.count("\n") == 1 and "OTEL_EXPORTER_OTLP_ENDPOINT" in err
    with pytest.raises(InvalidRequest):
        Rewind(db, otel=endpoint)  # live export: refused when the handle opens


def test_an_otlp_endpoint_with_a_password_is_named_without_it(tmp_path):
    with Rewind(str(tmp_path / "rewind.db"), pipelines=[shapes.linear()]) as rw:
        run = rw.run(shapes.linear(), {"topic": "otel"})
        with pytest.raises(InvalidRequest) as e:
            rw.export_otel(run.id, endpoint="ftp://user:s3cret@collector/v1")
    assert "s3cret" not in str(e.value) and "collector" in str(e.value)


# --- a state that is not a mapping -------------------------------------------------------------

@pytest.mark.parametrize("state", [["a", "b"], "topic", 7, [("topic", "x")]])
def test_a_state_that_is_not_a_mapping_is_an_invalid_request(tmp_path, state):
    with Rewind(str(tmp_path / "rewind.db"), pipelines=[shapes.linear()]) as rw:
        with pytest.raises(InvalidRequest) as e:
            rw.run(shapes.linear(), state)
        assert e.value.field == "state" and "state" in str(e.value)
        assert type(state).__name__ in str(e.value)
        assert rw.list_runs() == []
        assert rw.store.query("SELECT COUNT(*) FROM burr_state")[0][0] == 0
