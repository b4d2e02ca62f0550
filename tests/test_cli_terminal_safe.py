"""A run's data never drives the user's terminal: control characters are printed as \\uXXXX.

Seen by a stranger: a state value holding `ESC]0;pwned-title BEL ESC[2J ESC[31m` was written
raw by `rewind runs` (the summary) and `rewind show` (and NUL and BEL by `show --outputs`):
the terminal's title was set, the screen cleared, the colours changed. JSON output spells
control characters the same way, so it still parses to the recorded value.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rewind import Rewind
from tests.shapes import linear

HOSTILE = "\x1b]0;pwned-title\x07\x1b[2J\x1b[31mRED\x00\r over\x9b2J\x7f"
RAW = ("\x1b", "\x07", "\x00", "\r", "\x9b", "\x7f")


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "rewind.db")
    with Rewind(path) as rw:
        run = rw.run(linear(), {"topic": HOSTILE})
        assert run.status == "completed"
    return path, run.id


def _cli(path, *argv) -> str:
    done = subprocess.run([sys.executable, "-m", "rewind", "--db", path, *argv],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("utf-8")


@pytest.mark.parametrize("argv", [("runs",), ("show", "{id}"), ("show", "{id}", "--outputs")],
                         ids=["runs", "show", "show --outputs"])
def test_listings_print_control_characters_escaped(store, argv):
    path, run_id = store
    text = _cli(path, *[a.format(id=run_id) for a in argv])
    leaked = [repr(c) for c in RAW if c in text]
    assert not leaked, f"raw control characters reached the terminal: {leaked}"
    assert "\\u001b]0;pwned-title\\u0007" in text, text


def test_json_output_still_parses_to_the_recorded_value(store):
    path, run_id = store
    text = _cli(path, "show", run_id, "--json")
    assert not [c for c in RAW if c in text]
    doc = json.loads(text)

    def strings(value):
        if isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)
        elif isinstance(value, str):
            yield value

    assert HOSTILE in list(strings(doc)), "the recorded input did not parse back exactly"
