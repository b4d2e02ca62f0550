"""Large values in an object store (issue 42): the database keeps hashes and references, the
object store (a real S3 API on loopback: moto's server; and a local folder) keeps the bytes.
Every test runs on both database backends and both object-store backends."""

from __future__ import annotations

import contextlib
import socket
import uuid

import boto3
import pytest
from burr.core.graph import GraphBuilder
from moto.server import ThreadedMotoServer

from rewind import CommitError, Pipeline, Rewind, action
from rewind.cli import main
from rewind.errors import IntegrityError, InvalidRequest, StoreError
from rewind.store.objects import open_objects

BIG = 300 * 1024  # over the default threshold (256 KB)
BUCKET = "rewind-test"


@action(reads=["topic"], writes=["note"])
def small(state):
    return state.update(note=f"small note on {state['topic']}")


@action(reads=["note"], writes=["big"])
def large(state, salt: str = "a"):
    # deterministic in its inputs, so a re-execution writes the same value (same hash)
    return state.update(big=(state["note"] + salt) * (BIG // (len(state["note"]) + 1) + 1))


@action(reads=["big"], writes=["size"])
def measure(state, scale: int = 1):
    return state.update(size=len(state["big"]) * scale)


PIPELINE = Pipeline("bigvalues", GraphBuilder().with_actions(small=small, large=large, measure=measure)
                    .with_transitions(("small", "large"), ("large", "measure")).build(),
                    entrypoint="small")


@pytest.fixture(scope="module")
def s3_endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(monkeypatch):
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                 ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(k, v)
    for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "REWIND_BLOBS", "REWIND_BLOB_INLINE_MAX",
              "REWIND_BLOB_GRACE_S"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture(params=["s3", "file"])
def blobs_url(request, tmp_path, aws_env):
    if request.param == "file":
        return f"file://{tmp_path}/objects"
    endpoint = request.getfixturevalue("s3_endpoint")
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=BUCKET)
    return f"s3://{BUCKET}/{uuid.uuid4().hex}?endpoint={endpoint}"


def objects_of(url: str) -> dict:
    return {h: size for h, size, _ in open_objects(url).listing()}


def blob_rows(rw) -> dict:
    return {h: (int(n), loc) for h, n, loc in
            rw.store.query("SELECT hash, LENGTH(data), location FROM blobs")}


def inline_bytes(rw) -> int:
    return int(rw.store.query("SELECT COALESCE(SUM(LENGTH(data)), 0) FROM blobs")[0][0])


def recorded(store_url: str, blobs_url: str, topic: str) -> tuple:
    """(a run recorded by one handle, a fresh handle on the same stores: nothing in memory)."""
    rw = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)
    run = rw.run(PIPELINE, {"topic": topic})
    assert run.status == "completed", run.error
    rw.close()
    return run, Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)


def test_large_values_go_to_the_store_once_small_ones_stay_inline(store_url, blobs_url):
    rw = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)
    run = rw.run(PIPELINE, {"topic": "whales"})
    assert run.status == "completed", run.error
    rows = blob_rows(rw)
    refs = {h for h, (n, loc) in rows.items() if loc is not None}
    assert refs and all(rows[h][0] == 0 for h in refs)  # a reference row holds no bytes
    assert all(n <= 256 * 1024 for h, (n, loc) in rows.items() if loc is None)
    assert set(objects_of(blobs_url)) == refs
    # the same value in another run is stored once
    again = rw.run(PIPELINE, {"topic": "whales"})
    assert again.status == "completed"
    assert set(objects_of(blobs_url)) == refs and len(blob_rows(rw)) == len(rows)
    rw.close()
    fresh = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)
    value = fresh.get_run(run.id).step("large").outputs["big"]
    assert len(value) >= BIG and value.startswith("small note on whales")
    fresh.close()


def test_pages_and_fork_plan_read_no_object(store_url, blobs_url):
    run, fresh = recorded(store_url, blobs_url, "plans")
    objs = open_objects(blobs_url)
    before = objs.reads
    assert [r.id for r in fresh.list_runs()] == [run.id]
    got = fresh.get_run(run.id)
    assert [s.node for s in got.steps] == ["small", "large", "measure"]
    fresh.plan_fork(run.id, at="large", params={"salt": "b"})
    assert objs.reads == before  # the run list, the run (trajectory) and the plan: none
    assert len(got.step("large").outputs["big"]) >= BIG  # the step's value: fetched on demand
    assert objs.reads == before + 1
    fresh.close()


def test_dashboard_pages_read_an_object_only_when_asked(store_url, blobs_url, monkeypatch,
                                                      pipeline_registry):
    """The Runs page and a run's page, its steps' values and saved state included (Streamlit's
    AppTest), fetch no object: a large value is shown by its size with a box; ticked, it is
    fetched once and shown cut to a preview."""
    from streamlit.testing.v1 import AppTest

    import rewind
    from tests.page_script import ROOT

    run, fresh = recorded(store_url, blobs_url, "dashboard")
    fresh.close()
    monkeypatch.setenv("REWIND_DB", store_url)
    monkeypatch.setenv("REWIND_BLOBS", blobs_url)
    rewind.register_pipeline(PIPELINE)
    objs = open_objects(blobs_url)

    def reads_of(query: dict) -> tuple:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        for k, v in query.items():
            at.query_params[k] = v
        before = objs.reads
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return objs.reads - before, at

    assert reads_of({})[0] == 0  # the runs list (and the run and step it opens)
    assert reads_of({"run": run.id})[0] == 0  # the run: its trajectory and graph
    for node in ("large", "measure"):  # wrote it; read it (and its state holds it)
        n, at = reads_of({"run": run.id, "node": node})
        assert n == 0 and any(f"Step {node}" in m.value for m in at.markdown)
        boxes = [b for b in at.checkbox if b.label.startswith("Show big (")]
        assert len(boxes) == 2 and all("KB recorded" in b.label for b in boxes)
    boxes[0].check()
    before = objs.reads
    at.run()
    assert objs.reads - before == 1
    shown = [t.value for t in at.text]
    assert any(v.startswith("small note on dashboard") and "more characters" in v for v in shown)
    assert max(len(v) for v in shown) < 21_000  # a preview, not 300 KB


def test_the_fork_page_loads_a_large_input_only_when_asked(store_url, blobs_url, monkeypatch,
                                                          pipeline_registry):
    """At a step that read a large value, the Fork page shows its size and a box to load it:
    closed, nothing is fetched and the fork keeps the recorded value; opened, it is an editor."""
    from streamlit.testing.v1 import AppTest

    import rewind
    from tests.page_script import ROOT

    run, fresh = recorded(store_url, blobs_url, "fork page")
    monkeypatch.setenv("REWIND_DB", store_url)
    monkeypatch.setenv("REWIND_BLOBS", blobs_url)
    rewind.register_pipeline(PIPELINE)
    objs = open_objects(blobs_url)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.session_state["fork_run"], at.session_state["fork_node"] = run.id, "measure"
    at.run()
    at.switch_page("pages/fork.py")
    before = objs.reads
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert objs.reads == before
    key = f"fk:{run.id}:measure"
    box = at.checkbox(key=f"{key}:open:big")
    assert "Load big to edit it" in box.label and "KB recorded" in box.label
    assert not [t for t in at.text_area if t.key == f"{key}:edit:big"]
    at.number_input(key=f"{key}:param:scale").set_value(3)
    at.run()
    [b for b in at.button if "Replay" in b.label][0].click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    fork = fresh.list_runs(limit=1)[0]
    assert fork.parent_id == run.id and fork.edit == {}
    assert fresh.get_run(fork.id).step("measure").outputs["size"] == 3 * run.step("measure").outputs["size"]
    at.checkbox(key=f"{key}:open:big").check()
    at.run()
    area = at.text_area(key=f"{key}:edit:big")
    assert area.value.startswith("small note on fork page")
    fresh.close()


def test_a_plan_at_a_step_reading_a_large_value_reads_no_object(store_url, blobs_url):
    """The fork node's key is made from the recorded hash of a large field it reads (the
    bytes hash to their name), so planning there fetches nothing, and says what the fork does."""
    run, fresh = recorded(store_url, blobs_url, "readers")
    objs = open_objects(blobs_url)
    before = objs.reads
    same = fresh.plan_fork(run.id, at="measure")
    changed = fresh.plan_fork(run.id, at="measure", params={"scale": 2})
    edited = fresh.plan_fork(run.id, at="measure", edit={"big": "short"})
    assert objs.reads == before
    assert [r.verdict for r in same.rows] == ["inherited", "inherited", "cached"]
    assert changed.rows[-1].verdict == "re-run" and "scale" in changed.rows[-1].reason
    assert edited.rows[-1].verdict == "re-run" and "big" in edited.rows[-1].reason
    # what the plan said is what the fork does
    assert fresh.fork(run.id, at="measure").step("measure").status == "cached"
    again = fresh.fork(run.id, at="measure", params={"scale": 2})
    assert again.step("measure").status == "executed"
    assert again.step("measure").outputs["size"] == 2 * run.step("measure").outputs["size"]
    fresh.close()


def test_forks_add_references_not_bytes(store_url, blobs_url):
    rw = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)
    run = rw.run(PIPELINE, {"topic": "forks"})
    base = inline_bytes(rw)
    fork = rw.fork(run.id, at="large")  # no edit
    assert fork.status == "completed", fork.error
    assert inline_bytes(rw) - base < 8 * 1024
    base, n_objects = inline_bytes(rw), len(objects_of(blobs_url))
    before_objects = objects_of(blobs_url)
    rerun = rw.fork(run.id, at="large", params={"salt": "b"})  # a new large value
    assert rerun.status == "completed", rerun.error
    # the new value is a reference row with no bytes; what the database gains is the two
    # re-executed steps' own docs (~1 KB each, as without an object store), not the 300 KB
    (h,) = set(objects_of(blobs_url)) - set(before_objects)
    assert blob_rows(rw)[h][0] == 0
    assert inline_bytes(rw) - base < 4 * 1024
    assert len(objects_of(blobs_url)) == n_objects + 1
    assert rw.get_run(rerun.id).step("large").outputs["big"] != rw.get_run(run.id).step("large").outputs["big"]
    rw.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_store_leaves_the_run_interrupted_and_resumable(store_url, blobs_url):
    down = f"s3://{BUCKET}/down?endpoint=http://127.0.0.1:{_closed_port()}"
    rw = Rewind(store_url, pipelines=[PIPELINE], blobs=down)
    with pytest.raises(StoreError, match=f"object store s3://{BUCKET}/down") as e:
        rw.run(PIPELINE, {"topic": "outage"})
    run_id = e.value.run_id
    assert isinstance(e.value, CommitError) and run_id
    assert rw.get_run(run_id).status == "interrupted"
    # nothing half-written: no reference row names the store that was never reached
    assert all(loc is None for _, loc in blob_rows(rw).values())
    rw.close()
    back = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)
    done = back.resume(run_id)
    assert done.status == "completed", done.error
    assert len(back.get_run(run_id).step("large").outputs["big"]) >= BIG
    assert back.get_run(run_id).step("measure").outputs["size"] >= BIG
    back.close()


@pytest.mark.parametrize("damage", ["missing", "tampered"])
def test_a_missing_or_tampered_object_is_never_served_and_a_rerun_repairs_it(store_url, blobs_url, damage):
    rw = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)
    run = rw.run(PIPELINE, {"topic": "damage"})
    (h,) = [h for h, (_, loc) in blob_rows(rw).items() if loc is not None]
    objs = open_objects(blobs_url)
    if damage == "missing":
        objs.delete([h])
    else:
        objs.put(h, b'"not the value"' + b" " * BIG)
    rw.close()
    fresh = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)
    with pytest.raises(IntegrityError, match=h[:12]) as e:
        fresh.get_run(run.id).step("large").outputs
    assert f"field `big` that step 'large' of run {run.id} wrote" in str(e.value)
    assert (e.value.run_id, e.value.node, e.value.field) == (run.id, "large", "big")
    fork = fresh.fork(run.id, at="large")  # the cache entry is rejected; the step re-executes
    assert fork.status == "completed", fork.error
    assert fork.step("large").status == "executed"
    assert fork.step("large").output_hash == run.step("large").output_hash
    assert len(fresh.get_run(run.id).step("large").outputs["big"]) >= BIG  # repaired
    fresh.close()


def test_gc_removes_unreferenced_objects_but_not_young_ones(store_url, blobs_url, monkeypatch):
    rw = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url, admin=True)
    run = rw.run(PIPELINE, {"topic": "gc"})
    referenced = set(objects_of(blobs_url))
    stray = "f" * 64  # uploaded for a transaction that rolled back, or one still in flight
    open_objects(blobs_url).put(stray, b"x" * 10)
    report = rw.gc(older_than_days=365)
    assert report["objects"] == 0 and stray in objects_of(blobs_url)  # young: maybe in flight
    monkeypatch.setenv("REWIND_BLOB_GRACE_S", "0")
    report = rw.gc(older_than_days=365, dry_run=True)
    assert report["objects"] == 1 and stray in objects_of(blobs_url)
    report = rw.gc(older_than_days=365)
    assert report["objects"] == 1 and set(objects_of(blobs_url)) == referenced
    assert len(rw.get_run(run.id).step("large").outputs["big"]) >= BIG
    report = rw.gc(older_than_days=0)  # the run goes: its objects with it
    assert report["runs"] == 1 and objects_of(blobs_url) == {}
    monkeypatch.setenv("REWIND_BLOB_GRACE_S", "soon")
    with pytest.raises(InvalidRequest, match="REWIND_BLOB_GRACE_S"):
        rw.gc(older_than_days=0)
    rw.close()


def test_export_and_import_carry_large_values(store_url, blobs_url, tmp_path):
    rw = Rewind(store_url, pipelines=[PIPELINE], blobs=blobs_url)
    run = rw.run(PIPELINE, {"topic": "export"})
    doc = rw.export_run(run.id)
    rw.close()
    inline = Rewind(str(tmp_path / "inline.db"), pipelines=[PIPELINE])
    assert inline.import_run(doc) == [run.id]
    assert all(loc is None for _, loc in blob_rows(inline).values())
    assert len(inline.get_run(run.id).step("large").outputs["big"]) >= BIG
    inline.close()
    other = f"file://{tmp_path}/other-objects"
    elsewhere = Rewind(str(tmp_path / "elsewhere.db"), pipelines=[PIPELINE], blobs=other)
    elsewhere.import_run(doc)
    assert {loc for _, loc in blob_rows(elsewhere).values()} == {None, open_objects(other).location}
    assert len(elsewhere.get_run(run.id).step("large").outputs["big"]) >= BIG
    elsewhere.close()


def test_migrate_to_the_object_store_and_back(store_url, blobs_url, capsys):
    rw = Rewind(store_url, pipelines=[PIPELINE])  # no object store: everything inline
    run = rw.run(PIPELINE, {"topic": "migrate"})
    rw.close()
    assert main(["--db", store_url, "blobs", "migrate", "--to", blobs_url]) == 0
    assert "moved 1 value(s)" in capsys.readouterr().out
    check = Rewind(store_url, pipelines=[PIPELINE])
    rows = blob_rows(check)
    (h,) = [h for h, (_, loc) in rows.items() if loc is not None]
    assert rows[h][0] == 0 and set(objects_of(blobs_url)) == {h}
    assert len(check.get_run(run.id).step("large").outputs["big"]) >= BIG
    check.close()
    assert main(["--db", store_url, "blobs", "migrate", "--to", "inline"]) == 0
    back = Rewind(store_url, pipelines=[PIPELINE])
    assert all(loc is None for _, loc in blob_rows(back).values())
    assert objects_of(blobs_url) == {}
    assert len(back.get_run(run.id).step("large").outputs["big"]) >= BIG
    back.close()


def test_bad_object_store_urls_are_refused(tmp_path, monkeypatch, capsys, aws_env):
    db = str(tmp_path / "r.db")
    for bad in ("ftp://host/x", "s3://", "file://relative/x", "s3://user:secret@bucket/p"):
        with pytest.raises(InvalidRequest) as e:
            Rewind(db, blobs=bad)
        assert "secret" not in str(e.value)
    monkeypatch.setenv("REWIND_BLOBS", "gs://bucket")
    with pytest.raises(InvalidRequest, match="REWIND_BLOBS"):
        Rewind(db)
    monkeypatch.setenv("REWIND_BLOBS", f"file://{tmp_path}/o")
    monkeypatch.setenv("REWIND_BLOB_INLINE_MAX", "-3")
    with pytest.raises(InvalidRequest, match="REWIND_BLOB_INLINE_MAX"):
        Rewind(db)
    monkeypatch.delenv("REWIND_BLOB_INLINE_MAX")
    fresh = str(tmp_path / "never.db")
    assert main(["--db", fresh, "blobs", "migrate", "--to", "gs://bucket"]) == 2
    assert "--to" in capsys.readouterr().err
    assert not (tmp_path / "never.db").exists()
