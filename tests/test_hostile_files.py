"""Hostile files and full disks (issue 38), part one: ids that are paths, and silent overwrites.

Seen: `rewind import` took any string as a run id; a crafted export whose run id was
`/tmp/victim` made `export-burr` overwrite `/tmp/victim/graph.json`, `log.jsonl` and
`metadata.json`, and a `../..` id wrote outside `--dir`. `rewind snapshot RUN --to existing.json`
replaced an unrelated JSON file, and `export-burr` replaced an existing app's `log.jsonl`.

Now every run id an import brings is checked (one line naming it, exit 2, nothing written),
export-burr refuses an id that would leave `--dir` (defence in depth: a database written before
the check), and writing over a file Rewind did not write needs `--force`. In-process CLI against
SQLite files, the import checks on both backends.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import shapes
from test_cli import Cli, one_error_line
from test_maintenance import PIPELINE, _valid_doc, snapshot

import rewind
from rewind import InvalidRequest, Rewind
from rewind.integrations import burr_tracking
from rewind.testing import format as snapshot_format

SPEC = ("--pipeline", "shapes:linear")
HOSTILE_IDS = ["/tmp/rewind-victim", "../../escape", "a/b", "..", ".", "x\\y", "-rf", "a\nb"]


def _tree(root) -> list:
    """Every path under `root`, relative, sorted (what a command left there)."""
    out = []
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            out.append(os.path.relpath(os.path.join(here, name), root))
    return sorted(out)


@pytest.fixture(autouse=True)
def _registry_left_as_found(pipeline_registry):
    # these tests register pipelines for every handle of the process: not for later tests
    yield


@pytest.fixture
def linear_runs(tmp_path):
    """(cli, a run, its fork) of the linear shape in a SQLite file."""
    pipeline = rewind.register_pipeline(shapes.linear())
    cli = Cli(tmp_path)
    with Rewind(str(cli.db)) as rw:
        run = rw.run(pipeline, {"topic": "bees"})
        fork = rw.fork(run.id, at="stats")
    return cli, run, fork


# --- finding 1: an imported run id is used as a path -------------------------------------------

@pytest.mark.parametrize("bad_id", HOSTILE_IDS)
def test_import_refuses_a_run_id_that_is_a_path_and_writes_nothing(tmp_path, bad_id):
    doc = _valid_doc(tmp_path)
    victim = doc["run_id"]
    crafted = json.loads(json.dumps(doc).replace(victim, bad_id.replace("\\", "\\\\")
                                                 .replace("\n", "\\n")))
    assert crafted["run_id"] == bad_id
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(crafted))
    cli = Cli(tmp_path)
    p = cli("import", str(path))
    assert p.returncode == 2, p.stderr
    err = one_error_line(p)
    assert repr(bad_id) in err and "run id" in err, err
    assert cli.run_count() == 0
    # and export-burr of the run that was never imported writes nothing anywhere
    out = tmp_path / "burr"
    p = cli("export-burr", bad_id, "--dir", str(out))
    assert p.returncode == 2
    assert not os.path.lexists("/tmp/rewind-victim") and not out.exists()


def _places(doc: dict) -> list:
    """(where, a change putting a hostile id there) for every id an export document carries."""
    def at(fn):
        def change(d):
            fn(d)
            return d
        return change
    return [
        ("runs[0].id", at(lambda d: d["runs"][0].update(id="../../up"))),
        ("runs[1].parent_id", at(lambda d: d["runs"][1].update(parent_id="/tmp/rewind-victim"))),
        ("run_id", at(lambda d: d.update(run_id="a/b"))),
        ("missing_ancestors[0]", at(lambda d: d.update(missing_ancestors=[".."]))),
        ("nodes[0].run_id", at(lambda d: d["nodes"][0].update(run_id="../x"))),
        ("nodes[0].source_run", at(lambda d: d["nodes"][0].update(source_run="/etc"))),
        ("nodes[0].state_app_id", at(lambda d: d["nodes"][0].update(state_app_id="."))),
        ("states[0].app_id", at(lambda d: d["states"][0].update(app_id="x/../../y"))),
        ("cache[0].source_run", at(lambda d: d["cache"][0].update(source_run="..\\win"))),
    ]


def test_every_id_an_import_brings_is_checked_on_both_backends(db_url, tmp_path):
    doc = _valid_doc(tmp_path)
    assert doc["cache"] and doc["states"] and len(doc["runs"]) == 2
    rw = Rewind(db_url, pipelines=[PIPELINE])
    rw.run(PIPELINE, {"topic": "already here"})
    before = snapshot(rw.store)
    for where, change in _places(doc):
        with pytest.raises(InvalidRequest) as e:
            rw.import_run(change(json.loads(json.dumps(doc))))
        msg = str(e.value)
        assert where in msg and "run id" in msg and len(msg.splitlines()) == 1, (where, msg)
        assert snapshot(rw.store) == before, where
    assert rw.import_run(doc)  # the document itself imports
    rw.close()


def _plant_run(db, run_id: str, parent_id: str = None) -> None:
    """A run row with a hostile id, as a database written before ids were checked holds it."""
    pipeline = rewind.register_pipeline(shapes.linear())
    with Rewind(str(db)) as rw, rw.store.transaction():
        rw.store.insert_run({"id": run_id, "pipeline": pipeline.name, "status": "completed",
                             "created_at": time.time(), "graph_id": pipeline.graph_id,
                             "parent_id": parent_id, "fork_index": 1 if parent_id else 0})


@pytest.mark.parametrize("run_id, parent_id", [
    ("../../escape", None), ("/tmp/rewind-victim", None), ("child", "/tmp/rewind-victim"),
    ("child", "../../escape"),
], ids=["dotdot id", "absolute id", "absolute parent", "dotdot parent"])
def test_export_burr_never_writes_outside_dir_for_a_stored_hostile_id(linear_runs, tmp_path,
                                                                      run_id, parent_id):
    cli, _, _ = linear_runs
    _plant_run(cli.db, run_id, parent_id)
    out = tmp_path / "a" / "b" / "burr"
    before = _tree(tmp_path)
    for extra in ([], ["--no-lineage"]):
        p = cli("export-burr", "child" if parent_id else run_id, "--dir", str(out), *extra)
        assert p.returncode == 2, p.stdout
        err = one_error_line(p)
        assert repr(parent_id or run_id) in err and "run id" in err, err
    assert not os.path.lexists("/tmp/rewind-victim")
    assert _tree(tmp_path) == before  # not even the folders: every path is checked first


def test_app_path_keeps_every_app_inside_its_project_folder(tmp_path):
    assert burr_tracking.app_path(str(tmp_path), "p", "0123abcd") == str(tmp_path / "p" / "0123abcd")
    for bad in HOSTILE_IDS + ["", "a" * 200]:
        with pytest.raises(InvalidRequest, match="run id"):
            burr_tracking.app_path(str(tmp_path), "p", bad)
    # a symlinked app folder that leads out of the project folder is refused too
    (tmp_path / "p").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "p" / "0123abcd").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InvalidRequest, match="outside"):
        burr_tracking.app_path(str(tmp_path), "p", "0123abcd")


# --- finding 4: silent overwrites --------------------------------------------------------------

def test_snapshot_over_a_json_file_rewind_did_not_write_needs_force(linear_runs, tmp_path):
    cli, run, _ = linear_runs
    theirs = tmp_path / "settings.json"
    theirs.write_text('{"mine": true}\n')
    p = cli("snapshot", run.id, "--to", str(theirs), "--repeats", "0", "-q", *SPEC)
    assert p.returncode == 2
    err = one_error_line(p)
    assert str(theirs) in err and "--force" in err and "overwrite" in err, err
    assert theirs.read_text() == '{"mine": true}\n'
    assert [n for n in os.listdir(tmp_path) if not n.startswith("cli.db")] == ["settings.json"]
    # not JSON at all: the same
    (tmp_path / "notes.json").write_text("remember the milk")
    p = cli("snapshot", run.id, "--to", str(tmp_path / "notes.json"), "--repeats", "0", "-q", *SPEC)
    assert p.returncode == 2 and "--force" in one_error_line(p)
    assert (tmp_path / "notes.json").read_text() == "remember the milk"
    # --force writes it; a snapshot Rewind wrote is then rewritten without --force
    p = cli("snapshot", run.id, "--to", str(theirs), "--repeats", "0", "-q", *SPEC, "--force")
    assert p.returncode == 0, p.stderr
    assert snapshot_format.load(theirs)["run"]["id"] == run.id
    p = cli("snapshot", run.id, "--to", str(theirs), "--repeats", "0", "-q", *SPEC)
    assert p.returncode == 0, p.stderr
    # an empty file holds nothing to lose
    (tmp_path / "empty.json").write_text("")
    assert cli("snapshot", run.id, "--to", str(tmp_path / "empty.json"), "--repeats", "0",
               "-q", *SPEC).returncode == 0


def test_snapshot_api_refuses_to_overwrite_and_takes_force(linear_runs, tmp_path):
    cli, run, _ = linear_runs
    theirs = tmp_path / "data.json"
    theirs.write_text("[1, 2, 3]")
    with Rewind(str(cli.db)) as rw:
        with pytest.raises(InvalidRequest, match="force"):
            rewind.testing.snapshot(rw, run.id, theirs, repeats=0, pipeline_spec="shapes:linear")
        assert theirs.read_text() == "[1, 2, 3]"
        rewind.testing.snapshot(rw, run.id, theirs, repeats=0, pipeline_spec="shapes:linear", force=True)
    assert snapshot_format.is_snapshot_file(theirs)


def test_export_burr_over_an_app_rewind_did_not_write_needs_force(linear_runs, tmp_path):
    cli, run, fork = linear_runs
    out = tmp_path / "burr"
    theirs = out / "rewind" / run.id
    theirs.mkdir(parents=True)
    (theirs / "log.jsonl").write_text('{"type": "begin_entry", "mine": true}\n')
    (theirs / "graph.json").write_text('{"theirs": 1}')
    p = cli("export-burr", fork.id, "--dir", str(out))
    assert p.returncode == 2
    err = one_error_line(p)
    assert str(theirs) in err and "--force" in err and "overwrite" in err, err
    assert (theirs / "log.jsonl").read_text() == '{"type": "begin_entry", "mine": true}\n'
    assert (theirs / "graph.json").read_text() == '{"theirs": 1}'
    assert sorted(os.listdir(out / "rewind")) == [run.id]  # the fork was not written either
    p = cli("export-burr", fork.id, "--dir", str(out), "--force")
    assert p.returncode == 0, p.stderr
    assert "rewind.run_id" in (theirs / "log.jsonl").read_text()
    # what export-burr wrote, it rewrites without --force
    p = cli("export-burr", fork.id, "--dir", str(out))
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(out / "rewind")) == sorted([run.id, fork.id])


def test_export_burr_into_a_fresh_or_its_own_folder_needs_no_force(linear_runs, tmp_path):
    cli, run, fork = linear_runs
    out = tmp_path / "burr"
    # --no-lineage lists the fork under its parent: a folder holding only children.jsonl
    assert cli("export-burr", fork.id, "--dir", str(out), "--no-lineage").returncode == 0
    assert os.listdir(out / "rewind" / run.id) == ["children.jsonl"]
    assert cli("export-burr", fork.id, "--dir", str(out)).returncode == 0
    assert cli("export-burr", fork.id, "--dir", str(out)).returncode == 0
    children = (out / "rewind" / run.id / "children.jsonl").read_text().splitlines()
    assert len(children) == 1  # listed once, however often exported
