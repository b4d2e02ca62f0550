"""Rewind: fork a finished Burr run at any node, change one input, replay only what it
reaches (unchanged nodes come from a content-addressed cache), and diff the trajectories."""

from .action import action, tool
from .api import MAX_SEARCH, Rewind, register_pipeline
from .engine import Pipeline
from .errors import (
    CommitError, CorpusError, ForkError, IntegrityError, InvalidRequest, NotFound, OperationError,
    ProviderError, ReadOnlyError, RewindError, StoreError, UndeclaredRead, UnhashableValue,
    UserError,
)
from .hashing import canonical_hash
from .metering import record_usage
from .serde import register_type
from .models import AuditReport, AuditRow, DiffRow, Run, RunStatus, Step, StepStatus, TrajectoryDiff

from . import llm  # noqa: E402  (rewind.llm.chat is part of the public contract)
from .batch import BatchReport, BatchRow  # noqa: E402

__all__ = [
    "action", "tool", "Rewind", "Pipeline", "register_pipeline", "MAX_SEARCH", "RewindError", "NotFound",
    "InvalidRequest", "UnhashableValue", "UndeclaredRead", "ForkError", "StoreError",
    "IntegrityError", "ProviderError", "canonical_hash", "record_usage", "Run", "Step",
    "TrajectoryDiff", "DiffRow", "AuditReport", "AuditRow", "llm", "register_type",
    "RunStatus", "StepStatus", "UserError", "OperationError", "CorpusError", "CommitError",
    "BatchReport", "BatchRow", "ReadOnlyError",
]
