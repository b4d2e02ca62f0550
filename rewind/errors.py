"""The RewindError family: every error Rewind raises on purpose is one of these.

    RewindError                      exit 1; anything Rewind refused or could not carry out
    ├── UserError                    exit 2; the request was wrong: fix the input and retry
    │   ├── NotFound
    │   ├── InvalidRequest
    │   ├── UnhashableValue
    │   ├── UndeclaredRead
    │   └── ForkError
    └── OperationError               exit 1; a valid request failed: database, data or provider
        ├── StoreError
        │   ├── IntegrityError
        │   ├── ReadOnlyError
        │   ├── CommitError
        │   └── ObjectStoreError
        ├── ProviderError
        └── CorpusError

Catch `UserError` to tell bad input from a failure of the system; the CLI exits with
`err.exit_code`, so a new class only has to sit in the right branch. Every error takes keyword
context, `raise NotFound("no run 'x'", run_id="x")`, kept as attributes (`err.run_id`,
`err.node`, `err.field`, all None when not given); `str(err)` is the message alone, which must
already name the run, node or field and say what to do.
"""

from __future__ import annotations

from typing import Optional


class RewindError(Exception):
    """Base class: a request Rewind refused or could not carry out; the message says what to do."""

    exit_code = 1

    def __init__(self, *args: object, run_id: Optional[str] = None, node: Optional[str] = None,
                 field: Optional[str] = None):
        super().__init__(*args)
        self.run_id = run_id
        self.node = node
        self.field = field

    @property
    def context(self) -> dict:
        """The context given when raised, without the unset keys: {"run_id": ..., "node": ...}."""
        return {k: v for k, v in (("run_id", self.run_id), ("node", self.node),
                                  ("field", self.field)) if v is not None}


class UserError(RewindError):
    """Base of the errors a caller fixes by changing the request (CLI exit code 2)."""

    exit_code = 2


class NotFound(UserError):
    """Raised when a run, node, pipeline or blob that was asked for does not exist."""


class InvalidRequest(UserError):
    """Raised when a fork, run, query or flag names a field, param or value the target refuses."""


class UnhashableValue(UserError):
    """Raised when a value has no deterministic encoding (NaN, an object without one, bad Unicode)."""


class UndeclaredRead(UserError):
    """Raised inside a step when the node reads a state key it did not declare in `reads`."""


class ForkError(UserError):
    """Raised when Burr did not attach a fork to its parent or would resume at another node."""


class OperationError(RewindError):
    """Base of the errors of a valid request the system could not carry out (CLI exit code 1)."""

    exit_code = 1


class StoreError(OperationError):
    """Raised when the database cannot be opened, is of a newer schema, or is corrupt."""


class IntegrityError(StoreError):
    """Raised when a stored blob no longer matches its content hash."""


class ReadOnlyError(StoreError):
    """Raised when a run, fork or purge is asked of a store open read-only; nothing ran."""


class ObjectStoreError(StoreError):
    """Raised when the object store holding large values cannot be reached, read or written."""


class CommitError(StoreError):
    """Raised when a commit failed twice (a reconnect between); what was committed stays intact."""


class ProviderError(OperationError):
    """Raised when the model provider is misconfigured or a model call failed for good."""


class CorpusError(OperationError):
    """Raised when the demo's corpus index (rewind.pipelines.corpus) cannot be built or opened."""
