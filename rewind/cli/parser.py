"""The argument parser's parts every command uses: the parser class and the checked number and
text types (the commands are registered in `cli.commands`, which imports every command module;
this module imports none). A usage error is one line on stderr and exit code 2, like every other bad input.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Callable

EXIT_BAD_INPUT = 2


def prog_name() -> str:
    """`python -m rewind` when started that way, else `rewind` (the console script)."""
    argv0 = os.path.basename(sys.argv[0] if sys.argv else "")
    return "python -m rewind" if argv0 in ("__main__.py", "-m", "-c", "") else "rewind"


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own code for usage errors)
        sys.stderr.write(f"rewind: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(EXIT_BAD_INPUT)


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer from `lo` to `hi` (so no 10**30 reaches a SQL driver)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # also a number of more than 4300 digits
            raise argparse.ArgumentTypeError(f"expected an integer, not {text[:40]!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be from {lo} to {hi:,}, not {text[:40]}")
        return value

    parse.__name__ = "integer"
    return parse


def number_in(lo: float, hi: float) -> Callable[[str], float]:
    """An argparse type: a finite number from `lo` to `hi` (NaN would compare false to both)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, not {text[:40]!r}") from None
        if not math.isfinite(value) or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be a number from {lo:g} to {hi:g}, not {text[:40]}")
        return value

    parse.__name__ = "number"
    return parse


def text_up_to(limit: int) -> Callable[[str], str]:
    """An argparse type: text of at most `limit` characters (a search, not a document)."""

    def parse(text: str) -> str:
        if len(text) > limit:
            raise argparse.ArgumentTypeError(f"at most {limit:,} characters, not {len(text):,}")
        return text

    parse.__name__ = "text"
    return parse
