"""The typed outputs of the MCP tools: one pydantic model per result, published to the client as
each tool's output schema and checked by the SDK against every structured result.

Values a pipeline stores (edits, params, field changes) are free-form JSON (`Any`); everything
else is typed. Shaped by `rewind.mcp.render`; only `rewind.mcp` imports this module (pydantic
comes with the `mcp` extra).
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, Field


class RunSummary(BaseModel):
    """One run as `list_runs` lists it (no steps loaded)."""

    id: str
    pipeline: str
    status: str
    parent_id: Optional[str] = Field(None, description="the run this one was forked from")
    fork_node: Optional[str] = None
    fork_occurrence: Optional[int] = None
    steps: int
    total_tokens: int
    tokens_saved: int
    latency_ms: float
    created_at: float = Field(description="seconds since the epoch")
    summary: str = ""
    error: Optional[str] = None


class RunList(BaseModel):
    runs: list[RunSummary]
    next_after: Optional[str] = Field(
        None, description="pass as `after` for the next page (None: this was the last page)")


class StepRow(BaseModel):
    """One step of a trajectory: what ran, why, and what it cost."""

    index: int = Field(description="the step's position in the run, from 1")
    node: str
    occurrence: int = Field(description="which visit of the node (loops visit a node again)")
    status: str = Field(description="executed | cached | inherited | dry-run | failed | ...")
    reason: str = Field(description="why the step ran again, was served from the cache, or was skipped")
    error: Optional[str] = None
    tokens: int
    tokens_saved: int
    latency_ms: float
    params: dict[str, Any]
    input_hash: Optional[str] = None
    output_hash: Optional[str] = None
    source_run: Optional[str] = Field(None, description="the run an inherited step comes from")
    model_calls: int
    inputs: list[str] = Field(description="the fields the node read (values: get_step)")
    outputs: list[str] = Field(description="the fields the node wrote (values: get_step)")


class Trajectory(BaseModel):
    """A run with its steps: `get_run`, `fork` and the rewind://runs/{id} resource."""

    id: str
    pipeline: str
    status: str
    parent_id: Optional[str] = None
    fork_node: Optional[str] = None
    fork_occurrence: Optional[int] = None
    edit: Any = Field(None, description="the fields a fork changed")
    params: Any = Field(None, description="the node parameters a fork changed")
    total_tokens: int = Field(description="tokens this run spent")
    saved: int = Field(description="tokens that cached and inherited steps spared it")
    latency_ms: float
    created_at: float
    finished_at: Optional[float] = None
    summary: str = ""
    error: Optional[str] = None
    steps: list[StepRow]


class ValuePage(BaseModel):
    """One value of a step as JSON text: whole, or the page from `offset` when it is large."""

    name: str = Field(description="inputs.FIELD, outputs.FIELD, runtime_inputs.NAME, calls[i] "
                                  "(a model call) or tools[i] (a tool call); pass as `field`")
    text: str = Field(description="the value's JSON text, from `offset`")
    offset: int
    total_chars: int
    truncated: bool = Field(description="true when the text stops before the value ends")
    next_offset: Optional[int] = Field(None, description="the `offset` of the next page")


class StepDetail(BaseModel):
    run_id: str
    step: StepRow
    values: list[ValuePage]
    note: str = ""


class PlanRowOut(BaseModel):
    node: str
    occurrence: int
    verdict: str = Field(description="re-run | may re-run | cached | dry-run | inherited")
    reason: str
    est_tokens: int


class ForkPlanOut(BaseModel):
    run_id: str
    at: str
    occurrence: int
    rows: list[PlanRowOut]
    est_tokens: int = Field(description="at most this many tokens")
    est_dollars: Optional[float] = Field(None, description="None: a model has no price")
    needs_confirmation: bool
    confirm_reasons: list[str]


class ForkOut(BaseModel):
    run: Trajectory
    parent_id: str
    side_effects: str = Field(description="always dry-run over MCP")


class DiffRowOut(BaseModel):
    node: str
    occurrence: int
    identical: Optional[bool] = Field(description="None: the step is on one side only")
    a_status: Optional[str] = None
    b_status: Optional[str] = None
    a_hash: Optional[str] = None
    b_hash: Optional[str] = None
    a_tokens: int = 0
    b_tokens: int = 0
    a_reason: str = ""
    b_reason: str = ""
    text_changes: dict[str, str] = Field(
        default_factory=dict, description="a unified diff of each changed text field")
    field_changes: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict, description="each changed field's changes: path, change, a, b")


class DiffOut(BaseModel):
    a: str
    b: str
    first_divergence: Optional[str] = None
    verdict: str
    tokens_a: int
    tokens_b: int
    cost_a: int
    cost_b: int
    cost_delta: int
    rows: list[DiffRowOut]


class BlameStep(BaseModel):
    index: int
    node: str
    occurrence: int
    resampled: bool
    trials: int
    successes: int
    success_rate: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    verdict: str = Field(description="decisive | recovers | locked | not tried")


class BlameOut(BaseModel):
    run_id: str
    samples: int
    strategy: str
    resample: list[str]
    decisive_node: Optional[str] = None
    decisive_occurrence: Optional[int] = None
    summary: str
    steps: list[BlameStep]
    trial_runs: list[str]
    tokens: int
    budget_exhausted: bool


class PipelineOut(BaseModel):
    name: str
    entrypoint: str
    nodes: list[str]
    description: str = ""


class PipelineList(BaseModel):
    pipelines: list[PipelineOut]
    with_runs: list[str] = Field(description="pipelines that have runs in this store")
    errors: dict[str, str] = Field(
        default_factory=dict, description="REWIND_PIPELINES entries that could not be loaded")
