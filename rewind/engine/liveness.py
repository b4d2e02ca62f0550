"""Who owns a running run, and proof that it is still alive.

A run row names its owner process (host, pid, process start time) and carries a heartbeat
updated every 15 s while the run is live, so another process on the same host (by pid) or on
another host (by the heartbeat lease) can tell a live run from one whose process died.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Optional

from ..store import HOST, this_process

logger = logging.getLogger("rewind")


def owner_fields() -> dict:
    """The run-row columns that say this process owns the run, as of now."""
    pid, started = this_process()
    return {"owner_host": HOST, "owner_pid": pid, "owner_started": started, "heartbeat_at": time.time()}


class Heartbeat:
    """One thread per store updating `heartbeat_at` of this process's running runs (the lease
    in `store.HEARTBEAT_LEASE_S`), for as long as it has live runs or runs an outage left to
    mark: then it ends (a process holding a thousand idle handles held a thousand threads,
    and their wake-ups starved the main thread of the interpreter lock), and the next run
    starts it again. `stop()` ends it for good (the handle closed)."""

    INTERVAL_S = 15.0

    def __init__(self, store: Any):
        self.store = store
        self.live: set = set()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()

    def add(self, run_id: str) -> None:
        with self._lock:
            self.live.add(run_id)
            if not self._stop.is_set() and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._loop, daemon=True, name="rewind-heartbeat")
                self._thread.start()

    def remove(self, run_id: str) -> None:
        with self._lock:
            self.live.discard(run_id)

    def _loop(self) -> None:
        while not self._stop.wait(self.INTERVAL_S):
            self.beat()
            with self._lock:
                if not self.live and not self.store.unfinished():  # nothing left to keep alive
                    self._thread = None
                    return

    def stop(self) -> None:
        self._stop.set()

    def beat(self) -> None:
        """One beat: the live runs' `heartbeat_at` now, and a run an outage left `running`
        marked `interrupted` once the database is back."""
        with self._lock:
            ids = list(self.live)
        self.store.finish_unfinished()
        if not ids:
            return
        try:
            now = time.time()
            with self.store.transaction():
                for run_id in ids:
                    self.store.update_run(run_id, heartbeat_at=now)
        except Exception:
            logger.debug("heartbeat failed", exc_info=True)
