"""A bad REWIND_PIPELINES entry is reported by name, never breaks the other pipelines (issue 14)."""

from rewind import Rewind
from rewind.pipelines.research import pipeline as demo


def test_a_bad_entry_is_named_and_the_rest_still_load(tmp_path, monkeypatch):
    (tmp_path / "brokenmod.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "goodmod.py").write_text(
        "from tests_shapes_alias import *\n" if False else
        "import shapes\nPIPELINE = shapes.linear()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("REWIND_PIPELINES", "brokenmod:PIPELINE, nosuchmod:X, goodmod:PIPELINE")
    rw = Rewind(str(tmp_path / "r.db"), pipelines=[demo])
    names = set(rw.pipelines())
    assert {"research", "linear"} <= names
    assert set(rw.pipeline_errors) == {"brokenmod:PIPELINE", "nosuchmod:X"}
    assert "boom at import" in rw.pipeline_errors["brokenmod:PIPELINE"]
    run = rw.run("research", {"question": "How do Python generators work?"})
    assert run.status == "completed"
