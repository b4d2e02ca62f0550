"""The error tree drawn in rewind/errors.py: its shape, exit codes, context and public names."""

from __future__ import annotations

import inspect
import pickle
import re

import pytest

import rewind
from rewind import errors

USER = ("NotFound", "InvalidRequest", "UnhashableValue", "UndeclaredRead", "ForkError")
SYSTEM = ("StoreError", "IntegrityError", "ProviderError", "CorpusError")


def classes() -> dict:
    return {name: obj for name, obj in vars(errors).items()
            if inspect.isclass(obj) and issubclass(obj, errors.RewindError)}


def test_every_error_sits_in_one_branch_with_its_exit_code():
    for name in USER:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.UserError) and cls.exit_code == 2, name
    for name in SYSTEM:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.OperationError) and cls.exit_code == 1, name
        assert not issubclass(cls, errors.UserError), name
    assert issubclass(errors.IntegrityError, errors.StoreError)
    for name, cls in classes().items():
        if cls is not errors.RewindError:
            assert issubclass(cls, (errors.UserError, errors.OperationError)), name


def test_the_docstring_draws_every_class_and_each_class_says_when_it_is_raised():
    drawn = set(re.findall(r"[─ ](\w+Error|NotFound|InvalidRequest|UnhashableValue|UndeclaredRead)\b",
                           errors.__doc__))
    assert drawn | {"RewindError"} == set(classes())
    for name, cls in classes().items():
        doc = cls.__doc__ or ""
        assert doc.strip() and "\n" not in doc.strip(), name


def test_context_is_kept_and_the_message_stays_plain():
    e = errors.NotFound("no run 'abc': list runs with `rewind runs`", run_id="abc", node="plan")
    assert str(e) == "no run 'abc': list runs with `rewind runs`"
    assert (e.run_id, e.node, e.field) == ("abc", "plan", None)
    assert e.context == {"run_id": "abc", "node": "plan"}
    bare = errors.StoreError("database is locked")
    assert (bare.run_id, bare.node, bare.field, bare.context) == (None, None, None, {})
    again = pickle.loads(pickle.dumps(errors.InvalidRequest("bad", field="--state")))
    assert type(again) is errors.InvalidRequest and str(again) == "bad" and again.field == "--state"


def test_context_is_keyword_only():
    with pytest.raises(TypeError):
        errors.RewindError("message", run_id="r", nonsense=1)


def test_every_old_name_still_imports_from_rewind_and_rewind_errors():
    for name in ("RewindError",) + USER + SYSTEM[:3]:
        assert getattr(rewind, name) is getattr(errors, name), name
