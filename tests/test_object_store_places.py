"""Object stores as a stranger found them (issue 42's review): where a row says its object is,
what a write checks before it skips an upload, what gc may delete, what a message may show.
A real S3 API on loopback (moto's server) and a local folder, as in test_object_store."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import boto3
import pytest
from burr.core.graph import GraphBuilder

from rewind import Pipeline, Rewind, action
from rewind.cli import main
from rewind.errors import CommitError, InvalidRequest
from rewind.store.objects import open_objects
from tests.test_object_store import (  # noqa: F401  (fixtures)
    BUCKET, PIPELINE, aws_env, blob_rows, blobs_url, large, objects_of, recorded, s3_endpoint,
    small,
)

SECRET = "SuperSecret123"


def test_a_process_not_told_the_endpoint_finds_the_objects(tmp_path, s3_endpoint, aws_env):
    """A row records the endpoint its URL gave: `blobs migrate --to inline` from a process with
    no REWIND_BLOBS reads MinIO, not AWS."""
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket="moved")
    db = str(tmp_path / "r.db")
    url = f"s3://moved/run1?endpoint={s3_endpoint}"
    run, fresh = recorded(db, url, "endpoints")
    fresh.close()
    assert {loc for _, loc in blob_rows_of(db).values() if loc} == {url}
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWIND_BLOBS")}
    done = subprocess.run([sys.executable, "-m", "rewind", "--db", db, "blobs", "migrate",
                           "--to", "inline"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert all(loc is None for _, loc in blob_rows_of(db).values())
    assert objects_of(url) == {}  # moved back: the objects went after the commit
    back = Rewind(db, pipelines=[PIPELINE])
    assert len(back.get_run(run.id).step("large").outputs["big"]) > 256 * 1024
    back.close()


def blob_rows_of(db: str) -> dict:
    rw = Rewind(db, pipelines=[PIPELINE])
    try:
        return blob_rows(rw)
    finally:
        rw.close()


def test_a_new_endpoint_for_the_same_bucket_is_the_same_place(tmp_path, s3_endpoint, aws_env):
    """MinIO moved: the configured URL's endpoint serves rows naming the old one, a migrate to
    it moves nothing and deletes nothing, and gc sweeps the place once."""
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket="moved-minio")
    db = str(tmp_path / "r.db")
    old = "s3://moved-minio/p?endpoint=http://127.0.0.1:1"  # where the rows say (nothing listens)
    new = f"s3://moved-minio/p?endpoint={s3_endpoint}"
    run, fresh = recorded(db, new, "moved")
    with fresh.store.transaction():
        fresh.store.execute("UPDATE blobs SET location = ? WHERE location IS NOT NULL", (old,))
    fresh.close()
    rw = Rewind(db, pipelines=[PIPELINE], blobs=new, admin=True)
    rw.store.forget_blobs()
    assert len(rw.get_run(run.id).step("large").outputs["big"]) > 256 * 1024
    before = set(objects_of(new))
    report = rw.gc(older_than_days=365)
    assert report.get("objects", 0) == 0 and set(objects_of(new)) == before
    rw.close()
    assert main(["--db", db, "blobs", "migrate", "--to", new]) == 0
    assert set(objects_of(new)) == before  # nothing moved, nothing deleted
    assert {loc for _, loc in blob_rows_of(db).values() if loc} == {new}


def test_an_object_altered_in_place_is_repaired_by_running_the_step_again(store_url, blobs_url):
    """Bit rot keeps the size: a write checks the bytes (the folder's file, S3's MD5 ETag)
    before it skips the upload, so re-executing the step stores them again."""
    run, fresh = recorded(store_url, blobs_url, "bitrot")
    (h,) = [h for h, (_, loc) in blob_rows(fresh).items() if loc is not None]
    objs = open_objects(blobs_url)
    data = bytearray(objs.get(h))
    data[10] ^= 1
    objs.put(h, bytes(data))  # same size, other bytes
    fresh.close()
    again = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)
    rerun = again.run(PIPELINE, {"topic": "bitrot"}, use_cache=False)
    assert rerun.step("large").status == "executed"
    assert objs.get(h) != bytes(data)
    again.store.forget_blobs()
    assert len(again.get_run(run.id).step("large").outputs["big"]) > 256 * 1024
    again.close()


@pytest.mark.parametrize("url", [
    f"s3://bkt/p?aws_secret_access_key={SECRET}",
    f"s3://bkt/p?{SECRET}",
    f"s3://bkt/p?endpoint=http://AKIA:{SECRET}@127.0.0.1:9000",
    f"s3://bkt/p?endpoint=http://AKIA%3A{SECRET}%40127.0.0.1:9000",
    f"s3://bkt/p?endpoint=http://127.0.0.1:9000&endpoint=http://{SECRET}:1",
    f"s3://bkt/p?endpoint=http://127.0.0.1:9000/?token={SECRET}",
    f"s3:/AKIA:{SECRET}@bkt/p",
    f"s3:AKIA:{SECRET}@bkt",
    f"s3://AKIA%3A{SECRET}%40bkt/p",
    f"file:///tmp/x?token={SECRET}",
    f"ftp://user:{SECRET}@host/p",
])
def test_a_secret_in_a_url_is_refused_and_never_shown(url, tmp_path, aws_env, capsys, monkeypatch):
    with pytest.raises(InvalidRequest) as e:
        open_objects(url)
    assert SECRET not in str(e.value)
    monkeypatch.setenv("REWIND_BLOBS", url)
    assert main(["--db", str(tmp_path / "r.db"), "runs"]) == 2
    monkeypatch.delenv("REWIND_BLOBS")
    assert main(["--db", str(tmp_path / "r.db"), "blobs", "migrate", "--to", url]) == 2
    got = capsys.readouterr()
    assert SECRET not in got.out + got.err and got.err.strip()


def test_gc_deletes_and_counts_only_objects_of_its_own_prefix(tmp_path, s3_endpoint, aws_env):
    """An object under a deeper prefix (another database's) or a folder in a file:// store is
    neither counted nor deleted."""
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="nest")
    outer, inner = (f"s3://nest/{p}?endpoint={s3_endpoint}" for p in ("a", "a/b"))
    run_outer, rw_outer = recorded(str(tmp_path / "outer.db"), outer, "outer")
    run_inner, rw_inner = recorded(str(tmp_path / "inner.db"), inner, "inner")
    rw_inner.close()
    rw_outer.close()
    os.environ["REWIND_BLOB_GRACE_S"] = "0"
    try:
        gc = Rewind(str(tmp_path / "outer.db"), pipelines=[PIPELINE], blobs=outer, admin=True)
        assert gc.gc(older_than_days=365).get("objects") == 0
        gc.close()
        folder = tmp_path / "objs"
        (folder / "sub").mkdir(parents=True)
        (folder / "notes.txt").write_text("mine")
        local = Rewind(str(tmp_path / "local.db"), pipelines=[PIPELINE],
                       blobs=f"file://{folder}", admin=True)
        assert local.gc(older_than_days=365).get("objects") == 0
        local.close()
    finally:
        del os.environ["REWIND_BLOB_GRACE_S"]
    assert (folder / "sub").is_dir() and (folder / "notes.txt").exists()
    inner_rw = Rewind(str(tmp_path / "inner.db"), pipelines=[PIPELINE], blobs=inner)
    assert len(inner_rw.get_run(run_inner.id).step("large").outputs["big"]) > 256 * 1024
    inner_rw.close()


def test_file_objects_are_readable_by_others_as_the_umask_allows(tmp_path):
    objs = open_objects(f"file://{tmp_path}/objs")
    objs.put("a" * 64, b"value")
    mode = stat.S_IMODE(os.stat(tmp_path / "objs" / ("a" * 64)).st_mode)
    mask = os.umask(0)
    os.umask(mask)
    assert mode == 0o666 & ~mask


def test_inline_is_any_case(store_url, blobs_url, capsys):
    run, fresh = recorded(store_url, blobs_url, "case")
    fresh.close()
    assert main(["--db", store_url, "blobs", "migrate", "--to", "INLINE"]) == 0
    back = Rewind(store_url, pipelines=[PIPELINE])
    assert all(loc is None for _, loc in blob_rows(back).values())
    back.close()


def test_an_unreachable_store_is_named_as_the_cause_not_the_database(store_url, aws_env):
    down = "s3://bkt/p?endpoint=http://127.0.0.1:1"
    rw = Rewind(store_url, pipelines=[PIPELINE], blobs=down)
    with pytest.raises(CommitError) as e:
        rw.run(PIPELINE, {"topic": "outage"})
    message = str(e.value)
    rw.close()
    assert "\n" not in message and message.count("could not write run") == 1
    assert message.startswith(f"could not write run {e.value.run_id}: object store {down} "
                              "could not store object")
    assert "database is reachable" not in message and "CommitError" not in message
    assert f"rewind resume {e.value.run_id}" in message


def test_a_folder_reached_through_a_symlink_is_the_same_store(tmp_path, aws_env, monkeypatch):
    """gc and migrate through another path to the same folder delete nothing it holds."""
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    db = str(tmp_path / "r.db")
    run, fresh = recorded(db, f"file://{real}", "symlinks")
    fresh.close()
    held = set(objects_of(f"file://{real}"))
    monkeypatch.setenv("REWIND_BLOB_GRACE_S", "0")
    rw = Rewind(db, pipelines=[PIPELINE], blobs=f"file://{link}", admin=True)
    assert rw.gc(older_than_days=365).get("objects") == 0
    rw.close()
    assert main(["--db", db, "blobs", "migrate", "--to", f"file://{link}"]) == 0
    assert set(objects_of(f"file://{real}")) == held
    back = Rewind(db, pipelines=[PIPELINE])
    assert len(back.get_run(run.id).step("large").outputs["big"]) > 256 * 1024
    back.close()


@pytest.mark.parametrize("damage", ["missing", "altered"])
def test_a_process_without_a_store_repairs_a_damaged_object_inline(store_url, blobs_url, damage):
    """Re-running the step from a process with no object store keeps the bytes in the
    database when the object no longer holds them: the new run reads."""
    run, fresh = recorded(store_url, blobs_url, "no store")
    (h,) = [h for h, (_, loc) in blob_rows(fresh).items() if loc is not None]
    fresh.close()
    objs = open_objects(blobs_url)
    if damage == "missing":
        objs.delete([h])
    else:
        data = bytearray(objs.get(h))
        data[5] ^= 1
        objs.put(h, bytes(data))
    plain = Rewind(store_url, pipelines=[PIPELINE])
    again = plain.run(PIPELINE, {"topic": "no store"}, use_cache=False)
    assert again.step("large").status == "executed"
    assert blob_rows(plain)[h] == (blob_rows(plain)[h][0], None) and blob_rows(plain)[h][0] > 256 * 1024
    assert len(plain.get_run(again.id).step("large").outputs["big"]) > 256 * 1024
    plain.close()


def test_a_folder_named_with_url_characters_reads_back(tmp_path, aws_env):
    folder = tmp_path / "a#b?c%41 d"
    url = "file://" + __import__("urllib.parse").parse.quote(str(folder))
    run, fresh = recorded(str(tmp_path / "r.db"), url, "odd names")
    fresh.close()
    assert folder.is_dir() and len(os.listdir(folder)) == 1
    back = Rewind(str(tmp_path / "r.db"), pipelines=[PIPELINE])
    assert len(back.get_run(run.id).step("large").outputs["big"]) > 256 * 1024
    back.close()


@action(reads=["big", "note"], writes=["digest"], ignore=["note"])
def digest(state, width: int = 8):
    return state.update(digest=state["big"][:width])


def test_a_plan_at_a_node_with_ignore_reads_no_object(store_url, blobs_url, pipeline_registry):
    """`ignore=` on another field leaves a large field's recorded hash usable by the plan."""
    graph = (GraphBuilder().with_actions(small=small, large=large, digest=digest)
             .with_transitions(("small", "large"), ("large", "digest")).build())
    pipe = Pipeline("bigignore", graph, entrypoint="small")
    rw = Rewind(store_url, pipelines=[pipe], blobs=blobs_url)
    run = rw.run(pipe, {"topic": "ignored"})
    rw.close()
    fresh = Rewind(store_url, pipelines=[pipe], blobs=blobs_url)
    objs = open_objects(blobs_url)
    before = objs.reads
    same = fresh.plan_fork(run.id, at="digest")
    wider = fresh.plan_fork(run.id, at="digest", params={"width": 4})
    assert objs.reads == before
    assert same.rows[-1].verdict == "cached" and wider.rows[-1].verdict == "re-run"
    assert fresh.fork(run.id, at="digest").step("digest").status == "cached"
    assert fresh.fork(run.id, at="digest", params={"width": 4}).step("digest").outputs["digest"] \
        == run.step("digest").outputs["digest"][:4]
    fresh.close()


def test_an_export_missing_an_object_names_the_object_store(store_url, blobs_url, capsys):
    run, fresh = recorded(store_url, blobs_url, "export")
    (h,) = [h for h, (_, loc) in blob_rows(fresh).items() if loc is not None]
    fresh.close()
    open_objects(blobs_url).delete([h])
    assert main(["--db", store_url, "export", run.id]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"missing from the object store {blobs_url.split('?')[0]}" in err


def test_gc_never_deletes_an_object_a_commit_in_flight_refers_to(store_url, blobs_url, monkeypatch):
    """The sweep decides which objects are garbage and deletes them under gc's lock; a writer
    uploads under `lock_for_upload`. A run writing the value of an orphaned object while gc
    is between its decision and its delete waits, then uploads it again: its object is there."""
    import threading

    from rewind.store.objectrefs import SQLObjectRefs

    run, admin = recorded(store_url, blobs_url, "in flight")
    admin.close()
    admin = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url, admin=True)
    admin.gc(older_than_days=0)  # the run goes; its object stays (younger than the grace)
    (h,) = [h for h in objects_of(blobs_url) if h not in blob_rows(admin)]
    monkeypatch.setenv("REWIND_BLOB_GRACE_S", "0")
    decided, go = threading.Event(), threading.Event()
    real = SQLObjectRefs.stray_objects

    def paused(self, location, old):
        stray = real(self, location, old)
        decided.set()
        go.wait(30)
        return stray

    monkeypatch.setattr(SQLObjectRefs, "stray_objects", paused)
    sweeper = threading.Thread(target=admin.gc, kwargs={"older_than_days": 365})
    sweeper.start()
    assert decided.wait(60)
    uploaded = threading.Event()
    store_class = type(open_objects(blobs_url))
    real_put = store_class.put

    def put(self, name, data):
        real_put(self, name, data)
        uploaded.set()

    monkeypatch.setattr(store_class, "put", put)
    writer = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)
    done: list = []
    writing = threading.Thread(target=lambda: done.append(writer.run(PIPELINE, {"topic": "in flight"})))
    writing.start()
    # without the locks the writer uploads (and commits) now; with them it waits for the sweep
    # (the wait below bounds how long a failure takes to show, never whether this passes)
    uploaded_early = uploaded.wait(5)
    go.set()
    sweeper.join(60)
    writing.join(60)
    assert not uploaded_early, "a commit uploaded an object between gc's decision and its delete"
    assert done and done[0].status == "completed", done
    assert h in objects_of(blobs_url)
    writer.store.forget_blobs()
    assert len(writer.get_run(done[0].id).step("large").outputs["big"]) > 256 * 1024
    writer.close()
    admin.close()


def _in_a_fresh_process(code: str) -> str:
    """Run `code` in a new interpreter (no object store opened before it): its stdout."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items()
                                            if k != "REWIND_BLOBS"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture
def second_s3(aws_env):
    """A second S3 server in its own process (moto's servers in one process share one store)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    try:
        for _ in range(600):  # until it answers (polled, not slept for)
            try:
                client.list_buckets()
                break
            except Exception:
                server.poll()
                assert server.returncode is None, "moto's server did not start"
                import time
                time.sleep(0.05)
        yield endpoint
    finally:
        server.terminate()
        server.wait(30)


def on_twin_servers(tmp_path, bucket: str, endpoints: tuple) -> tuple:
    """(db, the run, its store URL, the other server's URL for the same bucket and prefix):
    a run recorded on the first of two servers that each hold a bucket of that name."""
    for endpoint in endpoints:
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    first, second = (f"s3://{bucket}/p?endpoint={e}" for e in endpoints)
    db = str(tmp_path / "r.db")
    run, fresh = recorded(db, first, bucket)
    fresh.close()
    return db, run, first, second


def test_migrate_copies_to_another_server_with_the_same_bucket_name(tmp_path, s3_endpoint,
                                                                   second_s3):
    """Same bucket and prefix on another server: not "there already" unless it holds the
    object; the values are copied, and the copies they came from are left alone."""
    db, run, first, second = on_twin_servers(tmp_path, "twin", (s3_endpoint, second_s3))
    held = set(objects_of(first))
    assert main(["--db", db, "blobs", "migrate", "--to", second]) == 0
    assert set(objects_of(second)) == held and set(objects_of(first)) == held
    assert {loc for _, loc in blob_rows_of(db).values() if loc} == {second}
    back = Rewind(db, pipelines=[PIPELINE], blobs=second)
    assert len(back.get_run(run.id).step("large").outputs["big"]) > 256 * 1024
    back.close()


def test_a_store_configured_without_an_endpoint_reads_rows_that_name_one(tmp_path, s3_endpoint,
                                                                        aws_env):
    """`s3://bucket/prefix` with no endpoint means AWS: in a process told only that, rows that
    name their server are read from it, not from AWS."""
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket="named")
    db = str(tmp_path / "r.db")
    run, fresh = recorded(db, f"s3://named/p?endpoint={s3_endpoint}", "named")
    fresh.close()
    out = _in_a_fresh_process(
        "import rewind; from tests.test_object_store import PIPELINE\n"
        f"rw = rewind.Rewind({db!r}, pipelines=[PIPELINE], blobs='s3://named/p')\n"
        f"print(len(rw.get_run({run.id!r}).step('large').outputs['big']))")
    assert int(out) > 256 * 1024


def test_a_row_naming_a_dead_store_is_moved_by_the_next_write(tmp_path, aws_env):
    """A reference row names a store that is gone for good; a write of the same value to the
    configured store uploads it there and re-points the row, instead of failing every commit."""
    db = str(tmp_path / "r.db")
    live = f"file://{tmp_path}/live"
    run, fresh = recorded(db, live, "dead")
    dead = "s3://gone-bucket/p?endpoint=http://127.0.0.1:1"
    with fresh.store.transaction():
        fresh.store.execute("UPDATE blobs SET location = ? WHERE location IS NOT NULL", (dead,))
    fresh.close()
    for name in os.listdir(tmp_path / "live"):
        os.unlink(tmp_path / "live" / name)
    again = Rewind(db, pipelines=[PIPELINE], blobs=live)
    rerun = again.run(PIPELINE, {"topic": "dead"}, use_cache=False)
    assert rerun.status == "completed", rerun.error
    assert {loc for _, loc in blob_rows(again).values() if loc} == {live}
    again.store.forget_blobs()
    assert len(again.get_run(run.id).step("large").outputs["big"]) > 256 * 1024
    again.close()


def test_a_plan_counts_an_edit_of_a_large_value_by_its_encoding():
    """A value stored elsewhere is compared by bytes of its encoding: 500k CJK characters
    replacing 1M ASCII ones grow what the node reads (the estimate errs high, not to zero)."""
    from types import SimpleNamespace

    from rewind.engine.plan import edit_growth

    step = SimpleNamespace(input_refs={"doc": "d" * 64},
                           load_inputs=lambda fields: {"doc": "a" * 1_000_000})
    store = SimpleNamespace(field_blob_info=lambda refs: {"doc": (1_000_002, "file:///x")},
                            blob_info=lambda hashes: {"d" * 64: (1_000_002, "file:///x")})
    spec = SimpleNamespace(reads=["doc"])
    assert edit_growth(step, spec, {"doc": "語" * 500_000}, store) >= 500_000 // 3


def test_partial_loads_take_any_iterable(tmp_path, aws_env):
    run, fresh = recorded(str(tmp_path / "r.db"), f"file://{tmp_path}/o", "iterables")
    step = fresh.get_run(run.id).step("measure")
    assert set(step.load_inputs(k for k in ["big"])) == {"big"}
    assert set(step.load_outputs(iter(["size"]))) == {"size"}
    assert fresh.state_at(step, skip=(k for k in ["big"]))["size"] > 0
    assert "big" not in fresh.state_at(step, skip=(k for k in ["big"]))
    fresh.close()
    with pytest.raises(InvalidRequest):
        open_objects(f"file://{tmp_path}/o#frag")


def test_a_row_is_read_from_its_own_server_before_the_configured_one(tmp_path, s3_endpoint,
                                                                      second_s3):
    """Configured early for a new server with the same bucket and prefix, Rewind reads rows
    from the server they name (and migrate copies from it), not from the new one."""
    db, run, first, second = on_twin_servers(tmp_path, "early", (s3_endpoint, second_s3))
    early = Rewind(db, pipelines=[PIPELINE], blobs=second)
    assert len(early.get_run(run.id).step("large").outputs["big"]) > 256 * 1024
    early.close()
    assert main(["--db", db, "blobs", "migrate", "--to", second]) == 0
    assert set(objects_of(second)) == set(objects_of(first))
