"""Other processes for tests that need one (to kill it mid-write, or to see its writes from here).

A fresh interpreter spends ~1.2 s importing Rewind, most of it Burr loading its serde plugins
(pandas, langchain); a test that kills a busy writer five times paid that five times. Children
here are forked from a server that imported Rewind once per session (multiprocessing's
forkserver), so one starts in milliseconds. Each is still a real process: its own pid, its own
database connections opened after the fork, killable with SIGKILL, its environment exactly the
parent's at `start` (plus `env`), its stdout and stderr in files the test reads.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import sys
import tempfile
import types
from typing import Optional

PRELOAD = ["rewind", "rewind.engine", "rewind.store", "rewind.model.sim", "burr.core", "openai", "psycopg2", "pytest"]

_context = None


def _ctx():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _child(target: str, argv: list, env: dict, out_path: str, err_path: str) -> None:
    with open(out_path, "w") as out, open(err_path, "w") as err:  # the fds outlive the files
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(env)
    module, func = target.split(":")
    try:
        getattr(importlib.import_module(module), func)(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


class Child:
    """A started child: `poll`, `wait`, `kill` (SIGKILL) like `subprocess.Popen`, plus its output."""

    def __init__(self, process, out_path: str, err_path: str):
        self.process = process
        self.pid = process.pid
        self.out_path, self.err_path = out_path, err_path

    @property
    def returncode(self) -> Optional[int]:
        return self.process.exitcode

    def poll(self) -> Optional[int]:
        return self.process.exitcode

    def wait(self, timeout: float = 300) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise TimeoutError(f"child {self.pid} still running after {timeout} s")
        return self.process.exitcode

    def kill(self) -> None:
        if self.process.exitcode is None:
            os.kill(self.pid, signal.SIGKILL)

    def stdout(self) -> str:
        with open(self.out_path) as f:
            return f.read()

    def stderr(self) -> str:
        with open(self.err_path) as f:
            return f.read()


def start(target: str, argv: list, env: Optional[dict] = None) -> Child:
    """Start `target` ("module:function", called with `argv`) in a child process."""
    fd, out_path = tempfile.mkstemp(prefix="rewind-child-", suffix=".out")
    os.close(fd)
    fd, err_path = tempfile.mkstemp(prefix="rewind-child-", suffix=".err")
    os.close(fd)
    process = _ctx().Process(target=_child, daemon=True,
                             args=(target, list(argv), {**os.environ, **(env or {})}, out_path, err_path))
    # multiprocessing has a child re-import the parent's __main__; after an AppTest that is a
    # page script (pages/batch.py), which must not run in a writer process. A bare module
    # stands in while the child is launched.
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        process.start()
    finally:
        sys.modules["__main__"] = main
    return Child(process, out_path, err_path)


def run(target: str, argv: list, env: Optional[dict] = None, timeout: float = 300) -> Child:
    """Start `target` and wait for it to exit; the finished child."""
    child = start(target, argv, env)
    try:
        child.wait(timeout)
    finally:
        child.kill()
    return child
