"""The benchmark workload: an 8-node linear pipeline, each node reading the previous node's
~2 KB output and writing its own; four of them are "LLM" nodes that meter a fixed number of
tokens through `rewind.record_usage` (a counted fake: no model is called)."""

from __future__ import annotations

import hashlib
import os
import sqlite3

from burr.core import ApplicationBuilder
from burr.core.graph import GraphBuilder
from burr.core.persistence import SQLitePersister

import rewind

NODES = ["plan", "search", "read", "analyze", "critique", "revise", "summarize", "format"]
LLM_NODES = {"plan", "analyze", "critique", "summarize"}
FIELDS = {n: f"{n}_out" for n in NODES}
PROMPT_TOKENS, COMPLETION_TOKENS = 120, 80
OUTPUT_BYTES = 2048
USAGE_CALLS = {"n": 0}  # the counted fake: how many times an LLM node "called the model"


def make_text(tag: str, source: str, size: int = OUTPUT_BYTES) -> str:
    """A deterministic ~`size`-byte text derived from `source` (cheap: one sha256)."""
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    line = f"{tag}: {digest}\n"
    return (line * (size // len(line) + 1))[:size]


def _make_node(name: str, reads: str, writes: str, llm: bool, package=rewind):
    @package.action(reads=[reads], writes=[writes])
    def node(state):
        text = make_text(name, state[reads])
        if llm:
            USAGE_CALLS["n"] += 1
            package.record_usage(PROMPT_TOKENS, COMPLETION_TOKENS)
        return state.update(**{writes: text})

    node.__name__ = name
    return node


def build_graph(package=rewind):
    """The graph, its nodes metering through `package` (bench/ab.py loads two copies of
    rewind: each side's nodes must meter into its own, or no step spends tokens)."""
    actions = {}
    prev = "topic"
    for n in NODES:
        actions[n] = _make_node(n, prev, FIELDS[n], n in LLM_NODES, package)
        prev = FIELDS[n]
    transitions = [(a, b) for a, b in zip(NODES, NODES[1:])]
    return GraphBuilder().with_actions(**actions).with_transitions(*transitions).build()


def make_pipeline(name: str = "bench8") -> rewind.Pipeline:
    return rewind.Pipeline(name=name, graph=build_graph(), entrypoint=NODES[0])


def topic(i: int) -> str:
    """A fresh ~2 KB input for run `i` (so a first run is never served from cache)."""
    return make_text("topic", f"bench topic {i}")


def wal_connection(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


class BurrBaseline:
    """The same Burr application with only Burr's SQLitePersister (WAL, synchronous=NORMAL)."""

    def __init__(self, path: str, graph):
        self.conn = wal_connection(path)
        self.persister = SQLitePersister(db_path=path, table_name="burr_state", connection=self.conn)
        self.persister.initialize()
        self.graph = graph

    def run(self, app_id: str, state: dict):
        app = (
            ApplicationBuilder()
            .with_graph(self.graph)
            .with_entrypoint(NODES[0])
            .with_state(**state)
            .with_identifiers(app_id=app_id, partition_key="bench")
            .with_state_persister(self.persister)
            .build()
        )
        app.run(halt_after=[NODES[-1]])
        return app.state

    def close(self):
        self.conn.close()


FORK_AT = NODES[2]  # the benchmark's fork: nodes 1-2 inherited, 6 replayed from the cache
REPLAYED = len(NODES) - 2


def recording_pair(tmp: str, tag: str) -> tuple:
    """(pipeline, Rewind store, Burr + SQLitePersister) for timing first runs side by side, each
    warmed by three runs (imports, code fingerprints, first pages)."""
    pipeline = make_pipeline("bench8")
    rw = rewind.Rewind(os.path.join(tmp, f"{tag}-rewind.db"))
    burr = BurrBaseline(os.path.join(tmp, f"{tag}-burr.db"), pipeline.graph)
    for i in range(3):
        rw.run(pipeline, {"topic": topic(900_000 + i)})
        burr.run(f"warm{i}", {"topic": topic(900_000 + i)})
    return pipeline, rw, burr
