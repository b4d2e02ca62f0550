"""The demo research pipeline: offline corpus (BM25 over pydoc topics), a full run through the
simulator, forks that replay from cache, and citation checks. Real SQLite files in tmp_path."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from rewind import Rewind, llm
from rewind.pipelines import corpus, research
from rewind.pipelines.research import NODES, pipeline

LLM_NODES = ("plan", "critique", "revise", "compose")
TOOL_NODES = ("research", "analyse", "verify", "publish")
QUESTION = "Context managers and the with statement"


@pytest.fixture(scope="session")
def corpus_db(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("corpus") / "corpus.db"


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path, corpus_db):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REWIND_MODEL", "REWIND_PROVIDER",
                 "REWIND_PIPELINES", "REWIND_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REWIND_OUTBOX", str(tmp_path / "outbox"))
    monkeypatch.setenv("REWIND_CORPUS_DB", str(corpus_db))
    llm.reset()
    yield
    llm.reset()


@pytest.fixture
def rw(tmp_path):
    with Rewind(str(tmp_path / "rewind.db")) as handle:
        yield handle


@pytest.fixture
def base_run(rw):
    run = rw.run(pipeline, {"question": QUESTION})
    assert run.status == "completed", run.error
    return rw.get_run(run.id)


def outbox_files(tmp_path) -> dict:
    folder = tmp_path / "outbox"
    if not folder.exists():
        return {}
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# ---------------------------------------------------------------------------------------------
# Corpus


def test_corpus_has_the_language_reference_topics(corpus_db):
    assert corpus.topic_count() >= 70
    path = corpus.ensure_index()
    assert path == corpus_db and path.is_file()
    con = sqlite3.connect(str(path))
    try:
        n = con.execute("SELECT count(*) FROM docs").fetchone()[0]
        with_title = con.execute("SELECT title FROM docs WHERE id = 'with'").fetchone()[0]
    finally:
        con.close()
    assert n == corpus.topic_count() >= 70
    assert with_title == 'The "with" statement'


def test_bm25_finds_the_with_statement_for_context_managers():
    hits = corpus.search("How do context managers work?", k=5)
    ids = [h["id"] for h in hits]
    assert "with" in ids[:3] and "context-managers" in ids[:3], ids
    assert set(hits[0]) == {"id", "title", "snippet", "score"}
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    assert all(isinstance(s, float) and round(s, 3) == s for s in scores)
    assert all("\n" not in h["snippet"] and "====" not in h["snippet"] for h in hits)
    # a different question ranks a different topic first
    assert corpus.search("the try statement and its finally clause", k=3)[0]["id"] in ("try", "compound")


def test_search_treats_fts_syntax_as_data():
    # quotes, parentheses, operators and column filters must not raise an FTS5 syntax error
    assert isinstance(corpus.search('NEAR(yield "AND" OR NOT title: *', k=3), list)
    assert corpus.search("the of and", k=3) == []  # nothing but stopwords
    assert corpus.search("context managers", k=0) == []


def test_index_is_rebuilt_atomically_when_corrupt_or_stale(tmp_path):
    target = tmp_path / "idx" / "corpus.db"
    target.parent.mkdir()
    target.write_bytes(b"not a database")
    assert corpus.ensure_index(target) == target
    assert corpus.search("context managers", k=1, path=target)[0]["id"] in ("with", "context-managers")
    assert [p.name for p in target.parent.iterdir()] == ["corpus.db"]  # no temp file left
    # a stale fingerprint (another Python's topics) is rebuilt too
    con = sqlite3.connect(str(target))
    con.execute("UPDATE meta SET value = 'stale' WHERE key = 'fingerprint'")
    con.commit()
    con.close()
    corpus._ready.clear()
    corpus.ensure_index(target)
    con = sqlite3.connect(str(target))
    try:
        assert con.execute("SELECT value FROM meta WHERE key='fingerprint'").fetchone()[0] == corpus.fingerprint()
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# Pipeline shape


def test_pipeline_shape_and_params(rw):
    assert pipeline.name == "research" and pipeline.entrypoint == "plan"
    assert list(pipeline.actions) == list(NODES)
    assert pipeline.sample_state == {"question": research.SAMPLE_QUESTIONS[0]}
    assert len(research.SAMPLE_QUESTIONS) >= 3
    assert pipeline.policy("research").determinism == "time-bound"
    assert pipeline.policy("research").ttl == 300
    assert pipeline.policy("publish").determinism == "side-effect"
    for node in LLM_NODES:
        assert {"model", "temperature", "prompt"} <= pipeline.param_names(node), node
    assert pipeline.params("critique")["prompt"] == research.CRITIQUE_PROMPT
    assert pipeline.params("critique")["temperature"] == 0.0
    assert pipeline.reads("plan") == ["question"]
    assert pipeline.reads("research") == ["questions"]
    assert "question" not in pipeline.reads("research")
    # the CLI and dashboard find it without being handed the object
    assert rw.pipeline("research") is pipeline


def test_helpers():
    plan_text = "Plan\n\n1. What is a context manager?\n2) How does with call __exit__?\n- the of\n"
    assert research.parse_questions(plan_text) == [
        "What is a context manager?", "How does with call __exit__?"]
    assert research.fill("Q: {question} {unknown} {\"json\": 1}", question="x") == \
        "Q: x {unknown} {\"json\": 1}"
    assert research.format_sources([{"id": "with", "title": "T", "snippet": "s", "score": 1.0}]) == \
        "[doc:with] T: s"
    assert research.find_citations("a [doc:with] b [doc:try][doc:with]") == ["with", "try", "with"]


# ---------------------------------------------------------------------------------------------
# Runs and forks


def test_run_completes_eight_steps_metered_and_published(rw, tmp_path):
    run = rw.run(pipeline, {"question": QUESTION})
    assert run.status == "completed", run.error
    run = rw.get_run(run.id)
    assert [s.node for s in run.steps] == list(NODES)
    assert all(s.status == "executed" for s in run.steps)
    for node in LLM_NODES:
        assert run.step(node).tokens > 0, node
        assert run.step(node).prompt_tokens > 0 and run.step(node).completion_tokens > 0
    for node in TOOL_NODES:
        assert run.step(node).tokens == 0, node
    assert run.total_tokens == sum(run.step(n).tokens for n in LLM_NODES)

    questions = run.step("plan").outputs["questions"]
    assert 1 <= len(questions) <= 6 and all(isinstance(q, str) and q for q in questions)
    hits = run.step("research").outputs["hits"]
    assert 1 <= len(hits) <= 5
    assert {"with", "context-managers"} & {h["id"] for h in hits}
    assert all(set(h) == {"id", "title", "snippet", "score"} for h in hits)

    analysis = run.step("analyse").outputs["analysis"]
    assert analysis["stats"]["documents"] == len(hits)
    assert analysis["stats"]["questions"] == len(questions)
    assert [s["id"] for s in analysis["sources"]] == [h["id"] for h in hits]
    assert 0 < analysis["coverage"] <= 1
    assert analysis["stats"]["mean_score"] == round(sum(h["score"] for h in hits) / len(hits), 3)

    report = run.step("compose").outputs["report"]
    assert "[doc:" in report
    verification = run.step("verify").outputs["verification"]
    assert verification["valid"] is True
    assert verification["bad_citations"] == []
    assert verification["citations"] == len(research.find_citations(report)) > 0
    assert set(verification["cited"]) <= {h["id"] for h in hits}
    assert 0 < verification["coverage"] <= 1

    receipt = run.step("publish").outputs["receipt"]
    path = Path(receipt["path"])
    assert path.parent == tmp_path / "outbox" and path.is_file()
    assert receipt["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert path.read_text(encoding="utf-8") == report
    log = (tmp_path / "outbox" / research.PUBLISH_LOG).read_text().splitlines()
    assert len(log) == 1 and json.loads(log[0])["sha256"] == receipt["sha256"]


def test_no_edit_fork_is_free_identical_and_dry_runs_publish(rw, base_run, tmp_path):
    before = outbox_files(tmp_path)
    assert len(before) == 2  # the report and the log
    fork = rw.fork(base_run.id, at="plan")
    assert fork.status == "completed", fork.error
    fork = rw.get_run(fork.id)
    assert fork.parent_id == base_run.id
    assert fork.total_tokens == 0
    assert fork.tokens_saved == sum(base_run.step(n).tokens for n in LLM_NODES)
    assert [s.node for s in fork.steps] == list(NODES)
    for a, b in zip(base_run.steps, fork.steps):
        assert b.output_hash == a.output_hash, b.node
        assert b.tokens == 0
    assert [s.status for s in fork.steps] == ["cached"] * 7 + ["dry-run"]
    assert outbox_files(tmp_path) == before  # no new file, the log not appended
    d = rw.diff(base_run.id, fork.id)
    assert d.first_divergence is None


def test_fork_at_critique_with_higher_temperature(rw, base_run, tmp_path):
    before = outbox_files(tmp_path)
    fork = rw.fork(base_run.id, at="critique", params={"temperature": 0.9})
    assert fork.status == "completed", fork.error
    fork = rw.get_run(fork.id)
    assert [s.node for s in fork.steps] == list(NODES)
    for node in ("plan", "research", "analyse"):
        assert fork.step(node).status == "inherited", node
        assert fork.step(node).output_hash == base_run.step(node).output_hash
        assert fork.step(node).tokens == 0
    crit = fork.step("critique")
    assert crit.status == "executed" and crit.tokens > 0
    assert crit.params["temperature"] == 0.9
    assert "temperature" in crit.reason
    # downstream: re-executed exactly when its hashed inputs changed, else served from cache
    for node in ("revise", "compose", "verify"):
        a, b = base_run.step(node), fork.step(node)
        if b.input_hash == a.input_hash:
            assert b.status == "cached" and b.output_hash == a.output_hash and b.tokens == 0, node
        else:
            assert b.status == "executed", node
    assert fork.step("publish").status == "dry-run"
    assert fork.total_tokens == sum(s.tokens for s in fork.steps if s.status == "executed")
    assert outbox_files(tmp_path) == before
    d = rw.diff(base_run.id, fork.id)
    changed = crit.output_hash != base_run.step("critique").output_hash
    # a critique that came out the same leaves everything downstream cached and identical
    assert d.first_divergence == ("critique" if changed else None)
    assert [r.node for r in d.rows] == list(NODES)


def test_verify_flags_a_citation_of_a_document_never_retrieved(rw, base_run):
    bogus = "# Report\n\nContext managers exit [doc:with] and also [doc:not-retrieved]."
    fork = rw.fork(base_run.id, at="verify", edit={"report": bogus})
    assert fork.status == "completed", fork.error
    v = rw.get_run(fork.id).step("verify").outputs["verification"]
    hits = {h["id"] for h in base_run.step("research").outputs["hits"]}
    assert v["bad_citations"] == ["not-retrieved"]
    assert v["valid"] is False
    assert v["citations"] == 2
    assert v["coverage"] == round(len({"with"} & hits) / len(hits), 3)
    assert rw.diff(base_run.id, fork.id).first_divergence == "verify"


def test_edited_prompt_reruns_only_that_node_and_what_it_reaches(rw, base_run):
    prompt = research.COMPOSE_PROMPT.replace("for a Python developer", "for a beginner")
    fork = rw.get_run(rw.fork(base_run.id, at="compose", params={"prompt": prompt}).id)
    assert fork.step("compose").status == "executed"
    assert fork.step("compose").params["prompt"] == prompt
    assert [fork.step(n).status for n in NODES[:5]] == ["inherited"] * 5
    assert fork.step("verify").status in ("executed", "cached")
    assert fork.step("publish").status == "dry-run"


def test_research_edit_of_questions_changes_the_hits(rw, base_run):
    fork = rw.fork(base_run.id, at="research",
                   edit={"questions": ["How does the try statement run its finally clause?"]})
    fork = rw.get_run(fork.id)
    assert fork.status == "completed", fork.error
    assert fork.step("plan").status == "inherited"
    assert fork.step("research").status == "executed"
    ids = [h["id"] for h in fork.step("research").outputs["hits"]]
    assert "try" in ids and ids != [h["id"] for h in base_run.step("research").outputs["hits"]], ids
    assert fork.step("verify").outputs["verification"]["valid"] is True
