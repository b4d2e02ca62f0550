"""The Burr persister an application is built with: each call goes to the store's persister
of the thread making it.

Burr cascades an application's persister into the sub-applications that `MapStates`,
`MapActions` and recursive actions run on worker threads; a SQLite connection must not cross
threads, so the persister handed to Burr holds no connection of its own.
"""

from __future__ import annotations

from typing import Any, Optional

from burr.core.persistence import BaseStatePersister


class ThreadRoutedPersister(BaseStatePersister):
    """A Burr persister that delegates to `store.persister()` of the calling thread."""

    def __init__(self, store: Any):
        self._store = store

    @property
    def _here(self) -> Any:
        return self._store.persister()

    def initialize(self) -> None:
        self._here.initialize()

    def is_initialized(self) -> bool:
        return self._here.is_initialized()

    def load(self, partition_key: str, app_id: Optional[str], sequence_id: Optional[int] = None,
             **kwargs):
        return self._here.load(partition_key, app_id, sequence_id, **kwargs)

    def list_app_ids(self, partition_key: str, **kwargs) -> list:
        return self._here.list_app_ids(partition_key, **kwargs)

    def save(self, partition_key: str, app_id: str, sequence_id: int, position: str, state: Any,
             status: str, **kwargs) -> None:
        self._here.save(partition_key, app_id, sequence_id, position, state, status, **kwargs)

    @property
    def last_loaded_refs(self) -> dict:
        """{field: blob hash} of the state this thread's persister loaded last."""
        return dict(getattr(self._here, "last_loaded_refs", {}) or {})

    def copy(self) -> "ThreadRoutedPersister":  # Burr's cascade copies: nothing to copy
        return self
