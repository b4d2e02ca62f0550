"""Burr's saved states (`burr_state`): Burr's own persister, subclassed so rows refer to blobs.

A state row holds the hash of its {field: blob hash} doc plus Burr's small internal keys, never
the values (see `rows` for the spellings), so a fork whose states equal its parent's adds small
rows only. While a run executes in this process, its execution context (`base.LiveContext`,
registered in `store.live_contexts`) hashes the state and commits state rows together with
step rows; without one, `save` hashes and commits by itself.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Optional

from burr.core import State

from . import serde
from ..keys import canonical_hash
from .base import StateStore
from .rows import (
    DOC_KEY, PARTITION_KEY, PRIOR_STEP_KEY, REFS_KEY, SEQUENCE_ID_KEY, STEP_DOC_KEY,
)
from .schema import BURR_TABLE, STATE_COLUMNS
from .sql import SQLBase

_KEY = "partition_key = ? AND app_id = ? AND sequence_id = ?"
_INSERT_STATE = (f"INSERT INTO {BURR_TABLE} (partition_key, app_id, sequence_id, position, state, "
                 "status) VALUES (?, ?, ?, ?, ?, ?)")
_STEP_DOC = json.dumps({STEP_DOC_KEY: "%s"}, separators=(",", ":"))


class SQLStates(SQLBase, StateStore):
    def attach_context(self, app_id: str, ctx: Any) -> None:
        """Route the persister's saves for `app_id` through a run's execution context."""
        self.live_contexts[app_id] = ctx

    def detach_context(self, app_id: str) -> None:
        self.live_contexts.pop(app_id, None)

    def load_state_refs(self, app_id: str, sequence_id: int) -> Optional[dict]:
        rows = self.query(f"SELECT state, position, sequence_id FROM {BURR_TABLE} WHERE {_KEY}",
                          (PARTITION_KEY, app_id, sequence_id))
        if not rows:
            return None
        data, position, seq = rows[0]
        data = json.loads(data) if isinstance(data, (str, bytes)) else data
        return self.resolve_state_doc(data, position, seq)

    def resolve_state_doc(self, data: dict, position: Any, sequence_id: Any) -> dict:
        """A state row's document in its resolved form {REFS_KEY: {field: hash}, internal keys}
        (a row holds the refs map by hash, in a blob; rows of the first layout inline)."""
        h = data.get(DOC_KEY) or data.get(STEP_DOC_KEY)
        if h is None:
            return data
        out = {k: v for k, v in data.items() if k not in (DOC_KEY, STEP_DOC_KEY)}
        if STEP_DOC_KEY in data:
            out[PRIOR_STEP_KEY] = position
            out[SEQUENCE_ID_KEY] = int(sequence_id)
        out[REFS_KEY] = dict(self.get_docs([h])[h])
        return out

    def max_sequence_id(self, app_id: str) -> Optional[int]:
        """The highest sequence id Burr saved for `app_id` (a failed attempt's included)."""
        rows = self.query(f"SELECT MAX(sequence_id) FROM {BURR_TABLE} WHERE partition_key = ? "
                          "AND app_id = ?", (PARTITION_KEY, app_id))
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def has_state(self, app_id: str, sequence_id: int) -> bool:
        return bool(self.query(f"SELECT 1 FROM {BURR_TABLE} WHERE {_KEY}",
                               (PARTITION_KEY, app_id, sequence_id)))

    def insert_state_rows(self, rows: list) -> None:
        """Rows of (partition_key, app_id, sequence_id, position, state, status)."""
        self.executemany(_INSERT_STATE, rows)

    def replace_state_row(self, row: tuple) -> None:
        """A sub-application's state row, replacing one at the same key: Burr names a
        MapStates/MapActions sub-application after its parent and item, so a second visit of
        the same node saves under the same key (plain Burr, which persists nothing there by
        default, runs on)."""
        self.execute(f"{_INSERT_STATE} ON CONFLICT (partition_key, app_id, sequence_id, position) "
                     "DO UPDATE SET state = excluded.state, status = excluded.status", row)

    def state_snapshot(self, app_id: str, sequence_id: int,
                       skip: Iterable[str] = ()) -> Optional[dict]:
        """The whole state Burr saved after a step, resolved from blobs (but the fields in
        `skip`, never loaded)."""
        data = self.load_state_refs(app_id, sequence_id)
        if data is None:
            return None
        skip = set(skip)
        values = self.values({k: h for k, h in data.get(REFS_KEY, {}).items() if k not in skip})
        values.update({k: v for k, v in data.items() if k != REFS_KEY})
        return values

    def state_sizes(self, app_id: str, sequence_id: int) -> dict:
        """{field: bytes as stored} of a saved state, from the rows alone (nothing loaded)."""
        data = self.load_state_refs(app_id, sequence_id)
        info = self.field_blob_info(dict((data or {}).get(REFS_KEY, {})))
        return {k: size for k, (size, _) in info.items()}

    # export, import, gc --------------------------------------------------------------------
    def state_rows_of_apps(self, app_ids: Iterable[str]) -> list:
        """Every saved state of these apps, as STATE_COLUMNS tuples, ordered."""
        return self.query_in(
            f"SELECT {', '.join(STATE_COLUMNS)} FROM {BURR_TABLE} WHERE app_id IN ({{marks}}) "
            "ORDER BY app_id, sequence_id, position",
            sorted(set(app_ids)),
        )

    def state_rows_at(self, app_id: str, sequence_id: int) -> list:
        return self.query(
            f"SELECT {', '.join(STATE_COLUMNS)} FROM {BURR_TABLE} WHERE app_id = ? AND "
            "sequence_id = ? ORDER BY position", (app_id, sequence_id))

    def state_references(self) -> Iterable[tuple]:
        """(partition_key, app_id, sequence_id, position, state) of every saved state, in pages."""
        return self.scan(f"SELECT partition_key, app_id, sequence_id, position, state FROM {BURR_TABLE}")

    def insert_state_if_absent(self, row: dict) -> None:
        """Insert an imported state row unless one is at its key already."""
        key = (row["partition_key"], row["app_id"], row["sequence_id"], row["position"])
        if self.query(f"SELECT 1 FROM {BURR_TABLE} WHERE {_KEY} AND position = ?", key):
            return
        self.execute(_INSERT_STATE, (*key, row["state"], row["status"]))
        # a row of a run already here may sit beside one at the same sequence id (another
        # position), which Burr's load by sequence id may then return instead
        self.forget_reads()

    def delete_states_of_apps(self, app_ids: Iterable[str]) -> None:
        self.execute_in(f"DELETE FROM {BURR_TABLE} WHERE partition_key = ? AND app_id IN ({{marks}})",
                        sorted(app_ids), (PARTITION_KEY,))

    def delete_state(self, partition_key: str, app_id: str, sequence_id: int, position: str) -> None:
        self.execute(f"DELETE FROM {BURR_TABLE} WHERE {_KEY} AND position = ?",
                     (partition_key, app_id, sequence_id, position))


class BlobRefPersisterMixin:
    """Burr persister behaviour shared by backends: a state row holds the hash of its refs map
    ({field: blob hash}, itself a content-addressed blob) plus Burr's small internal keys."""

    rewind_store: Any

    def save(self, partition_key, app_id, sequence_id, position, state, status, **kwargs):
        store = self.rewind_store
        ctx = store.live_contexts.get(app_id)
        read = getattr(ctx, "state_values", None)
        values = read(state) if read is not None else state.get_all()  # read, never mutated
        if ctx is not None:
            refs = ctx.state_refs(values)  # one per field but Burr's `__` ones
            blobs = ctx.new_blobs  # queued with the step rows this state row goes with
            if (len(values) - len(refs) == 2 and PRIOR_STEP_KEY in values
                    and SEQUENCE_ID_KEY in values):  # the usual two: no walk over the state
                internal = {PRIOR_STEP_KEY: values[PRIOR_STEP_KEY],
                            SEQUENCE_ID_KEY: values[SEQUENCE_ID_KEY]}
            else:
                internal = {k: v for k, v in values.items() if k.startswith("__")}
        else:
            internal = {k: v for k, v in values.items() if k.startswith("__")}
            refs, blobs = {}, {}
            for k, v in values.items():
                if k.startswith("__"):
                    continue
                refs[k] = canonical_hash(v, k)
                blobs[refs[k]] = serde.encode(v, k)
        doc_hash, doc_data = store.memo_doc(tuple(refs.items()), lambda: refs)
        blobs[doc_hash] = doc_data
        if internal == {PRIOR_STEP_KEY: position, SEQUENCE_ID_KEY: sequence_id}:
            doc = _STEP_DOC % doc_hash  # json.dumps({STEP_DOC_KEY: doc_hash}), a hex hash
        else:
            doc = json.dumps({DOC_KEY: doc_hash, **internal}, sort_keys=True, separators=(",", ":"))
        row = (partition_key if partition_key is not None else PARTITION_KEY, app_id, sequence_id,
               position, doc, status)
        if ctx is not None:
            # The context commits state rows together with their step rows; cheap steps share
            # a commit, and on_step hears of a step only once its commit is done.
            ctx.pending_states.append(row)
            if ctx.must_commit():
                ctx.commit()
            return
        with store.transaction():  # no execution of ours: a sub-application's step
            store.put_blobs(blobs)
            store.replace_state_row(row)

    def _stored(self, partition_key, app_id, sequence_id=None, **kwargs):
        """The row as Burr's own persister reads it (refs, not values)."""
        return super().load(partition_key, app_id, sequence_id, **kwargs)

    def load(self, partition_key, app_id, sequence_id=None, **kwargs):
        result = self._stored(partition_key, app_id, sequence_id, **kwargs)
        if result is None:
            return None
        result = dict(result)  # the row as Burr reads it may be remembered: never changed
        raw = self.rewind_store.resolve_state_doc(
            result["state"].get_all(), result["position"], result["sequence_id"])
        refs = raw.get(REFS_KEY, {})
        values = self.rewind_store.values(refs)
        values.update({k: v for k, v in raw.items() if k != REFS_KEY})
        self.last_loaded_refs = dict(refs)
        result["state"] = State(values)
        return result
