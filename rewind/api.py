"""`Rewind`: the public handle. Pages, the CLI and user code call only this.

    rw = Rewind("rewind.db")
    run = rw.run(pipeline, {"topic": "..."})
    fork = rw.fork(run.id, at="critique", edit={"analysis": "..."})
    rw.diff(run.id, fork.id)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Optional

from .engine import (
    GLOBAL_PIPELINES, Heartbeat, NextVisit, Pipeline, fork_run, load_pipeline_spec, next_visit,
    register_pipeline, resume_run,  # noqa: F401  (register_pipeline: rewind.register_pipeline)
    start_run, steps_from_rows,
)
from .engine.plan import ForkPlan, plan_fork
from .integrations.live import LiveSinks
from .errors import InvalidRequest, NotFound, RewindError, StoreError
from .models import Run, RunStatus, Step, TrajectoryDiff
from .store import SQLStore, open_store

MAX_OFFSET = 2**62          # SQLite and PostgreSQL integers stop at 2**63
MAX_SEARCH = 1_000          # SQLite refuses LIKE patterns past 50,000 bytes; nobody types more


def _database_errors(method: Callable) -> Callable:
    """A driver error (a server gone, a locked or full database) leaves the handle as a
    `StoreError` naming the database, never a raw sqlite3/psycopg2 exception; the thread's
    connection is dropped so the next call reconnects."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        if self.store.unfinished():  # a failed commit left a run of this process `running`
            self.store.finish_unfinished()
        try:
            return method(self, *args, **kwargs)
        except RewindError:
            raise
        except Exception as e:
            if not isinstance(e, self.store.backend_errors):
                raise
            self.store.reset_connection()
            raise StoreError(f"the database {self.url} failed: {type(e).__name__}: {e}; check "
                             "that it is reachable and writable, then retry") from e
    return guarded


def _check_search(search: Any) -> None:
    if search is not None and len(str(search)) > MAX_SEARCH:
        raise InvalidRequest(f"a search is at most {MAX_SEARCH:,} characters, not "
                             f"{len(str(search)):,}", field="search")


class Rewind:
    """A handle on one store: run, fork, resume, diff and audit pipelines."""

    def __init__(self, url: Any = None, pipelines: Optional[list] = None, *,
                 owner: Optional[str] = None, admin: bool = False,
                 burr_tracking: Optional[str] = None, burr_project: Optional[str] = None,
                 otel: Optional[bool] = None, blobs: Optional[str] = None):
        """`owner` (a signed-in user's email): runs are recorded as theirs and other owners'
        runs are not found; with none, single-user mode (every run visible). `admin=True`
        sees every owner's runs and may purge the cache and run gc. `burr_tracking` (a
        directory; `REWIND_BURR_TRACKING`) writes every run in Burr's tracker layout for Burr's
        UI, `otel=True` (`REWIND_OTEL=1`) sends each run to OpenTelemetry as it records.
        `blobs` (`REWIND_BLOBS`): s3://bucket/prefix or file:///folder for large values."""
        if owner is not None and (not isinstance(owner, str) or not owner.strip()):
            raise InvalidRequest(f"owner must be a non-empty string (an email), not {owner!r}",
                                 field="owner")
        self.owner = owner.strip() if owner is not None else None
        self.admin = bool(admin)
        # the live sinks first: a refused option (an OTLP endpoint that is no http URL) leaves
        # no store open behind it
        self._sinks = LiveSinks.from_options(burr_tracking, burr_project, otel)
        try:
            self.store: SQLStore = open_store(url)
            if blobs is not None:
                self.store.use_objects(blobs)
        except BaseException:
            self._sinks.close()
            if hasattr(self, "store"):  # a refused `blobs` leaves no store open
                self.store.close()
            raise
        self.url = self.store.url
        self._pipelines: dict = {}
        self._loaded_specs: set = set()
        # REWIND_PIPELINES entries that could not be loaded: {entry: the error}, for a banner
        self.pipeline_errors: dict = {}
        self._heartbeat = Heartbeat(self.store)
        for p in pipelines or []:
            self.register(p)

    def close(self) -> None:
        self._heartbeat.stop()
        self._sinks.close()
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
        return {**GLOBAL_PIPELINES, **self._pipelines}

    def _load_env_pipelines(self) -> None:
        """Register `REWIND_PIPELINES` entries once each. A broken entry is kept in
        `pipeline_errors` (entry -> what went wrong) and every other pipeline still loads."""
        spec = os.environ.get("REWIND_PIPELINES", "")
        for part in filter(None, (s.strip() for s in spec.split(","))):
            if part in self._loaded_specs or part in self.pipeline_errors:
                continue
            try:
                for p in load_pipeline_spec(part):
                    if p.name not in self._pipelines:
                        self.register(p)
            except Exception as e:  # the user's module may raise anything while importing
                self.pipeline_errors[part] = f"{type(e).__name__}: {e}"
                continue
            self._loaded_specs.add(part)

    def pipeline(self, name_or_pipeline: Any) -> Pipeline:
        if isinstance(name_or_pipeline, Pipeline):
            known = self._pipelines.get(name_or_pipeline.name)
            if known is not name_or_pipeline:
                self.register(name_or_pipeline)
            return name_or_pipeline
        mine = self._pipelines.get(name_or_pipeline)
        if mine is not None:  # a handle's own pipeline wins over every other registration
            return mine
        registry = self.pipelines()
        try:
            return registry[name_or_pipeline]
        except KeyError:
            names = ", ".join(sorted(registry)) or "none"
            broken = "".join(f"; REWIND_PIPELINES entry {k!r} failed: {v}"
                             for k, v in self.pipeline_errors.items())
            raise NotFound(
                f"pipeline {name_or_pipeline!r} is not registered in this process (registered: "
                f"{names}); pass the Pipeline to rw.run/rw.register or list it in "
                f"REWIND_PIPELINES{broken}"
            ) from None

    # reading -------------------------------------------------------------------------------
    def get_run(self, run_id: str) -> Run:
        row = self._run_row(run_id)
        steps = steps_from_rows(self.store.get_node_rows(row["id"], row["parent_id"]), self.store,
                                row["parent_id"])
        self._inherited_costs(row, steps)
        return Run.from_row(row, steps=steps)

    def resolve_run_id(self, prefix: str) -> str:
        """The full id of the run `prefix` names: an exact id, or a unique prefix (4+ characters)
        of a run this handle may see. NotFound for none; InvalidRequest listing the matches."""
        return self.store.resolve_run_id(prefix, owner=self._owner_filter)

    def _inherited_costs(self, row: dict, steps: list) -> None:
        """Give inherited steps the cost they had in the run they come from (rewind.costs).
        Walked up the lineage in a loop, then down from the oldest ancestor: a fork of a fork
        thousands deep is no recursion."""
        chain = [(row, steps)]
        while True:
            row, steps = chain[-1]
            if not any(s.status == "inherited" for s in steps) or not row["parent_id"]:
                break
            parent_row = self.store.get_run_row(row["parent_id"])
            if parent_row is None:  # purged: the cost is not known any more
                break
            chain.append((parent_row, steps_from_rows(
                self.store.get_node_rows(parent_row["id"], parent_row["parent_id"]),
                self.store, parent_row["parent_id"])))
        for (_, child), (_, parent) in zip(reversed(chain[:-1]), reversed(chain[1:])):
            for s in child:
                if s.status == "inherited" and s.index < len(parent):
                    s.inherited_cost = parent[s.index].cost

    def list_runs(self, pipeline: Optional[str] = None, status: Optional[str] = None,
                  parent_id: Optional[str] = None, search: Optional[str] = None,
                  limit: int = 50, offset: int = 0, forks_only: bool = False,
                  after: Any = None) -> list:
        """Run summaries (no steps loaded), newest first (created_at, then id, descending).

        `search` matches a substring of the id, the summary or the pipeline name (SQLite: ASCII
        letters in any case; PostgreSQL: case as typed). Paging: `after=` the last run of the
        previous page (its id, or the Run) starts right after it, at the cost of one page
        however deep (keyset); `offset` skips that many rows (the deeper, the slower); both
        may be combined (`offset` then counts from the cursor)."""
        try:
            limit, offset = int(limit), int(offset)
        except (TypeError, ValueError):
            raise InvalidRequest(
                f"limit and offset must be non-negative integers, not {limit!r} and {offset!r}"
            ) from None
        if limit < 0 or offset < 0:
            raise InvalidRequest("limit and offset must be non-negative integers")
        if offset > MAX_OFFSET:
            raise InvalidRequest(f"offset {offset} is past any page there can be (at most "
                                 f"{MAX_OFFSET:,})", field="offset")
        _check_search(search)
        cursor = None
        if after is not None:  # keyset: (created_at, id) of the run `after` names
            run_id = after.id if isinstance(after, Run) else after
            if not isinstance(run_id, str) or not run_id:
                raise InvalidRequest(
                    f"after must be the id of the last run of the previous page (or that Run), "
                    f"not {after!r}", field="after")
            try:
                found = self.store.run_cursor(run_id)
            except InvalidRequest as e:  # not text a run id can be (a lone surrogate)
                raise InvalidRequest(f"after: {e}", field="after") from None
            if found is None or not self._may_see({"owner": found[2]}):
                raise InvalidRequest(
                    f"after: no run {run_id!r} in {self.url} to page after (deleted since?); "
                    "pass the id of the last run of the previous page, or page from the first",
                    field="after", run_id=run_id)
            cursor = (found[0], found[1])
        rows = self.store.list_run_rows(
            limit=min(int(limit), 10_000), offset=int(offset), pipeline=pipeline, status=status,
            parent_id=parent_id, search=search, forks_only=forks_only, owner=self._owner_filter,
            after=cursor,
        )
        return [Run.from_row(r) for r in rows]

    def count_runs(self, **filters: Any) -> int:
        """How many runs match the filters `list_runs` takes (paging aside)."""
        _check_search(filters.get("search"))
        return self.store.count_runs(**filters, owner=self._owner_filter)

    def stored_pipelines(self) -> list:
        """Names of the pipelines that have runs in this store (registered or not)."""
        return self.store.pipelines(owner=self._owner_filter)

    def lineage(self, run_id: str) -> dict:
        """Ancestors (oldest first) and direct children of a run; purged parents are named."""
        run = self._run_row(run_id)
        ancestors, seen = [], {run_id}
        parent = run["parent_id"]
        while parent and parent not in seen:
            seen.add(parent)
            row = self.store.get_run_row(parent)
            if row is not None and not self._may_see(row):
                row = None
            ancestors.insert(0, {"id": parent, "missing": row is None, "row": row})
            if row is None:
                break
            parent = row["parent_id"]
        return {"ancestors": ancestors,
                "children": self.store.children(run_id, owner=self._owner_filter)}

    def state_at(self, step: Step, skip: Iterable[str] = (), sizes: bool = False) -> Optional[dict]:
        """The whole state Burr saved after a step (but the fields in `skip`, never loaded);
        with `sizes`, {field: bytes as stored} of it instead, nothing loaded."""
        if step.sequence_id is None or step.state_app_id is None:
            return None
        if step.run_id is not None:
            self._run_row(step.run_id)
        if sizes:
            return self.store.state_sizes(step.state_app_id, step.sequence_id)
        return self.store.state_snapshot(step.state_app_id, step.sequence_id, skip)

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
    def run(self, pipeline: Any, state: Optional[dict] = None, *, inputs: Optional[dict] = None,
            halt_after: Optional[list] = None, halt_before: Optional[list] = None,
            use_cache: bool = True, on_step: Optional[Callable[[Step], None]] = None) -> Run:
        """Run a pipeline from its entrypoint on `state`. `inputs` are Burr runtime inputs
        (part of each step's key); a run that stops at a halt condition is `halted`. Cache hits
        are served unless `use_cache=False`. A failing node does not raise: the run comes back
        `failed`."""
        if state is not None and not isinstance(state, Mapping):
            raise InvalidRequest(f"state must be a dict of the pipeline's initial fields, not "
                                 f"a {type(state).__name__}", field="state")
        self.store.require_writable("run a pipeline")
        run = start_run(self.store, self._heartbeat, self.pipeline(pipeline), dict(state or {}),
                        inputs=inputs, halt_before=halt_before, halt_after=halt_after,
                        use_cache=use_cache, on_step=self._sinks.wrap(self, on_step),
                        owner=self.owner)
        return self._sinks.finished(self, run)

    def fork(self, run_id: str, at: str, edit: Optional[dict] = None,
             params: Optional[dict] = None, allow_side_effects: bool = False,
             occurrence: int = 1, use_cache: bool = True, *, inputs: Optional[dict] = None,
             on_step: Optional[Callable[[Step], None]] = None, resample: Any = (),
             resample_params: Optional[dict] = None) -> Run:
        """Fork a run at the `occurrence`-th visit of node `at`, change some of the fields it
        reads (`edit`), its own params or its runtime `inputs`, and replay what the change
        reaches; later steps get the runtime inputs recorded for them. `resample`: nodes that
        execute afresh from `at` on whatever their inputs (a blame trial), with
        `resample_params` on those that take them. Bad requests raise `RewindError` and write
        nothing."""
        self.store.require_writable("fork a run")
        with self.store.snapshot_reads():  # fork_run ends it when its execution starts
            parent_row = self._run_row(run_id)
            run = fork_run(self.store, self._heartbeat, self.pipeline(parent_row["pipeline"]),
                           parent_row, at, edit=edit, params=params, inputs=inputs,
                           allow_side_effects=allow_side_effects, occurrence=occurrence,
                           use_cache=use_cache, on_step=self._sinks.wrap(self, on_step),
                           owner=self.owner, resample=resample, resample_params=resample_params)
        return self._sinks.finished(self, run)

    def plan_fork(self, run_id: str, at: str, edit: Optional[dict] = None,
                  params: Optional[dict] = None, occurrence: int = 1, *,
                  inputs: Optional[dict] = None, allow_side_effects: bool = False) -> ForkPlan:
        """What `fork` with these arguments would re-run, keep cached or skip, and cost;
        writes nothing and calls no node."""
        parent_row = self._run_row(run_id)
        return plan_fork(self.store, self.pipeline(parent_row["pipeline"]), parent_row, at,
                         edit=edit, params=params, inputs=inputs, occurrence=occurrence,
                         allow_side_effects=allow_side_effects)

    def next_node(self, run_id: str) -> Optional[NextVisit]:
        """For an interrupted or halted run, the visit it never reached and could be forked
        at (`node`, `occurrence`, and the `state` Burr saved before it); None otherwise."""
        row = self._run_row(run_id)
        if row["status"] not in (RunStatus.INTERRUPTED, RunStatus.HALTED):
            return None
        return next_visit(self.store, self.pipeline(row["pipeline"]), row)

    def resume(self, run_id: str, *, inputs: Optional[dict] = None,
               halt_after: Optional[list] = None, halt_before: Optional[list] = None,
               on_step: Optional[Callable[[Step], None]] = None) -> Run:
        """Continue a halted, failed or interrupted run in place: the next chat turn with new
        `inputs`, or the failed step re-executed."""
        self.store.require_writable("resume a run")
        row = self._run_row(run_id)
        run = resume_run(self.store, self._heartbeat, self.pipeline(row["pipeline"]), row,
                         inputs=inputs, halt_before=halt_before, halt_after=halt_after,
                         on_step=self._sinks.wrap(self, on_step))
        return self._sinks.finished(self, run)

    def _run_row(self, run_id: str) -> dict:
        row = self.store.get_run_row(str(run_id))
        if row is None or not self._may_see(row):
            # another owner's run reads exactly like a missing one
            raise NotFound(f"no run {run_id!r} in {self.url}", run_id=str(run_id))
        return row

    def _may_see(self, row: dict) -> bool:
        return self.owner is None or self.admin or row.get("owner") == self.owner

    @property
    def _owner_filter(self) -> Optional[str]:
        """The owner every listing is narrowed to (None: all runs)."""
        return None if self.admin else self.owner

    def _require_admin(self, what: str) -> None:
        if self.owner is not None and not self.admin:
            raise InvalidRequest(f"only an admin may {what} (REWIND_ADMINS); {self.owner} is not one")

    # comparing -----------------------------------------------------------------------------
    def diff(self, a: str, b: str, noise_samples: int = 0,
             on_progress: Optional[Callable] = None,
             noise_method: Optional[str] = None) -> TrajectoryDiff:
        """Align two trajectories. With `noise_samples=k`, each re-executed node of B is also
        re-sampled k times on A's inputs, and diverged rows are marked within/beyond noise."""
        from .analysis.diff import diff_runs

        run_a, run_b = self.get_run(a), self.get_run(b)
        d = diff_runs(run_a, run_b)
        if noise_samples:
            from .analysis.noise import apply_noise_band

            apply_noise_band(self, d, run_a, run_b, int(noise_samples), on_progress=on_progress,
                             method=noise_method)
        return d

    def audit(self, run_id: str, repeats: int = 3, on_progress: Optional[Callable] = None):
        from .analysis.audit import audit_run

        return audit_run(self, self.get_run(run_id), repeats, on_progress=on_progress)

    def blame(self, run_id: str, outcome: Callable[[dict], bool], **kwargs: Any) -> Any:
        """The step that decided a failed run, by re-rolling it from its steps -> `BlameReport`
        (samples, strategy, resample, params, budget_tokens, on_progress: rewind.analysis.blame)."""
        from .analysis.blame import blame

        return blame(self, run_id, outcome, **kwargs)

    def blame_many(self, run_ids: Any, outcome: Callable[[dict], bool], **kwargs: Any) -> dict:
        """`blame` for each run (here, on a process pool with `workers=`, or on Ray), and how
        often each node was decisive (rewind.analysis.blame_many)."""
        from .analysis.blame_many import blame_many

        return blame_many(self, list(run_ids), outcome, **kwargs)

    def snapshot(self, run_id: str, path: Any, repeats: int = 3,
                 pipeline_spec: Optional[str] = None, force: bool = False) -> Any:
        """Write run `run_id` as a snapshot file that pytest replays offline (rewind.testing);
        over a file Rewind did not write only with `force=True`."""
        from .testing import snapshot

        self._run_row(run_id)
        return snapshot(self, run_id, path, repeats=repeats, pipeline_spec=pipeline_spec, force=force)

    def batch_fork(self, at: str, **kwargs: Any) -> Any:
        """One change replayed across many stored runs -> `BatchReport` (see rewind.batch)."""
        from .batch import batch_fork

        return batch_fork(self, at, **kwargs)

    # elsewhere -------------------------------------------------------------------------------
    def export_burr(self, run_id: str, directory: Any, project: str = "rewind",
                    force: bool = False) -> Any:
        """Write a stored run (and its ancestors) in Burr's tracker layout, for Burr's UI; over an
        app folder Rewind did not write only with `force=True`."""
        from .integrations.burr_tracking import export_burr

        self._run_row(run_id)
        return export_burr(self, run_id, directory, project, force=force)

    def import_burr(self, directory: Any, pipeline: Any, project: Optional[str] = None,
                    initial_state: Optional[dict] = None) -> Any:
        """Turn runs recorded by plain Burr's tracker into forkable Rewind runs."""
        from .integrations.burr_import import import_burr

        return import_burr(self, directory, pipeline, project, initial_state)

    def export_otel(self, run_id: str, endpoint: Optional[str] = None) -> Any:
        """Send a stored run to an OTLP/HTTP endpoint (GenAI semantic conventions)."""
        from .integrations.otel import export_otel

        self._run_row(run_id)
        return export_otel(self, run_id, endpoint=endpoint)

    # maintenance ---------------------------------------------------------------------------
    def cache_stats(self) -> dict:
        return self.store.cache_stats()

    def purge_cache(self, older_than_days: float, dry_run: bool = False) -> int:
        from .maintenance.gc import older_than

        self._require_admin("purge the cache")
        days = older_than(older_than_days)
        return self.store.purge_cache(days * 86400, dry_run=dry_run)

    def alarms(self, node: Optional[str] = None) -> list:
        alarms = self.store.alarms(node)
        if self._owner_filter is None:
            return alarms
        rows = self.store.get_run_rows([a["run_id"] for a in alarms if a.get("run_id")])
        return [a for a in alarms if a.get("run_id") in rows and self._may_see(rows[a["run_id"]])]

    def gc(self, older_than_days: float, dry_run: bool = False) -> dict:
        """Purge old cache entries and old runs by policy, then orphaned blobs; lineage of
        surviving runs keeps rendering. Returns counts of what was (or would be) removed."""
        from .maintenance import gc

        self._require_admin("run gc")
        return gc(self, older_than_days, dry_run=dry_run)

    def export_run(self, run_id: str) -> dict:
        """A self-contained JSON document of a run with its lineage, for `import_run`."""
        from .maintenance import export_run

        self._run_row(run_id)
        return export_run(self, run_id)

    def import_run(self, document: dict) -> list:
        """Load a document from `export_run` (any backend); returns the run ids imported."""
        from .maintenance import import_run

        self._require_admin("import runs")
        return import_run(self, document)


for _name, _method in list(vars(Rewind).items()):
    if callable(_method) and not _name.startswith("_") and _name not in ("close", "register"):
        setattr(Rewind, _name, _database_errors(_method))
