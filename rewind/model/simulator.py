"""`rewind.simulator`: the old name of the offline model, kept so existing imports keep working.

The model lives in the package `rewind.model.sim` (one concept per module: see its docstring). This
module re-exports its public names, resolves any other old name (`simulator._PROCESS_NONCE`,
`simulator._Chooser`) from the submodule that now owns it, and forwards assignments to that
submodule, so `monkeypatch.setattr(simulator, "_PROCESS_NONCE", ...)` still pins the sampling
the model really uses.
"""

from __future__ import annotations

import sys
import types

from .sim import *  # noqa: F401,F403  (the compatibility surface)
from .sim import __all__  # noqa: F401
from .sim import controls, model, prompt, sampling, tokens, wire, writers

_OLD_NAMES = {"_Chooser": "Chooser", "_Stream": "_Stream", "_WRITERS": "WRITERS",
              "_sample_key": "sample_key", "_bump": "bump"}
_OWNERS = (sampling, controls, tokens, prompt, writers, model, wire)


def _owner(name: str):
    for mod in _OWNERS:
        if name in vars(mod):
            return mod
    return None


def __getattr__(name: str):
    mod = _owner(_OLD_NAMES.get(name, name))
    if mod is None:
        raise AttributeError(f"module 'rewind.simulator' has no attribute {name!r} (see rewind.sim)")
    return getattr(mod, _OLD_NAMES.get(name, name))


class _Forwarding(types.ModuleType):
    def __setattr__(self, name: str, value) -> None:
        mod = _owner(_OLD_NAMES.get(name, name))
        if mod is not None:
            setattr(mod, _OLD_NAMES.get(name, name), value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Forwarding
