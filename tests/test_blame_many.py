"""Issue 39: blame across many failed runs on the batch executors: a pool of worker processes
(each opening its own handle and importing the pipeline by its spec) and Ray, with the same
verdicts as in this process; an outcome that cannot reach a worker is refused by name."""

from __future__ import annotations

import pytest

import rewind
from bench import blame_shapes as shapes
from rewind.analysis.blame import field_outcome
from rewind.errors import InvalidRequest


@pytest.fixture
def failed_runs(store_url):
    shapes.reseed(0)
    with rewind.Rewind(store_url) as rw:
        ids = [shapes.failed_run(rw, shapes.PIPELINE).id for _ in range(2)]
        ids.append(shapes.failed_run(rw, shapes.PIPELINE, doomed=True).id)
    return store_url, ids


def test_a_process_pool_blames_each_run(failed_runs):
    url, ids = failed_runs
    with rewind.Rewind(url, pipelines=[shapes.PIPELINE]) as rw:
        table = rw.blame_many(ids, field_outcome("ok", True), samples=16, strategy="each", workers=2)
    assert table["decisive"] == {"s2": 2} and table["none"] == 1
    assert all(isinstance(r, rewind.BlameReport) for r in table["reports"].values())


def test_ray_blames_each_run(failed_runs):
    url, ids = failed_runs
    with rewind.Rewind(url, pipelines=[shapes.PIPELINE]) as rw:
        table = rw.blame_many(ids[:1] + ids[2:], field_outcome("ok", True), samples=16,
                              strategy="each", executor="ray", workers=2)
    assert table["decisive"] == {"s2": 1} and table["none"] == 1


def test_an_outcome_that_cannot_reach_a_worker_is_refused(failed_runs):
    url, ids = failed_runs
    with rewind.Rewind(url, pipelines=[shapes.PIPELINE]) as rw, pytest.raises(InvalidRequest, match="module-level function"):
        rw.blame_many(ids, lambda s: s["ok"] is True, workers=2)
    with rewind.Rewind(url, pipelines=[shapes.PIPELINE]) as rw, pytest.raises(InvalidRequest, match="executor"):
        rw.blame_many(ids, field_outcome("ok", True), executor="threads")
