"""The WAL checkpointer: copies a SQLite store's write-ahead log into the database file on a
thread of its own, so no step waits for a checkpoint's fsync.

SQLite checkpoints a WAL database inside the COMMIT that takes the log past
`wal_autocheckpoint` pages (1,000 by default). On this machine that checkpoint costs ~12 ms,
nearly all of it the fsync of the database file (1.1 ms with synchronous=OFF), and it lands
on whichever step happened to commit then: a first run of 8 nodes writes ~156 pages, so about
one run in six paid it. Here each writer connection raises its own threshold to a safety
valve (`VALVE_PAGES`) and, every `COMMITS_PER_CHECKPOINT` commits, wakes a thread that runs
a PASSIVE checkpoint on its own connection (it never blocks a writer or a reader; sqlite3
lets other threads run while it waits on the disk).

A PASSIVE checkpoint that overlaps a commit leaves the newest frames in the log, and SQLite
rewinds the log to its start only after a checkpoint that copied all of it; under writes with
no pause the log would only grow. So a pass is repeated (CATCH_UP_PASSES) while frames remain,
each copying what the last one's fsync let writers add, and the valve bounds the rest: past
VALVE_PAGES the committing connection checkpoints by itself, as SQLite always did. Measured on
2,000 back-to-back first runs here: median unchanged, p90 -44%, p99 -44%, mean -12%; the
slowest single run is not better (an fsync still blocks a writer's writes to the same files on
this file system: 0.76 s against 0.15 s once in 2,000).

What the thread does with SQLite it does holding `lock`: `os.fork()` waits for it (a child
must not inherit a thread stopped inside SQLite), and so does an explicit checkpoint
(`checkpoint`). An idle thread exits after IDLE_EXIT_S and is started again on demand.

A process that exits without closing its store (a short script that never calls
`Rewind.close()`) would leave everything it wrote in the log alone: a copy of the database
file would hold none of it. So at exit each store that committed since its last complete
checkpoint gets one more (TRUNCATE, on a connection of its own, waiting at most EXIT_WAIT_MS
for another process's reader or writer).
"""

from __future__ import annotations

import atexit
import logging
import os
import sqlite3
import threading
import weakref
from typing import Optional

COMMITS_PER_CHECKPOINT = 16  # ~300-500 pages of a recording, ~280 of no-edit forks
VALVE_PAGES = 8_192  # 32 MB of log at 4 KB pages: the writer's own autocheckpoint
IDLE_EXIT_S = 5.0
EXIT_WAIT_MS = 2_000  # a process's exit waits no longer for another's transaction
CATCH_UP_PASSES = 4  # a pass copies what the last one's fsync let writers add: fewer each time
logger = logging.getLogger("rewind")

_live: "weakref.WeakSet[WalCheckpointer]" = weakref.WeakSet()


class WalCheckpointer:
    """Checkpoints the WAL of the database at `path` off the committing thread."""

    def __init__(self, path: str, busy_timeout_ms: int):
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.lock = threading.Lock()  # held for every use of SQLite by the thread
        self._state = threading.Lock()  # guards _thread, _pid, _closed
        self._wake = threading.Event()
        self.passes = 0  # checkpoints the thread ran (tests wait on `checkpointed`)
        self.checkpointed = threading.Event()
        self._commits = 0
        self.unflushed = False  # committed since the last complete checkpoint
        self._thread: Optional[threading.Thread] = None
        self._pid = os.getpid()
        self._closed = False
        _live.add(self)

    def note_commit(self) -> None:
        """Called after each commit of a writer connection: every COMMITS_PER_CHECKPOINT
        commits, the thread is woken (started if it is not running)."""
        self.unflushed = True
        self._commits += 1
        if self._commits < COMMITS_PER_CHECKPOINT:
            return
        self._commits = 0
        with self._state:
            if self._closed:
                return
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._pid, self._thread, self._wake = os.getpid(), None, threading.Event()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="rewind-wal-checkpoint",
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    def checkpoint(self, connection, mode: str = "TRUNCATE") -> tuple:
        """Checkpoint now on `connection` (the caller's), with the thread held off; returns
        SQLite's (busy, log pages, checkpointed pages)."""
        with self.lock:
            return tuple(connection.execute(f"PRAGMA wal_checkpoint({mode})").fetchone())

    def close(self) -> None:
        """Stop the thread and close its connection (before the store closes its own, so the
        last connection to close can still remove the log). A store used again after its
        close starts a new one."""
        with self._state:
            self._closed = True
            thread = self._thread if self._pid == os.getpid() else None
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._state:
            self._closed, self._wake = False, threading.Event()

    def _loop(self) -> None:
        conn = None
        wake = self._wake
        try:
            while True:
                if not wake.wait(IDLE_EXIT_S):
                    with self._state:
                        if not wake.is_set():  # nobody woke it while it decided to go
                            self._thread = None
                            return
                wake.clear()
                if self._closed:
                    return
                with self.lock:
                    try:
                        if conn is None:
                            conn = self._open()
                        # again while commits made during the last pass's fsync remain: a
                        # log copied to its end is rewound by the next writer (not grown)
                        for _ in range(CATCH_UP_PASSES):
                            self.unflushed = False  # a commit from here on sets it again
                            _, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                            if done >= log:
                                break
                        else:
                            self.unflushed = True
                        self.passes += 1
                        self.checkpointed.set()
                    except sqlite3.Error as e:  # another checkpointer, a vanished file: later
                        logger.debug("background checkpoint of %s: %s", self.path, e)
        finally:
            if conn is not None:
                with self.lock:
                    conn.close()
            with self._state:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _open(self, busy_timeout_ms: Optional[int] = None) -> sqlite3.Connection:
        timeout = (busy_timeout_ms or self.busy_timeout_ms) / 1000
        conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def flush_at_exit(self) -> None:
        """Copy the log into the database file, if this process committed since the last
        complete checkpoint and the log is still there (a closed store's last connection
        has already copied and removed it)."""
        if not self.unflushed or self._pid != os.getpid():
            return
        try:
            if not os.path.getsize(self.path + "-wal"):
                return
        except OSError:
            return
        if not self.lock.acquire(timeout=EXIT_WAIT_MS / 1000):
            return  # the thread is inside a checkpoint of its own
        try:
            conn = self._open(EXIT_WAIT_MS)
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                self.unflushed = False
            finally:
                conn.close()
        except sqlite3.Error as e:  # exiting regardless: the log still holds every commit
            logger.warning("%s: the write-ahead log was not copied into the file at exit (%s); "
                           "it holds the data until the next open", self.path, e)
        finally:
            self.lock.release()


@atexit.register
def _flush_at_exit() -> None:
    for c in list(_live):
        c.flush_at_exit()


_held: list = []  # the locks _before_fork took, for _after_fork to give back


def _before_fork() -> None:
    for c in list(_live):
        c.lock.acquire()
        _held.append(c.lock)


def _after_fork() -> None:
    while _held:
        _held.pop().release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                        after_in_child=_after_fork)
