"""What every command that touches the store shares: opening the `Rewind` handle `--db` names,
resolving `--pipeline` (a registered name or `package.module:attribute`), the `RUN` argument (a
run id or any unique prefix of one, resolved once to the full id), and the exit code of a run a
command started (0 when it completed, 1 otherwise).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..errors import InvalidRequest, NotFound
from .output import print_run

EXIT_OK, EXIT_FAILED = 0, 1
RUN_HELP = "a run id, or any unique prefix of one (at least 4 characters, as git takes a commit)"


def add_run_argument(sp: Any, name: str = "run", metavar: str = "RUN", help: str = RUN_HELP) -> None:
    """The positional run argument of a command; `run_id` turns what was typed into the id."""
    sp.add_argument(name, metavar=metavar, help=help)


def run_id(rw: Any, typed: str) -> str:
    """The full id of the run `typed` names (an id or a unique prefix): resolved once, so the
    command and everything it prints use the whole id. NotFound / InvalidRequest (exit 2)
    name the prefix and, when several runs match, them."""
    typed = typed.strip()  # pasted ids bring spaces
    try:
        return rw.resolve_run_id(typed)
    except NotFound:
        if typed == typed.lower():
            raise
        return rw.resolve_run_id(typed.lower())  # Rewind's own ids are lower-case hex


def open_rewind(args: Any):
    from ..api import Rewind

    try:
        return Rewind(args.db)
    except InvalidRequest as e:
        if e.field != "url":
            raise
        # the API names its argument; here the user typed --db
        raise InvalidRequest(f"--db: {e}", field="--db") from None


def finish_run(run: Any, out: Any, hint: Optional[Callable[[Any], list]] = None) -> int:
    """Print a run (and `hint`'s lines); exit 0 when it completed, 1 otherwise."""
    print_run(run, out)
    for line in (hint(run) if hint is not None else []):
        print(line, file=out)
    return EXIT_OK if run.status == "completed" else EXIT_FAILED


def resolve_pipeline(rw: Any, spec: str):
    """A registered name, or `package.module:attribute` naming exactly one Pipeline."""
    if ":" not in spec:
        return rw.pipeline(spec)
    from ..engine import load_pipeline_spec

    found = load_pipeline_spec(spec)
    if len(found) != 1:
        raise InvalidRequest(f"--pipeline {spec!r} names {len(found)} pipelines; name one",
                             field="--pipeline")
    return found[0]
