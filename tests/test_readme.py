"""README's "instrument your own Burr app" example runs as printed, offline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_example_runs_and_diverges_where_it_says(tmp_path):
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```python\n(# my_agent\.py.*?)```", readme, re.S).group(1)
    expected = re.search(r"# (\w+ \d+ \d+) \(offline simulator\)", block).group(1)
    (tmp_path / "my_agent.py").write_text(block)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REWIND_"))}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "my_agent.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
