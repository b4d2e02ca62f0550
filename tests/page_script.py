"""The script Streamlit's AppTest runs for one page, as the shell runs it: inside `run_app`'s flag,
so `shell.page_guard()` lets the page draw (tests/test_batch_page.py, tests/test_blame_page.py)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def page_script(name: str) -> str:
    """The AppTest script for `pages/<name>.py`."""
    page = ROOT / "pages" / f"{name}.py"
    return f"""
import runpy
from rewind_ui import shell
shell._inside.active = True
try:
    runpy.run_path({str(page)!r}, run_name="__page__")
finally:
    shell._inside.active = False
"""
