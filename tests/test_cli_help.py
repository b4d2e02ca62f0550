"""Every positional argument and option of every subcommand says what it is in `--help`.

Seen in the first ten minutes (issue 41): `rewind fork --help` listed `RUN` and `--at NODE`
with no word on what they take, so a user could not tell that RUN may be a prefix of an id.
"""

from __future__ import annotations

import argparse

from rewind.cli import main
from rewind.cli.commands import build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict:
    found = {}
    for action in parser._actions:  # noqa: SLF001  (argparse keeps no public list)
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            found.update(action.choices)
    return found


def test_every_argument_of_every_command_has_help():
    parser = build_parser("rewind")
    commands = _subparsers(parser)
    assert {"fork", "show", "import-burr", "batch", "serve-llm"} <= set(commands)
    missing = []
    for name, sub in [("(global)", parser), *sorted(commands.items())]:
        for action in sub._actions:  # noqa: SLF001
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):  # noqa: SLF001
                continue
            if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, "no help text: " + ", ".join(missing)


def test_fork_help_says_what_run_and_at_take(capsys):
    assert main(["fork", "--help"]) == 0
    text = capsys.readouterr().out
    assert "unique prefix" in text  # RUN
    assert "the node to fork at" in text  # --at
