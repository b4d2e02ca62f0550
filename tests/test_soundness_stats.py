"""What a node learns from a file's existence, type or size (`os.path.exists`, `isfile`,
`isdir`, `getsize`, `Path.exists`, `Path.is_file`, `os.stat`) is part of its key, re-checked
before a hit like a file it reads: a flag file that appears re-runs the node that checked it.
A folder a node only checks (`os.makedirs(..., exist_ok=True)`) is keyed by being a folder, not
by what is in it, so writing an artifact into it does not make the next run miss."""

from __future__ import annotations

import os
import pathlib

import pytest
from burr.core.graph import GraphBuilder

from rewind import Pipeline, Rewind, action
from rewind.keys import filewatch


@action(reads=["q"], writes=["flag"])
def exists_check(state):
    return state.update(flag="on" if os.path.exists("flag.txt") else "off")


@action(reads=["q"], writes=["size"])
def size_check(state):
    return state.update(size=os.path.getsize("data.bin") if os.path.isfile("data.bin") else -1)


@action(reads=["q"], writes=["kind"])
def kind_check(state):
    p = pathlib.Path("thing")
    return state.update(kind="dir" if p.is_dir() else "file" if p.is_file() else
                        "none" if not p.exists() else "other")


@action(reads=["q"], writes=["mode"])
def stat_check(state):
    try:
        return state.update(mode=os.stat("mode.cfg").st_size)
    except FileNotFoundError:
        return state.update(mode=0)


REPORTS: list = []


@action(reads=["q"], writes=["saved"])
def save_artifact(state):
    os.makedirs("out", exist_ok=True)
    REPORTS.append(state["q"])
    name = f"out/report-{len(REPORTS)}-{os.getpid()}.md"
    with open(name, "w") as f:
        f.write(state["q"])
    return state.update(saved=state["q"].upper())


NODES = ["exists_check", "size_check", "kind_check", "stat_check", "save_artifact"]


def _pipeline():
    graph = (GraphBuilder()
             .with_actions(exists_check=exists_check, size_check=size_check, kind_check=kind_check,
                           stat_check=stat_check, save_artifact=save_artifact)
             .with_transitions(*zip(NODES, NODES[1:]))
             .build())
    return Pipeline(name="stats", graph=graph, entrypoint="exists_check")


def _statuses(run):
    return {s.node: str(s.status) for s in run.steps}


def test_existence_type_and_size_checks_are_keyed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.bin").write_bytes(b"12345")
    pipeline = _pipeline()
    with Rewind(str(tmp_path / "r.db")) as rw:
        first = rw.run(pipeline, {"q": "x"})
        assert first.status == "completed", first.error
        assert _statuses(first) == {n: "executed" for n in NODES}
        assert first.steps[0].outputs["flag"] == "off"
        again = rw.run(pipeline, {"q": "x"})
        assert _statuses(again) == {n: "cached" for n in NODES}

        (tmp_path / "flag.txt").write_text("")          # appears
        (tmp_path / "data.bin").write_bytes(b"1234567")  # grows
        (tmp_path / "thing").mkdir()                     # none -> dir
        (tmp_path / "mode.cfg").write_text("abc")        # appears
        changed = rw.run(pipeline, {"q": "x"})
        assert _statuses(changed) == {**{n: "executed" for n in NODES[:4]}, "save_artifact": "cached"}
        got = {k: v for s in changed.steps for k, v in s.outputs.items()}
        assert (got["flag"], got["size"], got["kind"], got["mode"]) == ("on", 7, "dir", 3)
        assert "flag.txt" in changed.steps[0].reason, changed.steps[0].reason

        fork = rw.fork(first.id, at="exists_check")  # a fork re-checks them as well
        assert _statuses(fork)["exists_check"] == "cached"  # the new entry, made by `changed`
        assert fork.steps[0].outputs["flag"] == "on"
        (tmp_path / "thing").rmdir()
        (tmp_path / "thing").write_text("now a file")    # dir -> file
        assert rw.fork(first.id, at="exists_check").step("kind_check").outputs["kind"] == "file"


def test_a_folder_a_node_writes_into_is_keyed_as_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    pipeline = _pipeline()
    with Rewind(str(tmp_path / "r.db")) as rw:
        rw.run(pipeline, {"q": "y"})
        for _ in range(2):  # each run wrote a new artifact into out/: still a hit
            run = rw.run(pipeline, {"q": "y"})
            assert _statuses(run)["save_artifact"] == "cached", run.steps[-1].reason


def test_track_reads_records_a_stat_and_a_listing_after_it(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f.txt").write_text("f")
    with filewatch.track_reads(str(tmp_path)) as reads:
        assert os.path.isdir(tmp_path / "d") and os.path.exists(tmp_path / "f.txt")
        assert not os.path.exists(tmp_path / "gone")
        os.path.realpath(tmp_path / "f.txt")  # Rewind's own path work records nothing more
    assert set(reads.files) == {"d", "f.txt", "gone"}
    assert reads.files["gone"] == filewatch.MISSING
    assert filewatch.changed(reads.files, str(tmp_path)) == []
    (tmp_path / "d" / "new").write_text("")  # a folder only checked: its contents do not count
    assert filewatch.changed(reads.files, str(tmp_path)) == []
    with filewatch.track_reads(str(tmp_path)) as listed:
        os.path.isdir(tmp_path / "d")
        os.listdir(tmp_path / "d")  # listed after the check: now its names count
    (tmp_path / "d" / "newer").write_text("")
    assert filewatch.changed(listed.files, str(tmp_path)) == ["d"]


def test_a_file_checked_then_read_is_keyed_by_its_bytes(tmp_path):
    (tmp_path / "f.txt").write_text("f")
    with filewatch.track_reads(str(tmp_path)) as checked:
        os.path.getsize(tmp_path / "f.txt")
    with filewatch.track_reads(str(tmp_path)) as read:
        if os.path.exists(tmp_path / "f.txt"):
            (tmp_path / "f.txt").read_text()
    (tmp_path / "f.txt").write_text("g")  # the same size, other bytes
    assert filewatch.changed(checked.files, str(tmp_path)) == []  # a size check saw no change
    assert filewatch.changed(read.files, str(tmp_path)) == ["f.txt"]
    (tmp_path / "f.txt").write_text("longer")
    assert filewatch.changed(checked.files, str(tmp_path)) == ["f.txt"]


def test_the_recording_functions_support_what_os_says_the_originals_do():
    """shutil.rmtree picks its symlink-attack-safe way by asking whether `os.stat`, `os.open`
    and `os.scandir` are in `os.supports_*`: the recording ones must be, as the originals are."""
    import shutil

    assert os.stat is not filewatch._ORIG_STAT  # the recording one is installed
    for orig, now in ((filewatch._ORIG_STAT, os.stat), (filewatch._ORIG_OS_OPEN, os.open),
                      (filewatch._ORIG_SCANDIR, os.scandir)):
        for supports in (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks):
            assert (orig in supports) == (now in supports)
    assert {os.open, os.stat} <= os.supports_dir_fd and os.scandir in os.supports_fd
    assert shutil.rmtree.avoids_symlink_attacks
