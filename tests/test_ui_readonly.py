"""A store the dashboard cannot write (a read-only file, a full disk) opens for reading, and the
dashboard says so (issue 12)."""

from __future__ import annotations

import os

from streamlit.testing.v1 import AppTest

from rewind import Rewind
from rewind.pipelines.research import pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_read_only_store_is_browsable_and_says_so(tmp_path, monkeypatch):
    db = tmp_path / "ro.db"
    with Rewind(str(db)) as rw:
        rw.run(pipeline, {"question": "How do Python generators work?"})
    monkeypatch.setenv("REWIND_DB", f"sqlite:///{db}?mode=ro")
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=60).run()
    assert not at.exception, at.exception
    assert any("read-only" in w.value for w in at.warning), [w.value for w in at.warning]
    assert any("generators" in str(getattr(e, "value", "")) for e in at.main) or at.dataframe
