"""Hostile files and full disks (issue 38), part two: what Rewind reads, and bad input that was
an internal error.

Seen: `import-burr` read without a limit (a `log.jsonl` linked to `/dev/zero` grew the process to
5 GB in 20 s); `rewind import` of a FIFO never returned. JSON nested too deep in a snapshot's
`initial_state` or in a Burr tracker's `result`, NaN in a snapshot, and an export whose lineage
is 3,000 runs deep were internal errors (exit 1); a snapshot whose `pipeline.spec` is not a
string printed the literal text `{pipeline['spec']!r}`.

Now every reader of a user's file (rewind.paths.read_bytes: import, import-burr's three files,
snapshot files, `--state @file`, `--initial-state @file`) refuses what is not a regular file and
what is over its size limit, in one line, exit 2. Commands that used to hang or eat memory run in
a subprocess with a timeout, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from test_integrations_burr_import import record_with_burr
from test_maintenance import PIPELINE, snapshot

import rewind
from rewind import InvalidRequest, Rewind, paths
from rewind.testing import SnapshotError, load, replay

ESSAYS = "test_integrations_burr_import:essays_pipeline"


def rewind_cli(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    """`python -m rewind ARGV` in a subprocess that may take at most a minute."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REWIND_"))}
    return subprocess.run([sys.executable, "-m", "rewind", *argv], capture_output=True, text=True,
                          timeout=60, env=env, cwd=cwd)


def one_line(p: subprocess.CompletedProcess) -> str:
    err = p.stderr.strip()
    assert err.startswith("rewind: error: ") and len(err.splitlines()) == 1, p.stderr
    assert "Traceback" not in err and "internal error" not in err, err
    return err


def runs_in(db) -> int:
    if not os.path.exists(db):
        return 0
    with Rewind(str(db)) as rw:
        return rw.count_runs()


def _not_a_file(kind: str, path) -> None:
    """Put a FIFO, a link to /dev/zero or a directory at `path`."""
    if os.path.lexists(path):
        os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        os.symlink("/dev/zero", path)
    else:
        os.mkdir(path)


NOT_FILES = [("fifo", "FIFO"), ("zero", "character device"), ("dir", "directory")]


# --- finding 2: readers without a limit --------------------------------------------------------

@pytest.mark.parametrize("name", ["log.jsonl", "graph.json", "metadata.json"])
@pytest.mark.parametrize("kind, words", NOT_FILES, ids=[k for k, _ in NOT_FILES])
def test_import_burr_refuses_a_tracker_file_that_is_not_a_regular_file(tmp_path, name, kind, words):
    storage = str(tmp_path / "burr")
    app_id = record_with_burr(storage, "essays", "bees")
    _not_a_file(kind, os.path.join(storage, "essays", app_id, name))
    db = tmp_path / "r.db"
    started = time.monotonic()
    p = rewind_cli("--db", str(db), "import-burr", f"{storage}/essays", "--pipeline", ESSAYS)
    assert p.returncode == 2, p.stderr
    err = one_line(p)
    assert name in err and words in err and "not a regular file" in err, err
    assert time.monotonic() - started < 30 and runs_in(db) == 0


def test_import_burr_refuses_a_log_over_the_size_limit_before_reading_it(tmp_path):
    storage = str(tmp_path / "burr")
    app_id = record_with_burr(storage, "essays", "bees")
    log = os.path.join(storage, "essays", app_id, "log.jsonl")
    with open(log, "r+b") as f:  # sparse: no disk used, yet 300 MB to read
        f.truncate(300 * 2**20)
    db = tmp_path / "r.db"
    p = rewind_cli("--db", str(db), "import-burr", f"{storage}/essays", "--pipeline", ESSAYS)
    assert p.returncode == 2, p.stderr
    err = one_line(p)
    assert "log.jsonl" in err and "over 256 MB" in err, err
    assert runs_in(db) == 0


@pytest.mark.parametrize("kind, words", NOT_FILES, ids=[k for k, _ in NOT_FILES])
def test_import_and_at_file_flags_refuse_what_is_not_a_regular_file(tmp_path, kind, words):
    hostile = tmp_path / "in.json"
    _not_a_file(kind, hostile)
    db = tmp_path / "r.db"
    storage = str(tmp_path / "burr")
    record_with_burr(storage, "essays", "bees")
    for argv, field in [
        (["import", str(hostile)], "import"),
        (["run", "--pipeline", "research", "--state", f"@{hostile}"], "--state"),
        (["import-burr", f"{storage}/essays", "--pipeline", ESSAYS,
          "--initial-state", f"@{hostile}"], "--initial-state"),
    ]:
        p = rewind_cli("--db", str(db), *argv)
        assert p.returncode == 2, (argv, p.stderr)
        err = one_line(p)
        assert field in err and words in err and "not a regular file" in err, err
    assert runs_in(db) == 0


def test_snapshot_files_that_are_not_regular_files_are_refused_and_never_collected(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    for target, words in ((fifo, "FIFO"), (tmp_path / "zero.json", "character device")):
        p = rewind_cli("replay", str(target))
        assert p.returncode == 2, p.stderr
        err = one_line(p)
        assert str(target) in err and words in err, err
    # pytest's collection asks is_snapshot_file of every .json file: it must not block on a FIFO
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from rewind.testing.format import is_snapshot_file; "
         "print([is_snapshot_file(p) for p in sys.argv[1:]])", str(fifo), str(tmp_path / "zero.json")],
        capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == "[False, False]", probe.stderr


def test_read_bytes_is_the_one_reader_and_keeps_to_its_limit(tmp_path):
    f = tmp_path / "x.txt"
    f.write_bytes(b"0123456789")
    assert paths.read_bytes(str(f), "x") == b"0123456789"
    with pytest.raises(InvalidRequest, match=r"^x: the file is over"):
        paths.read_bytes(str(f), "x", limit=9)
    with pytest.raises(InvalidRequest, match="cannot read"):
        paths.read_bytes(str(tmp_path / "absent"), "x")


# --- finding 6: bad input that was an internal error -------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A snapshot of a demo run: (its folder, its document)."""
    tmp = tmp_path_factory.mktemp("snap")
    from rewind.pipelines.research import pipeline

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REWIND_OUTBOX", str(tmp / "outbox"))
        with Rewind(str(tmp / "runs.db")) as rw:
            run = rw.run(pipeline, dict(pipeline.sample_state))
            rewind.testing.snapshot(rw, run.id, tmp / "good.json", repeats=0)
    return tmp, json.loads((tmp / "good.json").read_text())


def _deep(n: int) -> str:
    return '{"a": ' * n + "1" + "}" * n


@pytest.mark.parametrize("where, text", [
    ("nested too deeply", lambda doc: json.dumps({**doc, "initial_state": {"question": "DEEP"}})
     .replace('"DEEP"', _deep(5000))),
    ("initial_state", lambda doc: json.dumps({**doc, "initial_state": {"question": "DEEP"}})
     .replace('"DEEP"', _deep(400))),
    ("NaN", lambda doc: json.dumps({**doc, "initial_state": {"question": float("nan")}})),
    ("Infinity", lambda doc: json.dumps({**doc, "initial_state": {"question": float("inf")}})),
    ("[1, 2]", lambda doc: json.dumps({**doc, "pipeline": {**doc["pipeline"], "spec": [1, 2]}})),
], ids=["deep 5000", "deep 400", "nan", "infinity", "spec a list"])
def test_a_hostile_snapshot_is_one_line_exit_2(recorded, tmp_path, where, text):
    folder, doc = recorded
    target = tmp_path / "hostile.json"
    target.write_text(text(doc))
    p = rewind_cli("replay", str(target))
    assert p.returncode == 2, p.stderr + p.stdout
    err = one_line(p)
    assert str(target) in err and where in err and "{pipeline" not in err, err
    with pytest.raises(SnapshotError):
        load(target)


def test_a_hostile_snapshot_document_given_as_a_dict_is_refused(recorded):
    _, doc = recorded
    deep: dict = {}
    cur = deep
    for _ in range(400):
        cur["a"] = {}
        cur = cur["a"]
    for bad in ({**doc, "initial_state": {"question": float("nan")}},
                {**doc, "initial_state": {"question": deep}}):
        with pytest.raises(SnapshotError, match="initial_state"):
            replay(bad)


@pytest.mark.parametrize("depth", [400, 5000])
def test_a_burr_result_nested_too_deep_is_one_line_exit_2(tmp_path, depth):
    storage = str(tmp_path / "burr")
    app_id = record_with_burr(storage, "essays", "bees")
    log = os.path.join(storage, "essays", app_id, "log.jsonl")
    with open(log, encoding="utf-8") as f:
        lines = f.read().splitlines()
    at = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "end_entry")
    entry = json.loads(lines[at])
    entry["result"] = {"outline": "DEEP"}
    lines[at] = json.dumps(entry).replace('"DEEP"', _deep(depth))
    with open(log, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    db = tmp_path / "r.db"
    p = rewind_cli("--db", str(db), "import-burr", f"{storage}/essays", "--pipeline", ESSAYS)
    assert p.returncode == 2, p.stderr
    err = one_line(p)
    assert f"log.jsonl line {at + 1}" in err and "nested" in err, err
    assert runs_in(db) == 0


def _deep_lineage(n: int) -> dict:
    now = time.time()
    runs = [{"id": f"r{i:05d}", "pipeline": "maint", "status": "completed", "created_at": now,
             "parent_id": f"r{i - 1:05d}" if i else None, "fork_index": 0} for i in range(n)]
    return {"format": "rewind-run-export", "version": 1, "run_id": runs[-1]["id"], "runs": runs}


def test_an_export_whose_lineage_is_3000_runs_deep_imports_or_is_refused_in_one_line(db_url):
    rw = Rewind(db_url, pipelines=[PIPELINE])
    before = snapshot(rw.store)
    with pytest.raises(InvalidRequest) as e:
        rw.import_run(_deep_lineage(3000))
    assert "3000" in str(e.value) and "lineage" in str(e.value) and len(str(e.value).splitlines()) == 1
    assert snapshot(rw.store) == before
    rw.close()
