"""The demo pipeline: answer a question about Python from Python's own language reference.

    plan (llm) → research (tool, time-bound) → analyse (tool) → critique (llm) → revise (llm)
      → compose (llm) → verify (tool) → publish (side effect)

Initial state: {"question": "..."}. Each node declares exactly the state keys it reads; the LLM
nodes take `model`, `temperature`, `seed` and their prompt template (`prompt`) as keyword
params, so a fork can change exactly one of them:

    rw.fork(run.id, at="critique", params={"temperature": 0.9})

The search is BM25 (SQLite FTS5) over `pydoc_data.topics` (see `rewind.pipelines.corpus`);
`publish` writes the report into `REWIND_OUTBOX` (default `./outbox`) and appends to its log,
the one effect a replay must not repeat.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
from pathlib import Path
from typing import Optional

from burr.core.graph import GraphBuilder

from ..model import chat as llm
from ..action import action, tool
from ..engine import Pipeline, register_pipeline
from . import corpus

__all__ = [
    "pipeline", "SAMPLE_QUESTIONS", "PLAN_PROMPT", "CRITIQUE_PROMPT", "REVISE_PROMPT",
    "COMPOSE_PROMPT", "DEFAULT_MODEL", "NODES", "plan", "research", "analyse", "critique",
    "revise", "compose", "verify", "publish", "parse_questions", "render_analysis",
    "format_sources", "find_citations", "search_corpus", "outbox_dir", "PUBLISH_LOG",
]

DEFAULT_MODEL = "sim-small"
NODES = ("plan", "research", "analyse", "critique", "revise", "compose", "verify", "publish")
PUBLISH_LOG = "publish.log"
# The corpus is part of research's and analyse's behaviour: a new Python (new topics) or a new
# index layout must not be served from another one's cache.
CORPUS_VERSION = f"corpus-{corpus.SCHEMA_VERSION}-py{platform.python_version()}"

SAMPLE_QUESTIONS = [
    "Context managers and the with statement",
    "Name resolution in nested functions and closures",
    "Exceptions raised inside try statements with a finally clause",
    "Generators and the yield expression",
    "Rich comparison methods and the comparison operators",
    "How the import statement finds and loads modules",
]

PLAN_PROMPT = """\
Plan the research for the question below. Break it into 3 to 5 numbered sub-questions, one per \
line, that can each be looked up in the Python language reference.

Question: {question}"""

CRITIQUE_PROMPT = """\
Critique the analysis below: list its weaknesses (unsupported claims, vague wording, missing \
coverage of the question) as numbered points, then give a one-line verdict.

Question: {question}

Analysis:
{analysis}"""

REVISE_PROMPT = """\
Revise the analysis to address every point of the critique. Keep it short, and attach a \
[doc:ID] citation from the sources below to each claim you make.

Question: {question}

Analysis:
{analysis}

Critique:
{critique}

Sources:
{sources}"""

COMPOSE_PROMPT = """\
Compose the final report answering the question for a Python developer. Build on the draft, \
cite the sources inline as [doc:ID], and cite only the sources listed below.

Question: {question}

Draft:
{draft}

Sources:
{sources}"""


# ---------------------------------------------------------------------------------------------
# Helpers (pure functions of their arguments)

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NUMBERED = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+(.+?)\s*$")
_CITATION = re.compile(r"\[doc:([^\]\s]+)\]")
_STEM_SUFFIXES = ("ations", "ation", "ings", "ing", "ers", "ies", "es", "er", "ed", "s")


def fill(template: str, **values: str) -> str:
    """Substitute `{name}` for the names given; any other brace text is left as written, so a
    user's edited prompt with literal braces (JSON examples, f-strings) never raises."""
    if not isinstance(template, str):
        raise TypeError(f"a prompt template must be a str, not {type(template).__name__}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), template)


def _chat(text: str, model: str, temperature: float, seed: Optional[int]) -> str:
    return llm.chat([{"role": "user", "content": text}], model=model,
                    temperature=temperature, seed=seed)


def parse_questions(plan_text: str, limit: int = 6) -> list:
    """The numbered or bulleted sub-questions of a plan, in order, without duplicates."""
    out: list = []
    for line in (plan_text or "").splitlines():
        m = _NUMBERED.match(line)
        if not m:
            continue
        q = m.group(1).strip()
        if q and q not in out and corpus.query_terms(q):
            out.append(q)
        if len(out) >= limit:
            break
    return out


def _stem(word: str) -> str:
    w = word.lower()
    for suf in _STEM_SUFFIXES:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)]
            if suf == "ies":
                w += "y"
            break
    return w


def _stems(text: str) -> set:
    return {_stem(w) for w in re.findall(r"[A-Za-z][A-Za-z0-9_]*", text)}


def _drop_heading(text: str) -> str:
    """The text without a first line that is only a short heading ("Revised analysis:")."""
    first, sep, rest = (text or "").strip().partition("\n")
    if sep and first.rstrip().endswith(":") and len(first.split()) <= 4:
        return rest.strip()
    return (text or "").strip()


def format_sources(hits: list) -> str:
    """Source lines the model is asked to cite: `[doc:ID] Title: snippet`."""
    return "\n".join(f"[doc:{h['id']}] {h['title']}: {h['snippet']}" for h in hits)


def find_citations(text: str) -> list:
    """Every `[doc:ID]` in the text, in order (repeats kept)."""
    return _CITATION.findall(text or "")


def render_analysis(analysis: dict) -> str:
    """The analysis dict as prose for the critique and revision prompts."""
    stats = analysis.get("stats") or {}
    sources = analysis.get("sources") or []
    if not sources:
        return ("No document of the corpus matched the research questions, so none of the "
                f"{stats.get('terms', 0)} question terms is covered by a source.")
    pct = round(100 * float(analysis.get("coverage") or 0))
    lines = [
        f"The {len(sources)} retrieved documents cover {stats.get('covered_terms', 0)} of "
        f"{stats.get('terms', 0)} question terms ({pct}%).",
        f"The strongest match is {sources[0]['title']} [doc:{sources[0]['id']}] with a BM25 score "
        f"of {sources[0]['score']}, against a mean of {stats.get('mean_score', 0)}.",
    ]
    for s in sources[1:]:
        lines.append(f"- {s['title']} [doc:{s['id']}] matches {s['terms']} of the question terms.")
    for i, q in enumerate(analysis.get("questions") or [], 1):
        cov = round(100 * float(q.get("coverage") or 0))
        line = f"- Sub-question {i} is {cov}% covered"
        line += f" and misses {', '.join(q['missing'])}." if q.get("missing") else "."
        lines.append(line)
    missing = analysis.get("missing_terms") or []
    if missing:
        lines.append(f"Some terms may need other sources, since no document covers {', '.join(missing)}.")
    return "\n".join(lines)


@tool(name="rewind.pipelines.corpus.search", ttl=300)
def search_corpus(query: str, k: int) -> list:
    """BM25 search, cached per (query, k) in the store's tool cache for 5 minutes."""
    return corpus.search(query, k)


def outbox_dir(outbox: Optional[str] = None) -> Path:
    return Path(outbox or os.environ.get("REWIND_OUTBOX") or "outbox").expanduser().resolve()


def _slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", (text or "").lower()).strip("-")
    return (s[:limit].rstrip("-") or "report")


# ---------------------------------------------------------------------------------------------
# Nodes


@action(reads=["question"], writes=["plan", "questions"], tags=["llm"])
def plan(state, model: str = DEFAULT_MODEL, temperature: float = 0.0,
         prompt: str = PLAN_PROMPT, seed: Optional[int] = None):
    """Break the question into sub-questions; they become the search queries."""
    question = state["question"]
    text = _chat(fill(prompt, question=question), model, temperature, seed)
    questions = parse_questions(text) or [question]
    return state.update(plan=text, questions=questions)


@action(reads=["questions"], writes=["hits"], determinism="time-bound", ttl=300,
        version=CORPUS_VERSION, tags=["tool"])
def research(state, k: int = 5):
    """BM25 over the language reference, one query per sub-question; a document's score is the
    sum of its scores over the queries, so what every sub-question needs ranks first."""
    per_query = max(int(k), 8)
    merged: dict = {}
    for qi, q in enumerate(state["questions"]):
        for hit in search_corpus(q, per_query):
            got = merged.get(hit["id"])
            if got is None:
                merged[hit["id"]] = got = {
                    "id": hit["id"], "title": hit["title"], "snippet": hit["snippet"],
                    "score": 0.0, "best": -1.0,
                }
            got["score"] += hit["score"]
            if hit["score"] > got["best"]:  # the snippet of the query it matches best
                got["best"], got["snippet"] = hit["score"], hit["snippet"]
    ranked = sorted(merged.values(), key=lambda h: (-h["score"], h["id"]))[: int(k)]
    hits = [
        {"id": h["id"], "title": h["title"], "snippet": h["snippet"], "score": round(h["score"], 3)}
        for h in ranked
    ]
    return state.update(hits=hits)


@action(reads=["questions", "hits"], writes=["analysis"], version=CORPUS_VERSION, tags=["tool"])
def analyse(state):
    """How well the retrieved documents cover the terms of each sub-question."""
    hits = state["hits"]
    docs = corpus.get_documents([h["id"] for h in hits])
    doc_stems = {
        h["id"]: _stems(h["title"] + " " + (docs.get(h["id"]) or {}).get("text", h["snippet"]))
        for h in hits
    }
    all_stems = set().union(*doc_stems.values()) if doc_stems else set()
    per_question, all_terms, covered_terms = [], [], set()
    for q in state["questions"]:
        terms = corpus.query_terms(q)
        covered = [t for t in terms if _stem(t) in all_stems]
        best, best_n = None, 0
        for h in hits:
            n = sum(1 for t in terms if _stem(t) in doc_stems[h["id"]])
            if n > best_n:
                best, best_n = h["id"], n
        per_question.append({
            "question": q, "terms": terms, "covered": covered,
            "missing": [t for t in terms if t not in covered],
            "coverage": round(len(covered) / len(terms), 3) if terms else 0.0,
            "best_doc": best,
        })
        for t in terms:
            if t not in all_terms:
                all_terms.append(t)
        covered_terms.update(covered)
    scores = [float(h["score"]) for h in hits]
    sources = [
        {"id": h["id"], "title": h["title"], "score": h["score"],
         "terms": sum(1 for t in all_terms if _stem(t) in doc_stems[h["id"]])}
        for h in hits
    ]
    analysis = {
        "questions": per_question,
        "coverage": round(len(covered_terms) / len(all_terms), 3) if all_terms else 0.0,
        "missing_terms": [t for t in all_terms if t not in covered_terms],
        "sources": sources,
        "stats": {
            "documents": len(hits), "questions": len(per_question), "terms": len(all_terms),
            "covered_terms": len(covered_terms),
            "mean_score": round(sum(scores) / len(scores), 3) if scores else 0.0,
            "max_score": max(scores) if scores else 0.0,
            "min_score": min(scores) if scores else 0.0,
        },
    }
    return state.update(analysis=analysis)


@action(reads=["question", "analysis"], writes=["critique"], tags=["llm"])
def critique(state, model: str = DEFAULT_MODEL, temperature: float = 0.0,
             prompt: str = CRITIQUE_PROMPT, seed: Optional[int] = None):
    """The model's critique of the analysis."""
    text = fill(prompt, question=state["question"], analysis=render_analysis(state["analysis"]))
    return state.update(critique=_chat(text, model, temperature, seed))


@action(reads=["question", "analysis", "critique", "hits"], writes=["revision"], tags=["llm"])
def revise(state, model: str = DEFAULT_MODEL, temperature: float = 0.0,
           prompt: str = REVISE_PROMPT, seed: Optional[int] = None):
    """The analysis rewritten to answer the critique, with citations."""
    text = fill(
        prompt, question=state["question"], analysis=render_analysis(state["analysis"]),
        critique=state["critique"], sources=format_sources(state["hits"]),
    )
    return state.update(revision=_chat(text, model, temperature, seed))


@action(reads=["question", "revision", "hits"], writes=["report"], tags=["llm"])
def compose(state, model: str = DEFAULT_MODEL, temperature: float = 0.0,
            prompt: str = COMPOSE_PROMPT, seed: Optional[int] = None):
    """The final report; the sources go in as `[doc:ID] Title: snippet` lines to be cited."""
    text = fill(prompt, question=state["question"], draft=_drop_heading(state["revision"]),
                sources=format_sources(state["hits"]))
    return state.update(report=_chat(text, model, temperature, seed))


@action(reads=["report", "hits"], writes=["verification"], tags=["tool"])
def verify(state):
    """Every `[doc:ID]` in the report must name a retrieved document."""
    cited = find_citations(state["report"])
    retrieved = [h["id"] for h in state["hits"]]
    known = set(retrieved)
    unique = list(dict.fromkeys(cited))
    bad = [c for c in unique if c not in known]
    good = [c for c in unique if c in known]
    verification = {
        "valid": bool(cited) and not bad,
        "citations": len(cited),
        "cited": unique,
        "bad_citations": bad,
        "uncited_sources": [r for r in retrieved if r not in good],
        "coverage": round(len(good) / len(retrieved), 3) if retrieved else 0.0,
    }
    return state.update(verification=verification)


@action(reads=["question", "report", "verification"], writes=["receipt"],
        determinism="side-effect", tags=["side-effect"])
def publish(state, outbox: Optional[str] = None):
    """Write the report into the outbox and append a line to its log: the side effect."""
    report = state["report"]
    data = report.encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    folder = outbox_dir(outbox)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_slug(state['question'])}-{digest[:12]}.md"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    entry = {
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "path": str(path), "sha256": digest, "bytes": len(data),
        "question": state["question"], "verified": bool(state["verification"].get("valid")),
    }
    with open(folder / PUBLISH_LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry, sort_keys=True) + "\n")
    receipt = {"path": str(path), "sha256": digest, "bytes": len(data),
               "verified": entry["verified"]}
    return state.update(receipt=receipt)


graph = (
    GraphBuilder()
    .with_actions(plan=plan, research=research, analyse=analyse, critique=critique,
                  revise=revise, compose=compose, verify=verify, publish=publish)
    .with_transitions(
        ("plan", "research"), ("research", "analyse"), ("analyse", "critique"),
        ("critique", "revise"), ("revise", "compose"), ("compose", "verify"),
        ("verify", "publish"),
    )
    .build()
)

pipeline = register_pipeline(Pipeline(
    name="research",
    graph=graph,
    entrypoint="plan",
    description=(
        "Answer a question about Python from its language reference: plan → BM25 research → "
        "analyse → critique → revise → compose → verify citations → publish to the outbox."
    ),
    sample_state={"question": SAMPLE_QUESTIONS[0]},
))
