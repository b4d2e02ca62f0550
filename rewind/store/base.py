"""The storage interface, as small abstract classes (in the style of Burr's persistence.py).

Each class names what one part of Rewind needs from a database; `Store` is all of them, what
`open_store` returns. The SQL implementations live beside this module, one concept each
(blobs, runs, steps, graphs, cache, burr_state), composed in `sqlstore.SQLStore`; a backend
(sqlite, postgres) adds its connection, its transaction and its schema lock.

    BlobStore    content-addressed values and docs, verified on read, repaired on write
    RunStore     run rows, listing and liveness (runs whose process died become interrupted)
    StepStore    step rows; inherited steps stored as pointers, resolved on read
    GraphStore   each pipeline graph once
    CacheStore   node cache, tool cache, nondeterminism alarms
    StateStore   Burr's saved states (rows that refer to blobs) and the Burr persister
    MaintenanceStore  scans, bulk deletes and rows as stored, for gc, export and import
    Store        all of the above, plus transactions, read-only mode and size
"""

from __future__ import annotations

import abc
from typing import Any, Iterable, Iterator, Optional, Protocol, Sequence


class BlobStore(abc.ABC):
    @abc.abstractmethod
    def put_blobs(self, blobs: dict) -> None:
        """Store {hash: encoded bytes}; overwrite a stored copy that no longer matches its hash."""

    @abc.abstractmethod
    def get_blobs(self, hashes: Iterable[str]) -> dict:
        """{hash: value}, each verified (IntegrityError) and present (NotFound)."""

    @abc.abstractmethod
    def existing_blobs(self, hashes: Sequence[str]) -> set: ...

    @abc.abstractmethod
    def get_docs(self, hashes: Iterable[str]) -> dict: ...

    @abc.abstractmethod
    def memo_doc(self, key: tuple, build) -> tuple: ...

    @abc.abstractmethod
    def values(self, refs: dict) -> dict: ...

    @abc.abstractmethod
    def forget_blobs(self) -> None: ...


class RunStore(abc.ABC):
    @abc.abstractmethod
    def insert_run(self, row: dict) -> None: ...

    @abc.abstractmethod
    def update_run(self, run_id: str, **fields: Any) -> None: ...

    @abc.abstractmethod
    def claim_run(self, run_id: str, from_statuses: Sequence[str], **fields: Any) -> bool:
        """Update the run only if its status is one of `from_statuses` (atomic)."""

    @abc.abstractmethod
    def run_cursor(self, run_id: str) -> Optional[tuple]:
        """(created_at, id, owner) of a run, where keyset paging continues after it."""

    @abc.abstractmethod
    def get_run_row(self, run_id: str) -> Optional[dict]: ...

    @abc.abstractmethod
    def get_run_rows(self, run_ids: Sequence[str]) -> dict: ...

    @abc.abstractmethod
    def resolve_run_id(self, prefix: str, owner: Optional[str] = None) -> str:
        """The run's id `prefix` names: an exact id, else a unique prefix of one (of `owner`'s
        runs when given); NotFound for none, InvalidRequest naming the matches for several."""

    @abc.abstractmethod
    def list_run_rows(self, limit: int = 50, offset: int = 0, **filters: Any) -> list: ...

    @abc.abstractmethod
    def count_runs(self, **filters: Any) -> int: ...

    @abc.abstractmethod
    def pipelines(self) -> list: ...

    @abc.abstractmethod
    def children(self, run_id: str) -> list: ...

    @abc.abstractmethod
    def recover_interrupted(self) -> list:
        """Mark runs whose owner is gone as `interrupted`; return their ids."""


class StepStore(abc.ABC):
    @abc.abstractmethod
    def insert_nodes(self, rows: list) -> None: ...

    @abc.abstractmethod
    def get_node_rows(self, run_id: str, parent_id: Any = False) -> list:
        """A run's step rows in order, inherited pointers resolved."""

    @abc.abstractmethod
    def raw_node_rows(self, run_id: str) -> list:
        """A run's step rows as stored (pointers left as they are)."""

    @abc.abstractmethod
    def get_node_rows_for_runs(self, run_ids: Sequence[str]) -> dict: ...

    @abc.abstractmethod
    def delete_failed_steps(self, run_id: str) -> int:
        """Drop a run's failed step rows (a resume re-executes them); returns how many."""


class GraphStore(abc.ABC):
    @abc.abstractmethod
    def put_graph(self, graph_id: str, nodes: Sequence[str], edges: Sequence[tuple]) -> None: ...

    @abc.abstractmethod
    def get_graph(self, graph_id: str) -> tuple: ...


class CacheStore(abc.ABC):
    @abc.abstractmethod
    def cache_get(self, node: str, input_hash: str) -> Optional[dict]: ...

    @abc.abstractmethod
    def latest_cache_entry_like(self, node: str, shape_hash: str) -> Optional[dict]:
        """The newest entry of `node` for the same inputs under any code."""

    @abc.abstractmethod
    def cache_get_and_like(self, node: str, input_hash: str, shape_hash: str) -> tuple:
        """(`cache_get`, `latest_cache_entry_like`) at once: a miss names what changed."""

    @abc.abstractmethod
    def cache_get_many(self, keys: Sequence[tuple]) -> dict: ...

    @abc.abstractmethod
    def cache_prefetch(self, keys: Sequence[tuple]) -> dict: ...

    @abc.abstractmethod
    def cache_put(self, row: dict, keep_existing: bool = False) -> None: ...

    @abc.abstractmethod
    def cache_put_many(self, entries: Sequence[tuple]) -> None:
        """`cache_put` of each (row, keep_existing), in order, in as few statements as may be."""

    @abc.abstractmethod
    def cache_hits(self, keys: list) -> None: ...

    @abc.abstractmethod
    def cache_stats(self) -> dict: ...

    @abc.abstractmethod
    def purge_cache(self, older_than_s: float, dry_run: bool = False) -> int: ...

    @abc.abstractmethod
    def tool_cache_get(self, tool: str, args_hash: str, ttl: Optional[float], now: float): ...

    @abc.abstractmethod
    def tool_cache_put(self, tool: str, args_hash: str, result: Any, now: float) -> None: ...

    @abc.abstractmethod
    def add_alarm(self, node: str, input_hash: str, hash_a: str, hash_b: str, run_id: str) -> None: ...

    @abc.abstractmethod
    def alarms(self, node: Optional[str] = None) -> list: ...


class StateStore(abc.ABC):
    @abc.abstractmethod
    def persister(self):
        """This thread's Burr persister (state rows that refer to blobs)."""

    @abc.abstractmethod
    def load_state_refs(self, app_id: str, sequence_id: int) -> Optional[dict]: ...

    @abc.abstractmethod
    def resolve_state_doc(self, data: dict, position: Any, sequence_id: Any) -> dict: ...

    @abc.abstractmethod
    def has_state(self, app_id: str, sequence_id: int) -> bool: ...

    @abc.abstractmethod
    def insert_state_rows(self, rows: list) -> None: ...

    @abc.abstractmethod
    def replace_state_row(self, row: tuple) -> None: ...

    @abc.abstractmethod
    def state_snapshot(self, app_id: str, sequence_id: int,
                       skip: Iterable[str] = ()) -> Optional[dict]: ...

    @abc.abstractmethod
    def state_sizes(self, app_id: str, sequence_id: int) -> dict: ...


class MaintenanceStore(abc.ABC):
    """What gc, export and import need beyond the engine's calls: whole-table scans in pages,
    bulk deletes, and rows as stored (the statements stay here; the decisions in maintenance)."""

    @abc.abstractmethod
    def lock_for_gc(self) -> None: ...

    @abc.abstractmethod
    def run_ages(self) -> Iterable[tuple]: ...

    @abc.abstractmethod
    def delete_runs(self, run_ids: Iterable[str]) -> None: ...

    @abc.abstractmethod
    def runs_with_pointers(self) -> set: ...

    @abc.abstractmethod
    def replace_pointers(self, run_id: str, full_rows: list) -> None: ...

    @abc.abstractmethod
    def step_references(self) -> Iterable[tuple]: ...

    @abc.abstractmethod
    def state_references(self) -> Iterable[tuple]: ...

    @abc.abstractmethod
    def state_rows_of_apps(self, app_ids: Iterable[str]) -> list: ...

    @abc.abstractmethod
    def state_rows_at(self, app_id: str, sequence_id: int) -> list: ...

    @abc.abstractmethod
    def insert_state_if_absent(self, row: dict) -> None: ...

    @abc.abstractmethod
    def delete_states_of_apps(self, app_ids: Iterable[str]) -> None: ...

    @abc.abstractmethod
    def delete_state(self, partition_key: str, app_id: str, sequence_id: int, position: str) -> None: ...

    @abc.abstractmethod
    def count_cache_older(self, cutoff: float) -> tuple: ...

    @abc.abstractmethod
    def delete_cache_older(self, cutoff: float) -> None: ...

    @abc.abstractmethod
    def kept_cache_references(self, cutoff: float) -> Iterable[tuple]: ...

    @abc.abstractmethod
    def raw_blobs(self, hashes: Iterable[str]) -> dict: ...

    @abc.abstractmethod
    def corrupt_blobs(self) -> dict: ...

    @abc.abstractmethod
    def blob_sizes(self) -> Iterable[tuple]: ...

    @abc.abstractmethod
    def delete_blobs(self, hashes: Iterable[str]) -> None: ...

    @abc.abstractmethod
    def has_graph(self, graph_id: str) -> bool: ...

    @abc.abstractmethod
    def graph_rows(self, graph_id: str) -> list: ...

    @abc.abstractmethod
    def put_graph_rows(self, graph_id: str, rows: Sequence[tuple]) -> None: ...


class Store(BlobStore, RunStore, StepStore, GraphStore, CacheStore, StateStore, MaintenanceStore):
    url: str
    read_only: bool  # opened for reading only (a read-only file or folder): writes refuse

    @abc.abstractmethod
    def transaction(self) -> Iterator[Any]:
        """A context manager: everything inside commits together or not at all; nests."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def db_size_bytes(self) -> Optional[int]: ...


class LiveContext(Protocol):
    """What the Burr persister needs from the execution context of a run in this process
    (registered in `store.live_contexts[app_id]` while the run executes): the context hashes
    the state it already knows, and commits state rows together with the step rows."""

    pending_states: list
    new_blobs: dict  # {hash: bytes} queued for the next commit; a state row's doc joins it

    def state_refs(self, values: dict) -> dict: ...

    def must_commit(self) -> bool: ...

    def commit(self) -> None: ...
