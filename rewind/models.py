"""The public records: `Run`, `Step`, `TrajectoryDiff`, `AuditReport` and their rows."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from typing import Any, Optional

from .store import serde


class RunStatus(enum.StrEnum):
    """Where a run stands; a `str`, so it compares equal to (and stores as) its value."""

    RUNNING = "running"
    COMPLETED = "completed"
    HALTED = "halted"          # stopped at a halt_before/halt_after condition; resumable
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class StepStatus(enum.StrEnum):
    """How a step got its outputs."""

    EXECUTED = "executed"
    CACHED = "cached"
    DRY_RUN = "dry-run"
    FAILED = "failed"
    INHERITED = "inherited"


RUN_STATUSES = tuple(s.value for s in RunStatus)
STEP_STATUSES = tuple(s.value for s in StepStatus)


def _present(refs: dict) -> dict:
    return {k: h for k, h in refs.items() if isinstance(h, str)}


@dataclasses.dataclass
class Step:
    node: str
    status: str
    input_hash: Optional[str]
    output_hash: Optional[str]
    tokens: int = 0
    latency_ms: float = 0.0
    params: dict = dataclasses.field(default_factory=dict)
    reason: str = ""
    error: Optional[str] = None
    occurrence: int = 1
    index: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_saved: int = 0
    field_hashes: dict = dataclasses.field(default_factory=dict)
    sequence_id: Optional[int] = None
    state_app_id: Optional[str] = None
    run_id: Optional[str] = None
    source_run: Optional[str] = None
    started_at: Optional[float] = None
    input_refs: dict = dataclasses.field(default_factory=dict, repr=False)
    output_refs: dict = dataclasses.field(default_factory=dict, repr=False)
    # Burr runtime inputs the step ran with ({name: blob hash}); a fork replays them
    runtime_refs: dict = dataclasses.field(default_factory=dict, repr=False)
    units: dict = dataclasses.field(default_factory=dict, repr=False)   # code unit -> hash
    files: dict = dataclasses.field(default_factory=dict, repr=False)   # file read -> hash
    # the model calls the step made: model, messages, params, response text, tokens, latency
    calls: list = dataclasses.field(default_factory=list, repr=False)
    # the rewind.tool calls it made: name, started_at, latency_ms, cached, error, args, result
    tools: list = dataclasses.field(default_factory=list, repr=False)
    # an inherited step's cost in the run it comes from (see rewind.costs)
    inherited_cost: int = 0

    @property
    def cost(self) -> int:
        """What producing this step's outputs cost when they were produced (rewind.costs)."""
        from .costs import step_cost

        return step_cost(self)
    _loader: Any = dataclasses.field(default=None, repr=False, compare=False)
    # {field: (size, location)} of stored values, from their rows (store.field_blob_info)
    _sizer: Any = dataclasses.field(default=None, repr=False, compare=False)
    _inputs: Optional[dict] = dataclasses.field(default=None, repr=False, compare=False)
    _outputs: Optional[dict] = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def inputs(self) -> dict:
        """The values of the read fields the node ran on (loaded on first access)."""
        if self._inputs is None:
            self._inputs = self._load(_present(self.input_refs), "read") if self._loader else {}
        return self._inputs

    def _load(self, refs: dict, how: str) -> dict:
        from .errors import IntegrityError, NotFound

        try:
            return self._loader(refs)
        except (IntegrityError, NotFound) as e:  # which of this step's fields, not which blob
            fields = [k for k, h in refs.items() if h[:12] in str(e)] or sorted(refs)
            named = ", ".join(f"`{k}`" for k in fields)
            raise type(e)(f"field {named} that step {self.node!r} of run {self.run_id} {how}: "
                          f"{e}", run_id=self.run_id, node=self.node,
                          field=fields[0] if fields else None) from None

    def input_sizes(self) -> dict:
        """{field: bytes of its value as stored} of the read fields, from the rows alone: no
        value is loaded and no object fetched (a page decides from it what to load)."""
        return self._sizes(self.input_refs)

    def output_sizes(self) -> dict:
        """{field: bytes of its value as stored} of the written fields (see input_sizes)."""
        return self._sizes(self.output_refs)

    def _sizes(self, refs: dict) -> dict:
        if self._sizer is None:
            return {}
        return {k: size for k, (size, _) in self._sizer(refs).items()}

    def load_inputs(self, fields: Any) -> dict:
        """The values of some of the read fields (a plan loads only those it must hash)."""
        return self._load_some(self.input_refs, self._inputs, set(fields), "read")

    def load_outputs(self, fields: Any) -> dict:
        """The values of some of the written fields (a page loads a large one when asked)."""
        return self._load_some(self.output_refs, self._outputs, set(fields), "wrote")

    def _load_some(self, refs: dict, loaded: Optional[dict], fields: set, how: str) -> dict:
        if loaded is not None or not self._loader:
            return {k: v for k, v in (loaded or {}).items() if k in fields}
        return self._load({k: h for k, h in _present(refs).items() if k in fields}, how)

    @property
    def outputs(self) -> dict:
        """The values the node wrote (loaded on first access)."""
        if self._outputs is None:
            self._outputs = self._load(_present(self.output_refs), "wrote") if self._loader else {}
        return self._outputs

    @property
    def deleted(self) -> list:
        """Fields the step removed from the state (a null ref)."""
        return [k for k, h in self.output_refs.items() if h is None]

    @property
    def runtime_inputs(self) -> dict:
        """The Burr runtime inputs (`inputs=`) the step ran with, loaded on access."""
        return self._loader(self.runtime_refs) if (self._loader and self.runtime_refs) else {}

    @classmethod
    def built(cls, **fields: Any) -> "Step":
        """`Step(**fields)` for a caller that names every field but the three below, without
        the dataclass `__init__` (the recorder makes one per visit)."""
        step = object.__new__(cls)
        step.__dict__.update(inherited_cost=0, _inputs=None, _outputs=None, **fields)
        step.__post_init__()
        return step

    def __post_init__(self):
        if isinstance(self.status, str) and not isinstance(self.status, StepStatus):
            try:
                self.status = StepStatus(self.status)
            except ValueError:
                pass  # a status this version does not know is shown as stored

    def to_dict(self, values: bool = True) -> dict:
        d = {
            "node": self.node, "occurrence": self.occurrence, "status": self.status,
            "input_hash": self.input_hash, "output_hash": self.output_hash,
            "tokens": self.tokens, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "tokens_saved": self.tokens_saved,
            "latency_ms": self.latency_ms, "params": self.params, "reason": self.reason,
            "error": self.error, "field_hashes": self.field_hashes,
            "sequence_id": self.sequence_id, "source_run": self.source_run,
        }
        if values:
            d["inputs"] = self.inputs
            d["outputs"] = self.outputs
        return d


@dataclasses.dataclass
class Run:
    id: str
    pipeline: str
    status: str
    parent_id: Optional[str] = None
    fork_node: Optional[str] = None
    fork_occurrence: Optional[int] = None
    total_tokens: int = 0
    tokens_saved: int = 0
    latency_ms: float = 0.0
    steps: list = dataclasses.field(default_factory=list)
    created_at: float = 0.0
    finished_at: Optional[float] = None
    summary: str = ""
    step_count: int = 0
    error: Optional[str] = None
    edit: dict = dataclasses.field(default_factory=dict)
    params: dict = dataclasses.field(default_factory=dict)
    allow_side_effects: bool = False
    graph_id: Optional[str] = None
    entrypoint: Optional[str] = None

    @property
    def spent(self) -> int:
        """Tokens this run paid for."""
        return int(self.total_tokens or 0)

    @property
    def trajectory_cost(self) -> int:
        """What the whole trajectory would cost run fresh (every step at its recorded cost)."""
        return sum(s.cost for s in self.steps)

    @property
    def saved(self) -> int:
        """Trajectory cost minus spent: what cached and inherited steps spared this run."""
        return max(self.trajectory_cost - self.spent, 0)

    def step(self, node: str, occurrence: int = 1) -> Step:
        for s in self.steps:
            if s.node == node and s.occurrence == occurrence:
                return s
        raise KeyError(f"run {self.id} has no step {node}#{occurrence}")

    @property
    def executed_nodes(self) -> list:
        return [s.node for s in self.steps if s.status == "executed"]

    @classmethod
    def from_row(cls, row: dict, steps: Optional[list] = None) -> "Run":
        return cls(
            id=row["id"], pipeline=row["pipeline"], status=RunStatus(row["status"]),
            parent_id=row["parent_id"], fork_node=row["fork_node"],
            fork_occurrence=row["fork_occurrence"], total_tokens=int(row["total_tokens"] or 0),
            tokens_saved=int(row["tokens_saved"] or 0), latency_ms=float(row["latency_ms"] or 0),
            steps=steps if steps is not None else [], created_at=row["created_at"],
            finished_at=row["finished_at"], summary=row["summary"] or "",
            step_count=int(row["step_count"] or 0), error=row["error"],
            edit=serde.decode(row["edit_json"].encode("utf-8")) if row["edit_json"] else {},
            params=_merged_params(row["params_json"]),
            allow_side_effects=bool(row["allow_side_effects"]), graph_id=row["graph_id"],
            entrypoint=row["entrypoint"],
        )


def normalize_overrides(raw: Optional[dict]) -> dict:
    """A run's param overrides as {node: [[from_occurrence, {param: value}], ...]}; a plain
    {node: {param: value}} (as written before occurrences were recorded) starts at visit 1."""
    out: dict = {}
    for node, layers in (raw or {}).items():
        out[node] = [[int(a), dict(b)] for a, b in layers] if isinstance(layers, list) else [[1, dict(layers)]]
    return out


def overrides_at(overrides: dict, node: str, occurrence: int) -> dict:
    """The params a fork lineage set for this visit of `node`: a change made at visit k holds
    from visit k on, so a no-edit fork of a fork replays it exactly."""
    layers = overrides.get(node)
    if not layers:  # the usual case, asked twice a visit
        return {}
    merged: dict = {}
    for start, params in sorted(layers, key=lambda layer: layer[0]):
        if occurrence >= start:
            merged.update(params)
    return merged


def _merged_params(params_json: Optional[str]) -> dict:
    """{node: {param: value}} a run's lineage changed, for display (the engine applies each
    change from the visit it was made at)."""
    layered = normalize_overrides(json.loads(params_json) if params_json else {})
    return {node: overrides_at(layered, node, sys.maxsize) for node in layered}


@dataclasses.dataclass
class DiffRow:
    node: str
    occurrence: int
    a_hash: Optional[str]
    b_hash: Optional[str]
    identical: Optional[bool]
    a_status: Optional[str]
    b_status: Optional[str]
    a_tokens: int = 0
    b_tokens: int = 0
    a_latency_ms: float = 0.0
    b_latency_ms: float = 0.0
    a_reason: str = ""
    b_reason: str = ""
    a_cost: int = 0          # each side's recorded cost of the step (rewind.costs)
    b_cost: int = 0
    cost_delta: int = 0      # b_cost - a_cost; 0 where the step's inputs did not change
    text_diffs: dict = dataclasses.field(default_factory=dict)
    field_diffs: dict = dataclasses.field(default_factory=dict)
    noise: Optional[str] = None  # "beyond noise" | "within noise" | None
    noise_detail: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class TrajectoryDiff:
    a: str
    b: str
    rows: list
    first_divergence: Optional[str]
    tokens_a: int            # spent by A
    tokens_b: int            # spent by B
    tokens_saved_b: int = 0
    cost_a: int = 0          # trajectory cost of A
    cost_b: int = 0          # trajectory cost of B

    @property
    def cost_delta(self) -> int:
        """What B's trajectory costs more (or less) than A's; unchanged nodes count 0."""
        return sum(r.cost_delta for r in self.rows)

    @property
    def identical_count(self) -> int:
        return sum(1 for r in self.rows if r.identical)

    @property
    def diverged(self) -> list:
        return [r for r in self.rows if r.identical is False]

    @property
    def verdict(self) -> str:
        compared = [r for r in self.rows if r.identical is not None]
        if not self.diverged:
            return f"identical: {len(compared)} of {len(compared)} compared nodes match"
        return (
            f"diverged at {self.first_divergence}: {self.identical_count} of {len(compared)} "
            f"compared nodes identical"
        )


@dataclasses.dataclass
class AuditRow:
    node: str
    occurrence: int
    stable: Optional[bool]
    distinct_outputs: int
    unstable_fields: list
    status: str = ""
    samples: int = 0


@dataclasses.dataclass
class AuditReport:
    run_id: str
    repeats: int
    rows: list

    @property
    def unstable_nodes(self) -> list:
        return [r.node for r in self.rows if r.stable is False]
