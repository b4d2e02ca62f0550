"""`SQLStore`: the concept modules composed into one store, opened and migrated.

Opening a store checks the schema version (one read; `migrations` runs DDL only when it is
behind, under the schema lock), then, when writable, marks runs whose process died as
`interrupted`, and those of this process a failed commit left `running` (`runs._UNFINISHED`).
A backend subclasses this with its connection and transaction.
"""

from __future__ import annotations

import logging

from .base import Store
from .blobs import SQLBlobs
from .burr_state import SQLStates
from .cache import SQLCache
from .graphs import SQLGraphs
from .migrations import ensure_schema
from .runs import SQLRuns
from .steps import SQLSteps

logger = logging.getLogger("rewind")


class SQLStore(SQLBlobs, SQLRuns, SQLSteps, SQLGraphs, SQLCache, SQLStates, Store):
    """The SQL every backend shares. Placeholders are written `?`; backends translate."""

    # errors of the driver that mean "the database cannot be written now" (a full disk, a
    # read-only file, a lock held too long): opening for reading carries on past them
    write_errors: tuple = ()

    def __init__(self, url: str, read_only: bool = False, read_only_reason: str = ""):
        self.url = url
        self.read_only = bool(read_only)
        self.read_only_reason = read_only_reason if read_only else ""
        self._init_connections()
        self._init_blob_memory()
        self.live_contexts: dict = {}  # app_id -> execution context (see base.LiveContext)
        ensure_schema(self)
        try:
            self.recover_interrupted()
        except self.write_errors as e:  # e.g. a full disk: still open, to read
            logger.warning("%s: could not mark dead runs interrupted (%s)", self.url, e)
        if not self.read_only:  # runs another handle of this process could not mark
            self.finish_unfinished()
