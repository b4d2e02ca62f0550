"""The fork plan's guard (a stranger's finds): its estimate grows with what an edit adds to
the fields the re-run nodes read, so `REWIND_CONFIRM_TOKENS` fires for a large edit; a bad
`REWIND_CONFIRM_TOKENS` or `REWIND_PRICES` is one clear error, never silently ignored; and the
CLI's `fork` asks for `--yes` where the dashboard asks for its checkbox."""

from __future__ import annotations

import pytest

import rewind
from rewind import InvalidRequest
from rewind.cli import main
from tests.test_dash_truth import PIPELINE


@pytest.fixture
def rw(tmp_path, monkeypatch):
    monkeypatch.delenv("REWIND_CONFIRM_TOKENS", raising=False)
    monkeypatch.delenv("REWIND_PRICES", raising=False)
    rewind.register_pipeline(PIPELINE)  # the CLI's own handle finds it too
    handle = rewind.Rewind(str(tmp_path / "plan.db"), pipelines=[PIPELINE])
    yield handle
    handle.close()


def test_the_estimate_grows_with_what_the_edit_adds_and_errs_high(rw, monkeypatch):
    root = rw.run(PIPELINE, {"question": "Why is the sky blue?"})
    small = rw.plan_fork(root.id, at="answer", edit={"question": "Why is grass green?"})
    big_question = "Why is the sky blue? " + "Explain in detail. " * 2_000  # ~38,000 characters
    big = rw.plan_fork(root.id, at="answer", edit={"question": big_question})
    assert big.est_tokens >= small.est_tokens + len(big_question) // 8, (small.est_tokens, big.est_tokens)
    monkeypatch.setenv("REWIND_CONFIRM_TOKENS", str(small.est_tokens * 2))
    assert not rw.plan_fork(root.id, at="answer", edit={"question": "Why is grass green?"}).needs_confirmation
    again = rw.plan_fork(root.id, at="answer", edit={"question": big_question})
    assert again.needs_confirmation and "REWIND_CONFIRM_TOKENS" in " ".join(again.confirm_reasons)
    fork = rw.fork(root.id, at="answer", edit={"question": big_question})
    assert fork.spent <= big.est_tokens, (fork.spent, big.est_tokens)


@pytest.mark.parametrize("name,value,says", [
    ("REWIND_CONFIRM_TOKENS", "abc", "whole number"),
    ("REWIND_CONFIRM_TOKENS", "-5", "whole number"),
    ("REWIND_PRICES", '{"sim-small": [-1, -1]}', "not negative"),
    ("REWIND_PRICES", "[1]", "JSON like"),
    ("REWIND_PRICES", '{"m": [1]}', "JSON like"),
])
def test_a_bad_setting_is_one_clear_error(rw, monkeypatch, name, value, says):
    root = rw.run(PIPELINE, {"question": "Why is the sky blue?"})
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidRequest, match=name) as e:
        rw.plan_fork(root.id, at="answer", edit={"question": "Why?"})
    assert says in str(e.value) and "Traceback" not in str(e.value), str(e.value)


def test_the_cli_fork_asks_for_yes_when_the_plan_needs_a_confirmation(rw, monkeypatch, capsys):
    root = rw.run(PIPELINE, {"question": "Why is the sky blue?"})
    db = rw.url
    monkeypatch.setenv("REWIND_CONFIRM_TOKENS", "1")
    before = rw.count_runs()
    capsys.readouterr()
    code = main(["--db", db, "fork", root.id, "--at", "answer", "--edit", 'question="Why is grass green?"'])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "confirmation" in err and "--yes" in err and "REWIND_CONFIRM_TOKENS" in err, err
    assert rw.count_runs() == before
    code = main(["--db", db, "fork", "--quiet", root.id, "--at", "answer", "--yes",
                 "--edit", 'question="Why is grass green?"'])
    assert code == 0, capsys.readouterr().err
    assert rw.count_runs() == before + 1


def test_small_guards_name_what_was_wrong(tmp_path):
    """A folder given as the database, a base URL with a space, 1e400 typed as a JSON number,
    and an edit's size counted as typed (a stranger's finds)."""
    from rewind.errors import ProviderError, StoreError
    from rewind_ui.editors import FieldError, parse_value

    with pytest.raises(StoreError, match="is a folder"):
        rewind.Rewind(str(tmp_path))
    with pytest.raises(ProviderError, match="no spaces"):
        with rewind.llm.session_settings(base_url="http://127.0.0.1:8619/v1 X-Evil: 1"):
            pass
    with pytest.raises(FieldError, match="1e400"):
        parse_value("json", "1e400", "seed")
    assert parse_value("json", "1.5", "seed") == 1.5
    # a number inside an object is not the field itself; the page adds a sentence after it
    with pytest.raises(FieldError) as inside:
        parse_value("json", '{"a": [1, Infinity]}', "config")
    assert inside.value.message.startswith("holds Infinity") and "finite number there" in inside.value.message
    with pytest.raises(FieldError) as whole:
        parse_value("json", "-Infinity", "seed")
    assert whole.value.message.startswith("is -Infinity")
    with pytest.raises(FieldError) as bad:
        parse_value("json", "{", "config")
    assert bad.value.sentence.endswith("column 2.") and not bad.value.message.endswith(".")
    with rewind.Rewind(str(tmp_path / "p.db"), pipelines=[PIPELINE]) as rw:
        root = rw.run(PIPELINE, {"question": "Why is the sky blue?"})
        text = "line\n" * 1000
        assert rw.plan_fork(root.id, at="answer", edit={"question": text}).edit_chars == len(text)
