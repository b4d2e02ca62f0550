"""`Pipeline`: a named Burr graph with an entrypoint, checked when it is built.

Everything a key needs that is fixed per pipeline is computed here once (each node's params,
their hashes, the wrapped graph), and anything Rewind cannot key is refused here, naming the
node and the param, before any node runs or anything is written. `register_pipeline` keeps
the pipelines every `Rewind` handle of this process knows (the CLI's and the dashboard's).
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

from burr.core.action import Action
from burr.core.graph import Graph, GraphBuilder, Transition

from ..errors import InvalidRequest, NotFound, RewindError
from ..keys import canonical_hash, node_params, param_names, policy_of
from .keys import NodeSpec, node_spec


# name -> Pipeline, for every `Rewind` handle in this process
GLOBAL_PIPELINES: dict = {}


def register_pipeline(pipeline: "Pipeline") -> "Pipeline":
    """Register a pipeline for every `Rewind` handle in this process (the CLI and dashboard)."""
    GLOBAL_PIPELINES[pipeline.name] = pipeline
    return pipeline


class Pipeline:
    """A named Burr graph with an entrypoint: what Rewind runs, forks and replays."""

    def __init__(self, name: str, graph: Any, entrypoint: str, description: str = "",
                 sample_state: Optional[dict] = None):
        if isinstance(graph, GraphBuilder):
            graph = graph.build()
        if not isinstance(graph, Graph):
            raise InvalidRequest(
                f"pipeline {name!r}: graph must be a burr Graph (GraphBuilder().with_actions(...)"
                f".with_transitions(...).build()), not {type(graph).__name__}"
            )
        self.name = str(name)
        self.graph = graph
        self.entrypoint = entrypoint
        self.description = description
        self.sample_state = dict(sample_state or {})
        self.actions = {a.name: a for a in graph.actions}
        if entrypoint not in self.actions:
            raise InvalidRequest(
                f"pipeline {name!r}: entrypoint {entrypoint!r} is not one of its actions "
                f"({', '.join(self.actions)})"
            )
        self.edges = [
            (t.from_.name, t.to.name, getattr(t.condition, "name", str(t.condition)))
            for t in graph.transitions
        ]
        self.graph_id = canonical_hash(
            {"pipeline": self.name, "nodes": list(self.actions), "edges": self.edges}
        )
        self._params = {n: node_params(a) for n, a in self.actions.items()}
        self._param_names: dict = {}
        self._specs: dict = {}
        self._wrapped: Optional[Graph] = None
        for node in self.actions:  # refuse what cannot be keyed now, not mid-run
            try:
                self.spec(node)
            except RewindError as e:
                raise InvalidRequest(
                    f"pipeline {self.name!r}, node {node!r}: {e}; bind a value with a "
                    "deterministic encoding, or give the object a `rewind_key`", node=node,
                ) from e

    def __repr__(self) -> str:
        return f"Pipeline({self.name!r}, nodes={list(self.actions)})"

    def action(self, node: str) -> Action:
        try:
            return self.actions[node]
        except KeyError:
            raise NotFound(
                f"pipeline {self.name!r} has no node {node!r}; its nodes are "
                f"{', '.join(self.actions)}", node=node,
            ) from None

    def reads(self, node: str) -> list:
        return list(self.action(node).reads)

    def writes(self, node: str) -> list:
        return list(self.action(node).writes)

    def params(self, node: str) -> dict:
        """The node's effective default params (signature defaults, then `.bind()`)."""
        self.action(node)
        return dict(self._params[node])

    def param_names(self, node: str) -> set:
        got = self._param_names.get(node)
        if got is None:
            got = self._param_names[node] = frozenset(param_names(self.action(node)))
        return set(got)

    def policy(self, node: str):
        return policy_of(self.action(node))

    def spec(self, node: str) -> NodeSpec:
        """The node's spec with no overrides, built once (callers refresh its code hash)."""
        got = self._specs.get(node)
        if got is None:
            got = self._specs[node] = node_spec(node, self.action(node), None, self._params[node])
        return got

    def wrapped_graph(self) -> Graph:
        """The graph with every action wrapped in `ReplayAction`; built once per pipeline (the
        wrappers find the running execution through `context.CURRENT`)."""
        if self._wrapped is None:
            from .replay import ReplayAction  # (replay imports this module)

            wrapped = {n: ReplayAction(a) for n, a in self.actions.items()}
            transitions = [
                Transition(from_=wrapped[t.from_.name], to=wrapped[t.to.name], condition=t.condition)
                for t in self.graph.transitions
            ]
            self._wrapped = Graph(actions=list(wrapped.values()), transitions=transitions)
        return self._wrapped


def load_pipeline_spec(spec: str) -> list:
    """Import `pkg.mod:attr` and return the Pipelines it names (a Pipeline or a list of them)."""
    mod_name, _, attr = spec.strip().partition(":")
    if not mod_name or not attr:
        raise InvalidRequest(f"pipeline spec {spec!r} must look like package.module:attribute")
    try:
        module = importlib.import_module(mod_name)
    except Exception as e:  # a broken module is the spec's problem, named as such
        raise NotFound(f"cannot import {mod_name!r} for pipeline spec {spec!r}: "
                       f"{type(e).__name__}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise NotFound(f"{mod_name} has no attribute {attr!r} (pipeline spec {spec!r})") from None
    if callable(obj) and not isinstance(obj, Pipeline):  # a factory of pipelines
        try:
            obj = obj()
        except Exception as e:
            raise InvalidRequest(f"{spec!r} is neither a rewind.Pipeline nor a function that "
                                 f"returns one when called with no arguments (calling it "
                                 f"raised {type(e).__name__}: {e})") from None
    items = obj if isinstance(obj, (list, tuple)) else [obj]
    for item in items:
        if not isinstance(item, Pipeline):
            raise InvalidRequest(f"{spec!r} is a {type(item).__name__}, not a rewind.Pipeline")
    return list(items)
