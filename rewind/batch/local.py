"""The local executor: a pool of worker processes, each with its own store handle.

Workers are fresh interpreters (`python -m rewind.batch.worker`), not forks of the caller: a
store connection or a thread never crosses a fork, and whatever the caller's `__main__` is (a
script, pytest, Streamlit, a notebook) plays no part. They inherit the caller's environment and
its `sys.path` (as PYTHONPATH), so a pipeline spec the caller imports, they import.

Each worker holds one fork at a time and the pool knows which, so a worker that dies (killed,
out of memory, a crash in native code) loses exactly the fork in flight: that row is `failed`
naming the signal, a new worker takes its place, and the batch goes on. Re-running the batch
redoes that fork; every finished one is served from the cache.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any, Callable, Optional

from ..errors import OperationError
from .report import FAILED, BatchRow
from .worker import read_frame, write_frame

STDERR_TAIL = 600


def worker_env() -> dict:
    """The caller's environment, with its import path (minus the interpreter's own)."""
    own = {os.path.realpath(p) for p in sysconfig.get_paths().values() if p}
    own |= {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    extra = []
    for p in sys.path:
        real = os.path.realpath(p or os.getcwd())
        if not os.path.isdir(real) or real in own or "site-packages" in real \
                or "dist-packages" in real or any(real.startswith(o + os.sep) for o in own):
            continue
        extra.append(real)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(extra + [p for p in [env.get("PYTHONPATH")] if p]))
    return env


class _Worker:
    def __init__(self, request: Any, env: dict):
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rewind.batch.worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.stderr, env=env, cwd=os.getcwd(),
        )
        self.task: Optional[tuple] = None  # (index, run_id) in flight
        write_frame(self.proc.stdin, request)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, index: int, run_id: str) -> None:
        self.task = (index, run_id)
        write_frame(self.proc.stdin, run_id)

    def death(self) -> str:
        """Why the worker is gone: its signal or exit code, and the end of its stderr."""
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        self.stderr.seek(0)
        tail = self.stderr.read().decode("utf-8", "replace")[-STDERR_TAIL:].strip()
        return f"worker pid {self.pid} {how}" + (f" ({' '.join(tail.split())})" if tail else "")

    def stop(self) -> None:
        try:
            write_frame(self.proc.stdin, None)
            self.proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


def run_local(request: Any, run_ids: list, workers: int,
              on_row: Callable[[int, BatchRow], None],
              on_start: Optional[Callable[[list], None]] = None) -> None:
    """Fork every run on `workers` processes, calling `on_row(index, row)` as each finishes.
    `on_start(pids)` sees the worker pids once they are started (and again after a restart)."""
    env = worker_env()
    pending = list(enumerate(run_ids))[::-1]  # pop() takes them in order
    sel = selectors.DefaultSelector()
    pool: list = []
    restarts_left = workers + len(run_ids)

    def start() -> None:
        try:
            w = _Worker(request, env)
        except OSError as e:
            raise OperationError(f"could not start a batch worker process: {e}") from e
        pool.append(w)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        if on_start is not None:
            on_start([x.pid for x in pool])

    def feed(w: _Worker) -> None:
        if pending:
            w.send(*pending.pop())
        else:
            w.task = None

    try:
        for _ in range(max(1, min(workers, len(run_ids)))):
            start()
        for w in list(pool):
            feed(w)
        while any(w.task is not None for w in pool):
            for key, _ in sel.select():
                w = key.data
                ok, row = read_frame(w.proc.stdout)
                if ok:
                    index, _ = w.task
                    on_row(index, BatchRow.from_dict(row))
                    feed(w)
                    continue
                sel.unregister(w.proc.stdout)
                pool.remove(w)
                why = w.death()
                if w.task is not None:
                    index, run_id = w.task
                    on_row(index, BatchRow(run_id=run_id, outcome=FAILED, reason=(
                        f"{why} while forking run {run_id}; re-run the batch to redo this fork "
                        "(finished forks are served from the cache)")))
                w.stderr.close()
                if pending:
                    if restarts_left <= 0:
                        raise OperationError(f"batch workers keep dying ({why}); stopped")
                    restarts_left -= 1
                    start()
                    feed(pool[-1])
    finally:
        for w in pool:
            w.stop()
        sel.close()
