"""Large values in an object store (issue 42): what a fork costs the database, with and without.

    python bench/objects.py [--steps 4] [--mb 5]

A pipeline writes a new `--mb` MB value at each of `--steps` steps. For each way of storing
(inline: every byte in SQLite; file://: a local folder; s3://: moto's S3 server on loopback,
when moto is installed) it measures:

- database bytes added by a no-edit fork at the first step (bytes used in SQLite's pages,
  from its `dbstat` table), its time and its peak Python memory (tracemalloc);
- database bytes added by a fork that re-runs the last step with a new value, split in two: the
  value's share (that fork's bytes less those of the same fork of a pipeline whose values are
  10 bytes: what the size of the value costs the database, the goal's "the bytes go to the
  store") and the step's own record (that fork's bytes less a no-edit fork's at the same step:
  its document, its cache entry and the run's new map of field hashes, the same whatever the
  value's size);
- object-store reads made by the run list, the run (its trajectory) and a fork plan, from a
  fresh handle (so nothing is in memory).

Prints each figure beside its goal; exit status 0 unless the bench itself crashes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path[:2]:
    sys.path.insert(0, ROOT)

from burr.core.graph import GraphBuilder  # noqa: E402

from rewind import Pipeline, Rewind, action  # noqa: E402
from rewind.store.objects import open_objects  # noqa: E402


def pipeline(steps: int, mb: float) -> Pipeline:
    size = int(mb * 1024 * 1024)
    actions = {}
    for i in range(steps):
        reads = ["seed"] if i == 0 else [f"v{i - 1}"]

        def make(i=i, reads=reads):
            @action(reads=reads, writes=[f"v{i}"])
            def step(state, salt: str = ""):
                head = f"{i}:{salt}:{str(state[reads[0]])[:32]}|"
                return state.update(**{f"v{i}": (head * (size // len(head) + 1))[:size]})
            return step
        actions[f"s{i}"] = make()
    graph = GraphBuilder().with_actions(**actions).with_transitions(
        *[(f"s{i}", f"s{i + 1}") for i in range(steps - 1)]).build()
    return Pipeline("big_values", graph, entrypoint="s0")


def used_bytes(rw) -> int:
    return int(rw.store.query("SELECT SUM(pgsize - unused) FROM dbstat")[0][0])


def rerun_costs(rw, run_id: str, steps: int) -> tuple:
    """(database bytes added by a fork re-running the last step with a new value, of which the
    step's own record: less what a no-edit fork at the same step adds)."""
    last = f"s{steps - 1}"
    before = used_bytes(rw)
    same = rw.fork(run_id, at=last)
    assert same.status == "completed" and same.step(last).status == "cached", same.error
    middle = used_bytes(rw)
    rerun = rw.fork(run_id, at=last, params={"salt": "new"})
    assert rerun.status == "completed" and rerun.step(last).status == "executed", rerun.error
    after = used_bytes(rw)
    return after - middle, (after - middle) - (middle - before)


def measure(kind: str, blobs, steps: int, mb: float, folder: str) -> dict:
    p = pipeline(steps, mb)
    db = os.path.join(folder, f"{kind}.db")
    rw = Rewind(db, pipelines=[p], blobs=blobs)
    run = rw.run(p, {"seed": "bench"})
    assert run.status == "completed", run.error
    rw.close()
    rw = Rewind(db, pipelines=[p], blobs=blobs)  # nothing in memory: what a new process pays
    before = used_bytes(rw)
    tracemalloc.start()
    t0 = time.perf_counter()
    fork = rw.fork(run.id, at="s0")
    fork_s = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert fork.status == "completed", fork.error
    fork_bytes = used_bytes(rw) - before
    rerun_bytes, record_bytes = rerun_costs(rw, run.id, steps)
    rw.close()
    tiny = pipeline(steps, 10 / 2**20)
    small_db = os.path.join(folder, f"{kind}-tiny.db")
    small = Rewind(small_db, pipelines=[tiny], blobs=blobs)
    small_run = small.run(tiny, {"seed": "bench"})
    tiny_rerun = rerun_costs(small, small_run.id, steps)[0]
    small.close()
    reads = None
    if blobs:
        objs = open_objects(blobs)
        fresh = Rewind(db, pipelines=[p], blobs=blobs)
        start = objs.reads
        fresh.list_runs()
        fresh.get_run(run.id)
        fresh.plan_fork(run.id, at=f"s{steps - 1}", params={"salt": "other"})
        reads = objs.reads - start
        fresh.close()
    return {"fork_bytes": fork_bytes, "fork_s": fork_s, "peak_mb": peak / 2**20,
            "rerun_bytes": rerun_bytes, "value_bytes": rerun_bytes - tiny_rerun,
            "record_bytes": record_bytes, "reads": reads, "db_mb": os.path.getsize(db) / 2**20}


@contextlib.contextmanager
def moto_s3():
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError:
        yield None
        return
    for k, v in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench"),
                 ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(k, v)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
    try:
        yield f"s3://bench/rewind?endpoint={endpoint}"
    finally:
        server.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4, help="steps, each writing a new value")
    ap.add_argument("--mb", type=float, default=5.0, help="size of each value in MB")
    args = ap.parse_args(argv)
    os.environ.pop("REWIND_BLOBS", None)
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as folder, moto_s3() as s3:
        modes = [("inline", None), ("file", f"file://{folder}/objects")]
        if s3:
            modes.append(("s3", s3))
        results = {kind: measure(kind, url, args.steps, args.mb, folder) for kind, url in modes}
    print(f"bench/objects.py: {args.steps} steps, a new {args.mb:g} MB value each (SQLite)\n")
    print(f"{'store':8} {'no-edit fork: DB bytes':>23} {'time':>8} {'peak mem':>9} "
          f"{'re-run fork: DB bytes':>22} {'of it the value':>16} {'the step':>9} "
          f"{'object reads':>13} {'DB file':>9}")
    for kind, r in results.items():
        reads = "-" if r["reads"] is None else str(r["reads"])
        print(f"{kind:8} {r['fork_bytes']:>23,} {r['fork_s'] * 1000:>6.0f}ms {r['peak_mb']:>7.1f}MB "
              f"{r['rerun_bytes']:>22,} {r['value_bytes']:>16,} {r['record_bytes']:>9,} "
              f"{reads:>13} {r['db_mb']:>7.1f}MB")
    print("\n'of it the value': the re-run fork's bytes less those of the same fork where the value "
          "is 10 bytes;\n'the step': its document, cache entry and the run's new field map, less a "
          "no-edit fork's bytes (any value size)")
    print("\ngoals (with an object store):")
    for kind, r in results.items():
        if r["reads"] is None:
            continue
        rows = [("database bytes added by a no-edit fork", r["fork_bytes"], 8 * 1024),
                (f"database bytes a re-run step's new {args.mb:g} MB value adds", r["value_bytes"],
                 1024),
                ("object-store reads: runs list, run, fork plan", r["reads"], 0)]
        for what, got, goal in rows:
            ok = got < goal if goal else got == 0
            print(f"  [{kind}] {what}: {got:,} (goal {'< ' + format(goal, ',') if goal else '0'}) "
                  f"{'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
