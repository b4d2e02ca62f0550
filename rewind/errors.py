"""The RewindError family: every error Rewind raises on purpose is one of these."""


class RewindError(Exception):
    """Base class: a request Rewind refused or could not carry out; the message says what to do."""

    exit_code = 1

    def __init__(self, message: str = "", *, run_id=None, node=None, field=None):
        super().__init__(message)
        self.run_id, self.node, self.field = run_id, node, field


class NotFound(RewindError):
    """Raised when a run, node, pipeline or blob that was asked for does not exist."""


class InvalidRequest(RewindError):
    """Raised when a fork, run or query names a field, param or option the target does not have."""


class UnhashableValue(RewindError):
    """Raised when a value has no deterministic encoding (NaN, an object without one, bad Unicode)."""


class UndeclaredRead(RewindError):
    """Raised inside a step when the node reads a state key it did not declare in `reads`."""


class ForkError(RewindError):
    """Raised when Burr did not attach a fork to its parent or would resume at another node."""


class StoreError(RewindError):
    """Raised when the database cannot be opened, is of a newer schema, or is corrupt."""


class IntegrityError(StoreError):
    """Raised when a stored blob no longer matches its content hash."""


class ProviderError(RewindError):
    """Raised when the model provider is misconfigured or a model call failed for good."""
