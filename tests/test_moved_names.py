"""Issue 36: the restructure moved modules into `rewind.keys` and `rewind.model`; every name the
README shows, and every old module path, still imports, and as the very same object (never a
second copy of a module, which would split its state)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import rewind

MOVED = {
    "rewind.hashing": "rewind.keys", "rewind.paramkeys": "rewind.keys.fingerprint",
    "rewind.fingerprint": "rewind.keys.fingerprint", "rewind.filewatch": "rewind.keys.filewatch",
    "rewind.envwatch": "rewind.keys.envwatch", "rewind.objectparts": "rewind.keys.objectparts",
    "rewind.codeorigin": "rewind.keys.codeorigin", "rewind.serde": "rewind.store.serde",
    "rewind.llm": "rewind.model.chat", "rewind.llm_server": "rewind.model.server",
    "rewind.metering": "rewind.model.metering", "rewind.model_calls": "rewind.model.calls",
    "rewind.openai_meter": "rewind.model.capture", "rewind.simulator": "rewind.model.simulator",
    "rewind.sim": "rewind.model.sim", "rewind.sim.style": "rewind.model.sim.style",
}


def test_the_readme_names_import_from_the_root():
    assert callable(rewind.canonical_hash) and callable(rewind.llm.chat)
    assert callable(rewind.action) and callable(rewind.tool) and callable(rewind.register_type)
    assert rewind.record_usage is rewind.llm.record_usage
    from rewind.llm import chat, record_usage  # noqa: F401

    assert chat is rewind.llm.chat


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_an_old_module_path_is_the_new_module(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)
    module = importlib.import_module(new)
    assert module.__name__ == new  # its own name, not the alias it was reached by


def test_old_names_in_a_fresh_process_load_one_copy():
    # the alias first, then the new path: one module object, so one tokenizer, one registry
    code = ("import rewind.sim.style as a, rewind.model.sim.style as b, rewind.serde as c, "
            "rewind.store.serde as d; from rewind.hashing import param_hash, canonical_hash; "
            "print(a is b, c is d, a.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "rewind.model.sim.style"]


def test_an_unknown_module_under_an_old_name_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("rewind.sim.no_such_module")
