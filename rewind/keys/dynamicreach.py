"""Code that looks names up at run time, for the fingerprint: `getattr(prompts, "SYSTEM")`,
`vars(prompts)["SYSTEM"]`, `importlib.import_module("prompts").SYSTEM`,
`sys.modules["prompts"].SYSTEM`, `globals()["P"]`.

Reading the bytecode cannot tell which name such a lookup reads, so a function that makes
one depends on every user module it can reach that way, whole: the modules it names, the
loaded user modules its string constants name, and its own module (`globals()`), each by its
source text and its top-level constants. An edit anywhere in such a module is a miss: sound,
if sometimes more than needed.
"""

from __future__ import annotations

import hashlib
import re
import sys
import types
from typing import Any, Iterator

from . import canonical
from .codeorigin import USER, import_user_module, module_kind

# names whose use means a lookup by a name computed or given as a string
DYNAMIC_NAMES = frozenset({"getattr", "vars", "globals", "import_module", "modules",
                           "__dict__", "__import__"})
_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_IMPORTS = frozenset({"import_module", "__import__"})
CONSTANTS_MAX = 500  # of one module's top-level constants, spelled into the key


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def looks_up_dynamically(code: types.CodeType) -> bool:
    return any(not DYNAMIC_NAMES.isdisjoint(c.co_names) for c in _codes(code))


def reachable_modules(f: Any, code: types.CodeType, named: list) -> list:
    """The user modules a dynamic lookup in `f` may read from: `named` and the globals its
    code names that are modules, the user modules its string constants name (imported, as the
    lookup would), and its own."""
    out = {m.__name__: m for m in named if isinstance(m, types.ModuleType)}
    g = getattr(f, "__globals__", None) or {}
    # only code that imports by name may have a string import a module not loaded yet
    imports = any(not _IMPORTS.isdisjoint(c.co_names) for c in _codes(code))
    for c in _codes(code):
        for name in c.co_names:
            if isinstance(g.get(name), types.ModuleType):
                out.setdefault(g[name].__name__, g[name])
        for const in c.co_consts:
            if isinstance(const, str) and len(const) <= 200 and _MODULE_NAME.fullmatch(const):
                module = import_user_module(const) if imports else sys.modules.get(const)
                if module is not None:
                    out.setdefault(const, module)
    own = sys.modules.get(getattr(f, "__module__", None) or "")
    if own is not None:
        out.setdefault(own.__name__, own)
    return [m for name, m in sorted(out.items())
            if isinstance(m, types.ModuleType) and module_kind(name) == USER]


def module_units(module: types.ModuleType) -> dict:
    """{unit: spelling} of a whole module: its source text's digest and its constants."""
    name = module.__name__
    units: dict = {}
    path = getattr(module, "__file__", None)
    if path:
        try:
            with open(path, "rb") as fh:
                units[f"{name}.<source>"] = hashlib.sha256(fh.read()).hexdigest()
        except OSError:
            pass
    for attr in sorted(k for k in vars(module) if isinstance(k, str) and not k.startswith("__")):
        if len(units) > CONSTANTS_MAX:
            break
        value = vars(module)[attr]
        if isinstance(value, (types.ModuleType, type)) or callable(value):
            continue
        try:
            units[f"{name}.{attr}"] = canonical.canonical_hash(value)
        except Exception:  # no canonical encoding: the source text stands for it
            continue
    return units
