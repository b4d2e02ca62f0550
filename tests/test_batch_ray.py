"""The Ray executor on a local Ray (`pip install ray`; `ray.init` with 2 CPUs, no dashboard)
gives the same table as the local process pool, on stores that start alike: the pool on SQLite,
Ray on PostgreSQL (the store a cluster's tasks reach by URL). One Ray start: it costs seconds."""

from __future__ import annotations

import pytest

import rewind
from rewind.batch import batch_fork

from test_batch import check_first_batch, make_runs, table_by_n


def test_ray_executor_gives_the_local_pools_table(tmp_path, pg_url):
    import ray

    tables = {}
    for executor in ("local", "ray"):
        url = str(tmp_path / f"{executor}.db") if executor == "local" else pg_url
        rw = rewind.Rewind(url)
        by_id = make_runs(rw)
        report = batch_fork(rw, "judge", pipeline="batch-test", params={"threshold": 20},
                            executor=executor, workers=2)
        check_first_batch(report, by_id)
        assert report.executor == executor and report.workers == 2
        tables[executor] = table_by_n(report, by_id)
        if executor == "ray":  # the batch started Ray, so it shut it down
            assert not ray.is_initialized()
            assert all(r.worker and r.worker_rss_kb for r in report.rows)
        rw.close()
    assert tables["ray"] == tables["local"]


def test_a_path_is_refused_as_a_ray_address_before_ray_starts(tmp_path):
    import ray

    rw = rewind.Rewind(str(tmp_path / "rewind.db"))
    make_runs(rw)
    with pytest.raises(rewind.InvalidRequest, match="looks like a path"):
        batch_fork(rw, "judge", pipeline="batch-test", executor="ray", address=str(tmp_path))
    assert rw.count_runs() == 30 and not ray.is_initialized()
    rw.close()
