"""Snapshot files as a stranger hand-edits them, and the paths `rewind snapshot` is given.

Seen: a step's `"occurrence": "two"`, `"outputs": "zzz"` or a `"pipeline": {"spec": 7}` made
`rewind replay` an "internal error"; a step whose recorded outputs no longer hashed to its
`output_hash` replayed clean (its outputs were served as recorded); the printed
`pytest FILE -p rewind.testing.plugin` crashed where the plugin is installed (loaded twice);
a snapshot written to `regression.txt` was never collected by pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rewind import InvalidRequest
from rewind.testing import SnapshotError, load, replay, snapshot
from test_snapshot_replay import _cli, forget, project, record  # noqa: F401  (the fixture)

pytest_plugins = ["pytester"]


@pytest.fixture
def recorded(project):  # noqa: F811
    rw, run = record(project, "kinds", {"topic": "tides"})
    target = project.path / "tests" / "rewind" / "kinds.json"
    with rw:
        snapshot(rw, run.id, target, repeats=0, pipeline_spec="kinds:pipeline")
    forget()
    return project, target


def _edit(target, change) -> None:
    doc = json.loads(target.read_text())
    change(doc)
    target.write_text(json.dumps(doc))


@pytest.mark.parametrize("change, words", [
    (lambda d: d["steps"][1].update(occurrence="two"), r"step 2 \('label'\): \"occurrence\" must be a whole number"),
    (lambda d: d["steps"][1].update(occurrence=0), r"\"occurrence\" must be a whole number from 1"),
    (lambda d: d["steps"][0].update(outputs="zzz"), r"step 1 \('shape'\): \"outputs\" must be an object"),
    (lambda d: d["steps"][0].update(deleted={"a": 1}), r"\"deleted\" must be a list"),
    (lambda d: d["steps"][0].update(input_hash=5), r"\"input_hash\" must be a string"),
    (lambda d: d["pipeline"].update(spec=7), r"\"spec\" must be a string"),
], ids=["occurrence text", "occurrence 0", "outputs text", "deleted object", "hash number", "spec number"])
def test_a_hand_edited_field_of_the_wrong_type_is_named(recorded, change, words):
    project, target = recorded
    _edit(target, change)
    with pytest.raises(SnapshotError, match=words):
        load(target)
    code = subprocess.run([sys.executable, "-m", "rewind", "replay", str(target)],
                          capture_output=True, text=True, timeout=120, cwd=str(project.path))
    assert code.returncode == 2, code.stderr
    assert "internal error" not in code.stderr and str(target) in code.stderr, code.stderr


def test_recorded_outputs_that_no_longer_match_their_hash_are_not_served(recorded):
    project, target = recorded
    assert replay(target).ok
    forget()
    _edit(target, lambda d: d["steps"][0].update(output_hash="0" * 64))
    result = replay(target)
    assert not result.ok
    first = result.first_divergence
    assert first.node == "shape" and "inconsistent" in first.detail and "re-record" in first.detail
    forget()
    _edit(target, lambda d: d["steps"][0].update(output_hash=load(target)["steps"][0]["output_hash"]))
    # the other way round: outputs edited, hash kept
    doc = json.loads(target.read_text())
    original = json.loads(target.read_text())
    doc["steps"][0]["outputs"]["text"] = "edited by hand"
    target.write_text(json.dumps(doc))
    result = replay(target)
    assert not result.ok and result.first_divergence.node == "shape", \
        "an edited output was served and blamed on the next node"
    target.write_text(json.dumps(original))


def test_the_printed_pytest_command_replays_the_snapshot(project):  # noqa: F811
    rw, run = record(project, "kinds", {"topic": "tides"})
    rw.close()
    target = project.path / "tests" / "rewind" / "kinds.json"
    code, out = _cli(["--db", str(project.path / "runs.db"), "snapshot", run.id, "--to", str(target),
                      "--repeats", "0", "-q", "--pipeline", "kinds:pipeline"])
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("replay it: pytest "))
    command = line[len("replay it: "):].split("   (or")[0].split()
    done = subprocess.run([sys.executable, "-m", *command, "-q", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, timeout=300, cwd=str(project.path))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


@pytest.mark.parametrize("name", ["regression.txt", "snap", "kinds.JSON"])
def test_a_snapshot_path_pytest_would_never_collect_is_refused(project, name):  # noqa: F811
    rw, run = record(project, "kinds", {"topic": "tides"})
    with rw:
        with pytest.raises(InvalidRequest, match="does not end in .json"):
            snapshot(rw, run.id, project.path / name, repeats=0, pipeline_spec="kinds:pipeline")
        with pytest.raises(InvalidRequest, match="is empty"):
            snapshot(rw, run.id, "", repeats=0, pipeline_spec="kinds:pipeline")
    assert not (project.path / name).exists()
