"""Who owns a running run: this host and process, and whether an owner is still alive.

A run row carries (owner_host, owner_pid, owner_started, heartbeat_at). On the same host the
owner's pid and start time decide (a reused pid is told apart by its start time); across
hosts a heartbeat younger than `HEARTBEAT_LEASE_S` does. `runs.recover_interrupted` applies it.
"""

from __future__ import annotations

import os
import socket
from typing import Optional

HEARTBEAT_LEASE_S = 60.0
HOST = socket.gethostname()


# This process's id, kept current by a fork hook (a syscall saved on every statement and run
# row): a process forked after importing Rewind (a forkserver, gunicorn --preload, a prefork
# worker) is its own owner, and the parent must not take the child's runs for its own.
_PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def current_pid() -> int:
    return _PID[0]


def this_process() -> tuple:
    """(pid, start time) of the calling process (see `_PID`)."""
    pid = _PID[0]
    started = _started.get(pid)
    if started is None:
        started = _started.setdefault(pid, process_started(pid))
    return pid, started


_started: dict = {}


def process_started(pid: int) -> Optional[float]:
    """The start time of a process (Linux clock ticks since boot), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return float(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int, started: Optional[float]) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return False  # a zombie: dead, only not yet reaped by its parent
    except (OSError, IndexError):
        pass
    now_started = process_started(pid)
    return started is None or now_started is None or abs(now_started - started) < 1e-6


def owner_is_gone(host: Optional[str], pid: Optional[int], started: Optional[float],
                  heartbeat: Optional[float], now: float) -> bool:
    """Is the process that owns a `running` run gone (so the run is `interrupted`)?"""
    if host == HOST and pid is not None:
        if (pid, started) == this_process():
            return False  # ours: a run in another thread of this process
        return not process_alive(int(pid), started)
    return heartbeat is None or now - heartbeat >= HEARTBEAT_LEASE_S
