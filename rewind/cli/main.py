"""The entry point: parse, run one command, turn what went wrong into one line and an exit code.

The exit code of a refusal is the error's own `exit_code` (2 for a `UserError`, 1 for an
`OperationError`), so a new error class needs no edit here. `main(argv)` returns the code rather
than exiting, so tests and other programs can call it in-process.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional, Sequence

from ..errors import InvalidRequest, RewindError
from .output import TerminalSafe, one_line, terminal_safe
from .commands import build_parser

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


def _report(message: str) -> None:
    sys.stderr.write(f"rewind: error: {terminal_safe(one_line(message))}\n")
    sys.stderr.flush()


def _tolerant(stream) -> None:
    # Stored text may hold characters the terminal's encoding cannot show (or lone surrogates a
    # non-UTF-8 argv produced): print them escaped rather than die mid-table.
    try:
        stream.reconfigure(errors="backslashreplace")
    except (AttributeError, ValueError, OSError):
        pass


def _broken_pipe() -> int:
    # stdout went away (| head): stop quietly, and keep Python from complaining at exit
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI on `argv` (default: sys.argv[1:]); returns the exit code."""
    try:
        args = build_parser().parse_args(list(argv) if argv is not None else None)
    except SystemExit as e:  # --help, or a usage error already reported on one line
        return e.code if isinstance(e.code, int) else EXIT_FAILED
    debug = os.environ.get("REWIND_DEBUG", "").strip() not in ("", "0", "false")
    burr_log = logging.getLogger("burr")
    burr_level = burr_log.level
    burr_log.setLevel(logging.CRITICAL)  # a failed node is reported by Rewind, once
    logging.basicConfig(level=logging.WARNING, format="rewind: %(levelname)s: %(message)s")
    _tolerant(sys.stdout)
    out = TerminalSafe(sys.stdout)
    try:
        if args.db is not None and not args.db.strip():
            # an empty --db (often an unset shell variable) must not quietly mean ./rewind.db
            raise InvalidRequest("--db is empty: give a path, sqlite:///path or postgresql://…, "
                                 "or leave --db out for $REWIND_DB, else ./rewind.db",
                                 field="--db")
        from ..pipelines import builtin_pipelines

        builtin_pipelines()  # importing registers them process-wide
        return int(args.func(args, out) or EXIT_OK)
    except RewindError as e:
        if debug:
            raise
        _report(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("\nrewind: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _broken_pipe()
    except ImportError as e:
        if debug:
            raise
        _report(f"{e} (is that part of Rewind installed? `pip install -e .` in the checkout)")
        return EXIT_FAILED
    except OSError as e:
        if debug:
            raise
        _report(f"{type(e).__name__}: {e}")
        return EXIT_FAILED
    except Exception as e:  # a bug: one line by default, the traceback with REWIND_DEBUG=1
        if debug:
            raise
        _report(f"internal error: {type(e).__name__}: {e} (set REWIND_DEBUG=1 for the traceback)")
        return EXIT_FAILED
    finally:
        burr_log.setLevel(burr_level)
