"""What a function's code reads from modules, for its fingerprint: the user modules it imports
(and the names it takes from them), the `module.attr` chains it follows through them (a read
of an installed package adds that package's version), and, for code that looks names up by
string (`getattr(prompts, name)`, `globals()[...]`), every unit of the modules it can reach.
"""

from __future__ import annotations

import builtins
import importlib.util
import sys
import types
from typing import Any

from .bytecode import scan
from .codeorigin import PACKAGE, USER, import_user_module, module_kind
from .dynamicreach import looks_up_dynamically, module_units, reachable_modules

_MISSING = object()


def module_reads(walk: Any, f: Any, code: types.CodeType) -> None:
    """Record on `walk` what `f`'s code reads from user modules: the modules it imports (and
    names from them), the `module.attr` chains it follows, and, when it looks names up by
    string, whole modules."""
    chains, imports = scan(code)
    g = getattr(f, "__globals__", {})
    package = g.get("__package__") or ""
    locals_: dict = {}
    for local, module, level, attr in imports:
        try:
            name = importlib.util.resolve_name("." * level + module, package) if level else module
        except (ImportError, ValueError):
            continue
        top = name.partition(".")[0]
        if module_kind(top) == PACKAGE:
            # an installed package is in the key by name and version from the import statement
            # itself, whether or not this process has loaded it (or the submodule) yet: what is
            # in `sys.modules` when a pipeline is built differs between processes. Its top-level
            # name decides the distribution, and finding a top-level name imports nothing.
            walk.add_package(top)
        base = import_user_module(name)
        if base is None:
            continue
        walk.bindings.append((("m", name), base))
        if attr is None:
            top = name.partition(".")[0] if "." in name and not level else name
            locals_[local] = sys.modules.get(top, base)
            if module_kind(locals_[local].__name__) != USER:  # a user module: by its chains
                walk.reach_value(locals_[local], name)
            continue
        got = getattr(base, attr, _MISSING)
        if got is _MISSING:
            got = import_user_module(f"{name}.{attr}")
        if got is None or got is _MISSING:
            continue
        walk.bindings.append((("a", base, attr), got))
        locals_[local] = got
        read_attr(walk, base, attr, got)
    cells = dict(zip(code.co_freevars, getattr(f, "__closure__", None) or ()))
    named: list = []  # the modules the code names
    for kind, name, attrs in chains:
        if kind == "g":
            base = g.get(name, _MISSING)
            if base is _MISSING:
                base = getattr(builtins, name, _MISSING)
        elif kind == "l":
            base = locals_.get(name, _MISSING)
        else:
            try:
                base = cells[name].cell_contents if name in cells else _MISSING
            except ValueError:
                base = _MISSING
        if not isinstance(base, types.ModuleType):
            continue
        named.append(base)
        if not attrs:  # the module itself goes somewhere (`p = prompts`): what is read from
            walk.reach_value(base, name)  # it there is not in this code, so all of it counts
            continue
        obj = base
        for attr in attrs:
            if not isinstance(obj, types.ModuleType):
                break
            nxt = getattr(obj, attr, _MISSING)
            if nxt is _MISSING:
                break
            walk.bindings.append((("a", obj, attr), nxt))
            if not read_attr(walk, obj, attr, nxt):
                break
            obj = nxt
    if looks_up_dynamically(code):  # getattr(prompts, "X"), globals()["P"]: whole modules
        named += [m for m in locals_.values() if isinstance(m, types.ModuleType)]
        for module in reachable_modules(f, code, named):
            for unit, spelling in module_units(module).items():
                walk.add(unit, spelling)

def read_attr(walk: Any, module: Any, attr: str, value: Any) -> bool:
    """`module.attr` was read; True when the chain goes on (a user submodule)."""
    kind = module_kind(module.__name__)
    if kind == PACKAGE:
        walk.add_package(module.__name__)
        return False
    if kind != USER:
        return False
    if isinstance(value, types.ModuleType):
        if module_kind(value.__name__) == USER:
            return True
        walk.reach_value(value, attr)
        return False
    walk.reach_value(value, f"{module.__name__}.{attr}")
    return False


