"""The pytest plugin: snapshot files are tests, replayed offline against today's code.

Registered through the `pytest11` entry point `rewind` (or `-p rewind.testing.plugin`):

    pytest tests/rewind                        # every *.json that is a Rewind snapshot
    pytest tests/rewind --rewind-record=new    # record calls the snapshot lacks, rewrite it
    pytest tests/rewind --rewind-record=all    # re-record every call through the model

Each snapshot file is collected as one test item, `FILE::replay`; it fails with the replay's
report (first divergence, why it re-ran, the output diff, the model calls that changed). In a
record mode a replay that ran without error rewrites its file and passes; the rewritten files
are listed at the end of the session. The `rewind_replay` fixture replays a snapshot for a test
that wants to assert on the replayed run itself:

    def test_report_cites_sources(rewind_replay):
        result = rewind_replay("tests/rewind/research.json").check()
        assert result.outputs("verify")["verification"]["valid"]

A nondeterministic node is judged by the noise band its snapshot recorded, or by a metric
given per node: `rewind_replay(path, metrics={"draft": fn})`, or for collected snapshots a
`pytest_rewind_metric(node, path)` hook in a conftest.py returning `fn(recorded, replayed) ->
bool | float` (a float is compared with the scores of the recorded samples).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest

from .cassette import NONE, RECORD_MODES
from .format import SnapshotError, is_snapshot_file
from .replay import ReplayResult, replay, write_rerecorded
from .report import summary

_REWRITTEN = pytest.StashKey[list]()


class RewindHooks:
    @pytest.hookspec(firstresult=True)
    def pytest_rewind_metric(self, node: str, path: str) -> Optional[Any]:
        """A metric `fn(recorded_outputs, replayed_outputs) -> bool | float` for `node` of the
        snapshot at `path`, or None for the noise band."""


def pytest_addhooks(pluginmanager: Any) -> None:
    pluginmanager.add_hookspecs(RewindHooks)


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("rewind", "Rewind snapshot replay")
    group.addoption(
        "--rewind-record", dest="rewind_record", default=None, choices=RECORD_MODES,
        help="none (default): a model or tool call the snapshot lacks fails; new: record it "
             "through the configured model and rewrite the snapshot; all: re-record every call")
    parser.addini("rewind_record", "default for --rewind-record", default=NONE)


def record_mode(config: Any) -> str:
    mode = config.getoption("rewind_record") or config.getini("rewind_record") or NONE
    if mode not in RECORD_MODES:
        raise pytest.UsageError(f"rewind_record = {mode!r}: use one of {', '.join(RECORD_MODES)}")
    return mode


def pytest_configure(config: Any) -> None:
    config.stash[_REWRITTEN] = []


def pytest_collect_file(file_path: Path, parent: Any) -> Optional["SnapshotFile"]:
    if is_snapshot_file(file_path):
        return SnapshotFile.from_parent(parent, path=file_path)
    return None


def _metric_for(config: Any, path: str):
    def lookup(node: str):
        return config.hook.pytest_rewind_metric(node=node, path=path)

    return lookup


def run_replay(config: Any, path: Any, *, record: Optional[str] = None,
               metrics: Optional[dict] = None, **kwargs: Any) -> ReplayResult:
    """Replay a snapshot as the plugin does, rewriting it in a record mode."""
    mode = record or record_mode(config)
    result = replay(path, record=mode, metrics=metrics,
                    metric_for=_metric_for(config, str(path)), **kwargs)
    if mode != NONE and result.ok:
        written = write_rerecorded(result)
        if written is not None:
            config.stash[_REWRITTEN].append(summary(result, written))
    return result


class SnapshotMismatch(AssertionError):
    def __init__(self, result: ReplayResult):
        super().__init__(result.report())
        self.result = result


class SnapshotFile(pytest.File):
    def collect(self):
        yield SnapshotItem.from_parent(self, name="replay")


class SnapshotItem(pytest.Item):
    def runtest(self) -> None:
        result = run_replay(self.config, self.path)
        if not result.ok:
            raise SnapshotMismatch(result)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, SnapshotMismatch):
            return excinfo.value.result.report()
        if isinstance(excinfo.value, SnapshotError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple:
        return self.path, 0, f"rewind snapshot {self.path.name}"


@pytest.fixture
def rewind_replay(request: Any):
    """`rewind_replay(path, *, record=None, metrics=None) -> ReplayResult`: replay a snapshot
    (a path relative to the rootdir or to the test file) against the current code."""

    def run(path: Any, *, record: Optional[str] = None, metrics: Optional[dict] = None,
            **kwargs: Any) -> ReplayResult:
        target = Path(path)
        if not target.is_absolute():
            candidates = [request.config.rootpath / target, Path(request.node.path).parent / target]
            target = next((c for c in candidates if c.exists()), candidates[0])
        return run_replay(request.config, target, record=record, metrics=metrics, **kwargs)

    return run


def pytest_terminal_summary(terminalreporter: Any, exitstatus: Any, config: Any) -> None:
    lines = config.stash.get(_REWRITTEN, [])
    if lines:
        terminalreporter.section("rewind snapshots rewritten")
        for line in lines:
            terminalreporter.write_line(line)
