"""Rewind: fork a finished Burr run at any node, change one input, replay only what it
reaches (unchanged nodes come from a content-addressed cache), and diff the trajectories.

The packages (see docs/architecture.md): `keys` (what a node's key depends on),
`model` (model calls: chat, capture, metering, the call cache, the offline simulator),
`engine`, `store`, `analysis`, `batch`, `integrations`, `testing`, `maintenance`, `pipelines`,
`cli`. Modules that moved into `keys` and `model` keep their old names (`rewind.hashing`,
`rewind.sim`, `rewind.metering`, ...) as aliases of the module that now owns them.
"""

import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys

# old module name -> the module that owns it now (one module object under both names)
_MOVED = {
    "rewind.hashing": "rewind.keys", "rewind.paramkeys": "rewind.keys.fingerprint",
    **{f"rewind.{m}": f"rewind.keys.{m}" for m in (
        "fingerprint", "dynamicreach", "modulereads", "classfields", "objectparts", "bytecode",
        "codeorigin", "filewatch", "envwatch")},
    "rewind.serde": "rewind.store.serde", "rewind.llm": "rewind.model.chat",
    "rewind.llm_server": "rewind.model.server", "rewind.metering": "rewind.model.metering",
    "rewind.model_calls": "rewind.model.calls", "rewind.openai_meter": "rewind.model.capture",
    "rewind.simulator": "rewind.model.simulator", "rewind.sim": "rewind.model.sim",
}


class _MovedModules(_abc.MetaPathFinder, _abc.Loader):
    """`import rewind.sim.style` finds `rewind.model.sim.style`: the same module object."""

    def find_spec(self, name, path=None, target=None):
        for old in _MOVED:
            if name == old or name.startswith(old + "."):
                return _util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        old = next(o for o in _MOVED if spec.name == o or spec.name.startswith(o + "."))
        module = _importlib.import_module(_MOVED[old] + spec.name[len(old):])
        spec.loader_state = module.__spec__  # the import system stamps the old name on it
        return module

    def exec_module(self, module):
        # the module ran under its own name already: give it back its own name and spec
        real = module.__spec__.loader_state if module.__spec__ is not None else None
        if real is not None:
            module.__spec__, module.__name__ = real, real.name
            module.__loader__, module.__package__ = real.loader, real.parent


if not any(isinstance(f, _MovedModules) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _MovedModules())  # before the path finder, which would load a copy

from .action import action, tool  # noqa: E402
from .api import MAX_SEARCH, Rewind, register_pipeline  # noqa: E402
from .engine import Pipeline  # noqa: E402
from .errors import (  # noqa: E402
    CommitError, CorpusError, ForkError, IntegrityError, InvalidRequest, NotFound, ObjectStoreError,
    OperationError, ProviderError, ReadOnlyError, RewindError, StoreError, UndeclaredRead, UnhashableValue,
    UserError,
)
from .keys import canonical_hash  # noqa: E402
from .model.metering import record_usage  # noqa: E402
from .store.serde import register_type  # noqa: E402
from .models import AuditReport, AuditRow, DiffRow, Run, RunStatus, Step, StepStatus, TrajectoryDiff  # noqa: E402

from .model import chat as llm  # noqa: E402  (rewind.llm.chat is part of the public contract)
from .batch import BatchReport, BatchRow  # noqa: E402
from .analysis.blame import BlameReport, BlameRow  # noqa: E402

_sys.modules["rewind.llm"] = llm  # `import rewind.llm` is this same module

__all__ = [
    "action", "tool", "Rewind", "Pipeline", "register_pipeline", "MAX_SEARCH", "RewindError", "NotFound",
    "InvalidRequest", "UnhashableValue", "UndeclaredRead", "ForkError", "StoreError",
    "IntegrityError", "ProviderError", "canonical_hash", "record_usage", "Run", "Step",
    "TrajectoryDiff", "DiffRow", "AuditReport", "AuditRow", "llm", "register_type",
    "RunStatus", "StepStatus", "UserError", "OperationError", "CorpusError", "CommitError",
    "BatchReport", "BatchRow", "ReadOnlyError", "BlameReport", "BlameRow", "ObjectStoreError",
]
