"""The command line as a whole: every command module registered on one parser, with the global
flags. Each command module has `add_commands(add)` and declares its own flags there, beside its
code; this is the one module that imports them all.
"""

from __future__ import annotations

import argparse
from typing import Callable, Optional

from . import batch, blame, compare, integrations, maintenance, mcp, runs, serve, snapshot
from .parser import Parser, prog_name


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    prog = prog or prog_name()
    p = Parser(
        prog=prog,
        description="Rewind: fork a finished LLM pipeline run at any node, change one input, "
                    "replay only what it reaches, and diff the trajectories.",
    )
    p.add_argument("--db", default=None, metavar="URL",
                   help="store: a path, sqlite:///path or postgresql://… "
                        "(default: $REWIND_DB, else ./rewind.db)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    def add(name: str, fn: Callable, help: str, quiet: bool = False) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        sp.set_defaults(func=fn, prog=prog)
        if quiet:
            sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
        return sp

    for module in (runs, compare, batch, blame, maintenance, serve, snapshot, integrations, mcp):
        module.add_commands(add)
    return p
