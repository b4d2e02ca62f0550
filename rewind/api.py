"""`Rewind`: the public handle. Pages, the CLI and user code call only this.

    rw = Rewind("rewind.db")
    run = rw.run(pipeline, {"topic": "..."})
    fork = rw.fork(run.id, at="critique", edit={"analysis": "..."})
    rw.diff(run.id, fork.id)
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable, Optional

from burr.core import ApplicationBuilder

from . import serde
from .action import SIDE_EFFECT
from .engine import (
    ExecutionContext, Heartbeat, Pipeline, base_builder, execute, load_pipeline_spec,
    new_run_id, owner_fields, step_from_row, steps_from_rows,
    summarize_state,
)
from .errors import ForkError, InvalidRequest, NotFound, RewindError
from .hashing import canonical_hash, canonical_json
from .models import Run, Step, TrajectoryDiff, normalize_overrides
from .store import PARTITION_KEY, SQLStore, open_store, pointer_row

_GLOBAL_PIPELINES: dict = {}


def register_pipeline(pipeline: Pipeline) -> Pipeline:
    """Register a pipeline for every `Rewind` handle in this process (the CLI and dashboard)."""
    _GLOBAL_PIPELINES[pipeline.name] = pipeline
    return pipeline


class Rewind:
    """A handle on one store: run, fork, resume, diff and audit pipelines."""

    def __init__(self, url: Any = None, pipelines: Optional[list] = None):
        self.store: SQLStore = open_store(url)
        self.url = self.store.url
        self._pipelines: dict = {}
        self._heartbeat = Heartbeat(self.store)
        for p in pipelines or []:
            self.register(p)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Rewind":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # pipelines -----------------------------------------------------------------------------
    def register(self, pipeline: Pipeline) -> Pipeline:
        if not isinstance(pipeline, Pipeline):
            raise InvalidRequest(f"expected a rewind.Pipeline, got {type(pipeline).__name__}")
        self._pipelines[pipeline.name] = pipeline
        self.store.put_graph(
            pipeline.graph_id, list(pipeline.actions), [tuple(e) for e in pipeline.edges]
        )
        return pipeline

    def pipelines(self) -> dict:
        """Every registered pipeline: this handle's, the process's, and `REWIND_PIPELINES`."""
        self._load_env_pipelines()
        return {**_GLOBAL_PIPELINES, **self._pipelines}

    def _load_env_pipelines(self) -> None:
        spec = os.environ.get("REWIND_PIPELINES", "")
        for part in filter(None, (s.strip() for s in spec.split(","))):
            if part in getattr(self, "_loaded_specs", set()):
                continue
            for p in load_pipeline_spec(part):
                if p.name not in self._pipelines:
                    self.register(p)
            self._loaded_specs = getattr(self, "_loaded_specs", set()) | {part}

    def pipeline(self, name_or_pipeline: Any) -> Pipeline:
        if isinstance(name_or_pipeline, Pipeline):
            known = self._pipelines.get(name_or_pipeline.name)
            if known is not name_or_pipeline:
                self.register(name_or_pipeline)
            return name_or_pipeline
        registry = self.pipelines()
        try:
            return registry[name_or_pipeline]
        except KeyError:
            names = ", ".join(sorted(registry)) or "none"
            raise NotFound(
                f"pipeline {name_or_pipeline!r} is not registered in this process (registered: "
                f"{names}); pass the Pipeline to rw.run/rw.register or list it in REWIND_PIPELINES"
            ) from None

    # reading -------------------------------------------------------------------------------
    def get_run(self, run_id: str) -> Run:
        row = self.store.get_run_row(str(run_id))
        if row is None:
            raise NotFound(f"no run {run_id!r} in {self.url}")
        steps = steps_from_rows(self.store.get_node_rows(row["id"], row["parent_id"]), self.store,
                                row["parent_id"])
        return Run.from_row(row, steps=steps)

    def list_runs(self, pipeline: Optional[str] = None, status: Optional[str] = None,
                  parent_id: Optional[str] = None, search: Optional[str] = None,
                  limit: int = 50, offset: int = 0, forks_only: bool = False) -> list:
        """Run summaries (no steps loaded), newest first."""
        try:
            limit, offset = int(limit), int(offset)
        except (TypeError, ValueError):
            raise InvalidRequest(
                f"limit and offset must be non-negative integers, not {limit!r} and {offset!r}"
            ) from None
        if limit < 0 or offset < 0:
            raise InvalidRequest("limit and offset must be non-negative integers")
        rows = self.store.list_run_rows(
            limit=min(int(limit), 10_000), offset=int(offset), pipeline=pipeline, status=status,
            parent_id=parent_id, search=search, forks_only=forks_only,
        )
        return [Run.from_row(r) for r in rows]

    def stored_pipelines(self) -> list:
        """Names of the pipelines that have runs in this store (registered or not)."""
        return self.store.pipelines()

    def count_runs(self, **filters: Any) -> int:
        return self.store.count_runs(**filters)

    def lineage(self, run_id: str) -> dict:
        """Ancestors (oldest first) and direct children of a run; purged parents are named."""
        run = self.store.get_run_row(run_id)
        if run is None:
            raise NotFound(f"no run {run_id!r} in {self.url}")
        ancestors, seen = [], {run_id}
        parent = run["parent_id"]
        while parent and parent not in seen:
            seen.add(parent)
            row = self.store.get_run_row(parent)
            ancestors.insert(0, {"id": parent, "missing": row is None, "row": row})
            if row is None:
                break
            parent = row["parent_id"]
        return {"ancestors": ancestors, "children": self.store.children(run_id)}

    def state_at(self, step: Step) -> Optional[dict]:
        """The whole state Burr saved after a step."""
        if step.sequence_id is None or step.state_app_id is None:
            return None
        return self.store.state_snapshot(step.state_app_id, step.sequence_id)

    def graph(self, run: Run) -> tuple:
        """(nodes, edges) of the pipeline graph a run used."""
        if run.graph_id:
            nodes, edges = self.store.get_graph(run.graph_id)
            if nodes:
                return nodes, edges
        p = self.pipelines().get(run.pipeline)
        if p is not None:
            return list(p.actions), list(p.edges)
        return list(dict.fromkeys(s.node for s in run.steps)), []

    # running -------------------------------------------------------------------------------
    def run(self, pipeline: Any, state: Optional[dict] = None, use_cache: bool = True,
            on_step: Optional[Callable[[Step], None]] = None) -> Run:
        """Run a pipeline from its entrypoint on `state`; cache hits are served unless
        `use_cache=False`. A failing node does not raise: the run comes back `failed`."""
        pipeline = self.pipeline(pipeline)
        state = dict(state or {})
        bad = [k for k in state if not isinstance(k, str)]
        if bad:
            raise InvalidRequest(f"state keys must be strings; got {bad[:3]!r}")
        for k in state:
            if "\x00" in k or any(0xD800 <= ord(c) <= 0xDFFF for c in k):
                raise InvalidRequest(
                    f"state key {k!r} contains a NUL or a lone surrogate; keys must be valid "
                    "Unicode text"
                )
        run_id = new_run_id()
        ctx = ExecutionContext(self.store, run_id, pipeline, use_cache=use_cache, on_step=on_step)
        ctx.absorb(state)  # raises UnhashableValue naming the field, before anything is written
        started = time.perf_counter()
        builder = (
            base_builder(ctx, run_id)
            .with_state(**state)
            .with_entrypoint(pipeline.entrypoint)
        )
        row = {
            "id": run_id, "pipeline": pipeline.name, "status": "running",
            "graph_id": pipeline.graph_id, "entrypoint": pipeline.entrypoint,
            "created_at": time.time(), "summary": summarize_state(state),
            "use_cache": int(bool(use_cache)), "start_seq": -1, "fork_index": 0,
            **owner_fields(),
        }
        with self.store.transaction():
            self.store.insert_run(row)
            self._save_start_state(ctx, run_id, -1, pipeline.entrypoint, state)
        ctx.run_row = row
        return execute(ctx, builder, self._heartbeat, started)

    def _save_start_state(self, ctx: ExecutionContext, app_id: str, sequence_id: int,
                          next_node: str, state: dict, flush: bool = True) -> None:
        # Saved as Burr's "failed" status: the state before `next_node` ran, so that Burr's
        # fork resumes *at* that node (a completed row resumes at the node after it).
        from burr.core import State

        self.store.live_contexts[app_id] = ctx
        try:
            self.store.persister().save(
                PARTITION_KEY, app_id, sequence_id, next_node, State(state), "failed"
            )
            if flush:
                ctx.flush_pending(self.store)  # callers hold the transaction the run row is in
        finally:
            self.store.live_contexts.pop(app_id, None)

    def _fork_source(self, run_row: dict, steps: list, index: int) -> tuple:
        """(app_id, sequence_id) of the saved state just before step `index` of a run."""
        fork_index = int(run_row.get("fork_index") or 0)
        if index == fork_index:
            start = (run_row["id"], int(run_row["start_seq"] if run_row["start_seq"] is not None else -1))
            if index == 0 or run_row.get("edit_json") or self.store.has_state(*start):
                return start
            # a fork that saved no start state: it started from the state after step index-1
            # (see `fork`), which its inherited row index-1 points at
        if index < fork_index:
            # An inherited step: the parent's trajectory up to here is this run's, and so is the
            # state before it, including an edit an ancestor made at exactly this node (the
            # saved state after step index-1 does not have that edit).
            parent = self.store.get_run_row(run_row["parent_id"]) if run_row["parent_id"] else None
            if parent is not None:
                parent_steps = steps_from_rows(self.store.get_node_rows(parent["id"]), self.store,
                                               parent["parent_id"])
                return self._fork_source(parent, parent_steps, index)
            if index == 0:
                raise NotFound(
                    f"run {run_row['id']}'s ancestors were purged; fork it at a later node"
                )
        prev = steps[index - 1]
        if prev.sequence_id is None or prev.state_app_id is None:
            raise ForkError(f"step {prev.node}#{prev.occurrence} of run {run_row['id']} has no saved state")
        return prev.state_app_id, int(prev.sequence_id)

    def fork(self, run_id: str, at: str, edit: Optional[dict] = None,
             params: Optional[dict] = None, allow_side_effects: bool = False,
             occurrence: int = 1, use_cache: bool = True,
             on_step: Optional[Callable[[Step], None]] = None) -> Run:
        """Fork a run at the `occurrence`-th visit of node `at`, change some of the fields it
        reads (`edit`) or its own params, and replay what the change reaches.

        Bad requests raise `RewindError` and write nothing.
        """
        edit = dict(edit or {})
        params = dict(params or {})
        parent_row = self.store.get_run_row(str(run_id))
        if parent_row is None:
            raise NotFound(f"no run {run_id!r} in {self.url}")
        pipeline = self.pipeline(parent_row["pipeline"])
        action = pipeline.action(at)
        reads = set(action.reads)
        not_read = sorted(set(edit) - reads)
        if not_read:
            raise InvalidRequest(
                f"node {at!r} does not read {', '.join(repr(f) for f in not_read)}; it reads "
                f"{sorted(reads) or 'nothing'}. Fork at the node that reads the field."
            )
        known_params = pipeline.param_names(at)
        unknown = sorted(set(params) - known_params)
        if unknown:
            raise InvalidRequest(
                f"node {at!r} has no parameter {', '.join(repr(p) for p in unknown)}; its "
                f"parameters are {sorted(known_params) or 'none'}"
            )
        for k, v in edit.items():
            canonical_json(v, f"edit.{k}")
        for k, v in params.items():
            canonical_json(v, f"params.{k}")
        if not isinstance(occurrence, int) or occurrence < 1:
            raise InvalidRequest(f"occurrence must be a positive integer, not {occurrence!r}")

        parent_rows = self.store.get_node_rows(parent_row["id"], parent_row["parent_id"])
        steps = steps_from_rows(parent_rows, self.store, parent_row["parent_id"])
        visits = [i for i, s in enumerate(steps) if s.node == at]
        if len(visits) >= occurrence:
            index = visits[occurrence - 1]
        elif parent_row["status"] in ("failed", "interrupted") and occurrence == len(visits) + 1:
            index = len(steps)  # the next node the run never reached
        else:
            raise NotFound(
                f"node {at!r} ran {len(visits)} time(s) in run {run_id}; there is no "
                f"occurrence {occurrence} to fork at"
            )
        source_app, source_seq = self._fork_source(parent_row, steps, index)

        fork_id = new_run_id()
        prior = steps[:index]
        parent_by_key = {(s.node, s.occurrence): s for s in steps}
        # a fork keeps its ancestors' param changes (each from the visit it was made at) and
        # re-applies their edits at visits still ahead: a no-edit fork of a fork replays it exactly
        overrides = normalize_overrides(
            json.loads(parent_row["params_json"]) if parent_row["params_json"] else {}
        )
        if params:
            overrides.setdefault(at, []).append([occurrence, dict(params)])
        done = {(s.node, s.occurrence) for s in prior} | {(at, occurrence)}
        replay_edits = self._lineage_edits(parent_row, done)
        ctx = ExecutionContext(
            self.store, fork_id, pipeline, use_cache=use_cache,
            dry_run_side_effects=not allow_side_effects, allow_side_effects=allow_side_effects,
            param_overrides=overrides, parent_steps=parent_by_key,
            parent_id=parent_row["id"], prior_steps=[], on_step=on_step,
        )
        ctx.replay_edits = replay_edits
        if use_cache:
            ctx.cache_prefetch = self.store.cache_get_many(
                [(s.node, s.input_hash) for s in steps[index:] if s.status != "failed"]
            )
        persister = self.store.persister()
        builder = base_builder(ctx, fork_id).initialize_from(
            persister,
            resume_at_next_action=True,
            default_state={},
            default_entrypoint=pipeline.entrypoint,
            fork_from_app_id=source_app,
            fork_from_partition_key=PARTITION_KEY,
            fork_from_sequence_id=source_seq,
            override_state_values=edit or None,
        )
        started = time.perf_counter()
        app = builder.build()
        pointer = app.parent_pointer
        if pointer is None or pointer.app_id != source_app or pointer.sequence_id != source_seq:
            raise ForkError(
                f"Burr did not attach the fork to run {run_id} (state {source_app}@{source_seq} "
                "not found); nothing was written"
            )
        nxt = app.get_next_action()
        if nxt is None or nxt.name != at:
            resumes = repr(nxt.name) if nxt else "nothing"
            why = (
                f"run {run_id} stopped before reaching {at!r}; its next node is {resumes}"
                if index == len(steps) else
                f"with these edits Burr would resume at {resumes}, not {at!r} (a transition "
                "reads an edited field)"
            )
            raise ForkError(f"{why}; nothing was written")
        loaded_refs = dict(getattr(persister, "last_loaded_refs", {}) or {})
        ctx.state_hashes.update(loaded_refs)
        if edit:
            ctx.absorb(edit)
        start_state = {k: v for k, v in app.state.get_all().items() if not k.startswith("__")}

        inherited_rows = []
        reason = f"inherited from run {parent_row['id']}"
        for i, (raw, s) in enumerate(zip(parent_rows[:index], prior)):
            inherited_rows.append(pointer_row(raw, fork_id, i))
            ctx.steps.append(dataclasses.replace(
                s, status="inherited", run_id=fork_id, index=i, tokens=0, prompt_tokens=0,
                completion_tokens=0, tokens_saved=0, latency_ms=0.0, reason=reason, error=None,
                source_run=s.run_id if s.status != "inherited" else s.source_run,
                _inputs=None, _outputs=None,
            ))
        ctx.occurrences.update(s.node for s in ctx.steps)
        row = {
            "id": fork_id, "pipeline": pipeline.name, "status": "running",
            "parent_id": parent_row["id"], "fork_node": at, "fork_occurrence": occurrence,
            "graph_id": pipeline.graph_id, "entrypoint": pipeline.entrypoint,
            "created_at": time.time(), "summary": parent_row["summary"],
            # type-preserving (serde), so an ancestor's edit replays with the values it had
            "edit_json": serde.encode(edit, "edit").decode("utf-8") if edit else None,
            "params_json": json.dumps(overrides, sort_keys=True, default=repr) if overrides else None,
            "allow_side_effects": int(bool(allow_side_effects)), "use_cache": int(bool(use_cache)),
            "start_seq": source_seq, "fork_index": index, **owner_fields(),
        }
        # The fork's rows are written with its first commit: before the first step that
        # executes, or at the end when every step is served from the cache.
        ctx.pending_run = row
        ctx.run_row = dict(row)
        ctx.pending_rows.extend(inherited_rows)
        before = prior[-1] if prior else None
        if edit or before is None or (before.state_app_id, before.sequence_id) != (source_app, source_seq):
            # The state the fork starts from, saved under its own id. Not needed (so not
            # stored) when it is unedited and is the state its inherited last step points at.
            self._save_start_state(ctx, fork_id, source_seq, at, start_state, flush=False)
        return execute(ctx, app, self._heartbeat, started)

    def _lineage_edits(self, run_row: dict, done: set) -> dict:
        """{(node, occurrence): edit} made by a run and its ancestors, nearest first, except
        at the visits in `done` (already part of the state a replay starts from)."""
        edits: dict = {}
        row, seen = run_row, set()
        while row is not None and row["id"] not in seen:
            seen.add(row["id"])
            if row["edit_json"] and row["fork_node"]:
                key = (row["fork_node"], int(row["fork_occurrence"] or 1))
                if key not in done:
                    edits.setdefault(key, serde.decode(row["edit_json"].encode("utf-8")))
            row = self.store.get_run_row(row["parent_id"]) if row["parent_id"] else None
        return edits

    def next_node(self, run_id: str) -> Optional[dict]:
        """For an interrupted run, the visit it never reached and could be forked at:
        {"node", "occurrence", "state"} (the state Burr saved before it); None otherwise."""
        row = self.store.get_run_row(str(run_id))
        if row is None:
            raise NotFound(f"no run {run_id!r} in {self.url}")
        if row["status"] != "interrupted":
            return None
        pipeline = self.pipeline(row["pipeline"])
        steps = steps_from_rows(self.store.get_node_rows(row["id"]), self.store, row["parent_id"])
        loaded = self.store.persister().load(PARTITION_KEY, *self._fork_source(row, steps, len(steps)))
        if loaded is None:
            return None
        state = loaded["state"]
        if loaded["status"] == "completed":
            nxt = pipeline.graph.get_next_node(loaded["position"], state, pipeline.entrypoint)
            name = nxt.name if nxt is not None else None
        else:  # a start state: Burr resumes at its position
            name = loaded["position"]
        if name is None:
            return None
        return {
            "node": name,
            "occurrence": sum(1 for s in steps if s.node == name) + 1,
            "state": {k: v for k, v in state.get_all().items() if not k.startswith("__")},
        }

    def resume(self, run_id: str, on_step: Optional[Callable[[Step], None]] = None) -> Run:
        """Continue an interrupted (or failed) run at its next node, through Burr."""
        row = self.store.get_run_row(str(run_id))
        if row is None:
            raise NotFound(f"no run {run_id!r} in {self.url}")
        if row["status"] not in ("interrupted", "failed"):
            raise InvalidRequest(f"run {run_id} is {row['status']}; only interrupted or failed runs resume")
        pipeline = self.pipeline(row["pipeline"])
        steps = steps_from_rows(self.store.get_node_rows(row["id"]), self.store, row["parent_id"])
        # a failed last step is retried: drop it from the trajectory we continue
        keep = [s for s in steps if s.status != "failed"]
        parent_steps = {}
        if row["parent_id"]:
            prow = self.store.get_run_row(row["parent_id"])
            parent_parent = prow["parent_id"] if prow else None
            parent_steps = {
                (s.node, s.occurrence): s
                for s in steps_from_rows(self.store.get_node_rows(row["parent_id"]), self.store,
                                         parent_parent)
            }
        ctx = ExecutionContext(
            self.store, row["id"], pipeline, use_cache=bool(row["use_cache"]),
            dry_run_side_effects=bool(row["parent_id"]) and not row["allow_side_effects"],
            allow_side_effects=bool(row["allow_side_effects"]),
            param_overrides=json.loads(row["params_json"]) if row["params_json"] else {},
            parent_steps=parent_steps, parent_id=row["parent_id"], prior_steps=keep,
            on_step=on_step,
        )
        index = len(keep)
        done = {(s.node, s.occurrence) for s in keep}
        if row["fork_node"]:
            done.add((row["fork_node"], int(row["fork_occurrence"] or 1)))
        ctx.replay_edits = self._lineage_edits(row, done)
        source_app, source_seq = self._fork_source(row, keep, index)
        persister = self.store.persister()
        state = persister.load(PARTITION_KEY, source_app, source_seq)
        if state is None:
            raise NotFound(f"run {run_id} has no saved state to resume from")
        ctx.state_hashes.update(getattr(persister, "last_loaded_refs", {}) or {})
        loaded = state["state"]
        builder = base_builder(ctx, row["id"]).with_state(loaded)
        if state["status"] == "completed":
            from burr.core.application import PRIOR_STEP

            builder = builder.with_state(**{PRIOR_STEP: state["position"]})
            builder = builder.with_entrypoint(pipeline.entrypoint)
        else:
            builder = builder.with_entrypoint(state["position"])
        app = builder.build()
        # Burr continues numbering after the last saved state
        app._set_sequence_id(int(state["sequence_id"]))  # noqa: SLF001 (Burr has no public setter)
        with self.store.transaction():
            self.store.execute("DELETE FROM nodes WHERE run_id = ? AND status = 'failed'", (row["id"],))
            self.store.update_run(row["id"], status="running", error=None, finished_at=None, **owner_fields())
        return execute(ctx, app, self._heartbeat, time.perf_counter())

    # comparing -----------------------------------------------------------------------------
    def diff(self, a: str, b: str, noise_samples: int = 0,
             on_progress: Optional[Callable] = None,
             noise_method: Optional[str] = None) -> TrajectoryDiff:
        """Align two trajectories. With `noise_samples=k`, each re-executed node of B is also
        re-sampled k times on A's inputs, and diverged rows are marked within/beyond noise."""
        from .diff import diff_runs

        run_a, run_b = self.get_run(a), self.get_run(b)
        d = diff_runs(run_a, run_b)
        if noise_samples:
            from .noise import apply_noise_band

            apply_noise_band(self, d, run_a, run_b, int(noise_samples), on_progress=on_progress,
                             method=noise_method)
        return d

    def audit(self, run_id: str, repeats: int = 3, on_progress: Optional[Callable] = None):
        from .audit import audit_run

        return audit_run(self, self.get_run(run_id), repeats, on_progress=on_progress)

    # maintenance ---------------------------------------------------------------------------
    def cache_stats(self) -> dict:
        return self.store.cache_stats()

    def purge_cache(self, older_than_days: float, dry_run: bool = False) -> int:
        if older_than_days is None or float(older_than_days) < 0:
            raise InvalidRequest("older_than_days must be >= 0")
        return self.store.purge_cache(float(older_than_days) * 86400, dry_run=dry_run)

    def alarms(self, node: Optional[str] = None) -> list:
        return self.store.alarms(node)

    def gc(self, older_than_days: float, dry_run: bool = False) -> dict:
        """Purge old cache entries and old runs by policy, then orphaned blobs; lineage of
        surviving runs keeps rendering. Returns counts of what was (or would be) removed."""
        from .maintenance import gc

        return gc(self, older_than_days, dry_run=dry_run)

    def export_run(self, run_id: str) -> dict:
        """A self-contained JSON document of a run with its lineage, for `import_run`."""
        from .maintenance import export_run

        return export_run(self, run_id)

    def import_run(self, document: dict) -> list:
        """Load a document from `export_run` (any backend); returns the run ids imported."""
        from .maintenance import import_run

        return import_run(self, document)
