"""How code is read for a fingerprint: its source text (or, with none, a bytecode spelling with
no memory address or hash-seeded order in it), the global names it uses, and its attribute
chains on names (`prompts.SYSTEM`) and local imports, found by walking the bytecode.
"""

from __future__ import annotations

import dis
import inspect
import types
from typing import Any

# A function object's source never changes, so it is read once.
_SOURCES: dict = {}


def _const_spelling(c: Any) -> str:
    if isinstance(c, types.CodeType):
        return _code_spelling(c)
    if isinstance(c, (tuple, frozenset)):
        items = [_const_spelling(x) for x in c]
        return ("(" if isinstance(c, tuple) else "frozenset(") + ",".join(
            items if isinstance(c, tuple) else sorted(items)) + ")"
    return repr(c)


def _code_spelling(code: types.CodeType) -> str:
    """Bytecode and constants, with no memory address (a nested code object's repr has one)."""
    return code.co_code.hex() + _const_spelling(code.co_consts)


def code_text(fn: Any) -> str:
    try:
        got = _SOURCES.get(fn)
    except TypeError:
        got = None
    if got is not None:
        return got
    try:
        got = inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType):
            got = _code_spelling(code)
        else:
            got = repr(getattr(fn, "__qualname__", type(fn).__name__))
    try:
        _SOURCES[fn] = got
    except TypeError:
        pass
    return got


def names_used(code: types.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= names_used(const)
    return names


_ATTR_OPS = ("LOAD_ATTR", "LOAD_METHOD")
_SKIP_OPS = ("EXTENDED_ARG", "CACHE", "NOP", "PRECALL")
_SCANS: dict = {}


def scan(code: types.CodeType) -> tuple:
    """(attribute chains, local imports) of a code object and the code nested in it.

    A chain is (kind, name, attrs): `prompts.SYSTEM` is ("g", "prompts", ["SYSTEM"]); kind "d"
    starts at a closure cell, "l" at a local bound by an import in the function. A name loaded
    with no attribute read on it (`p = prompts`, `render(prompts)`) is a chain with no attrs.
    A local import is (local name, module, level, attr or None)."""
    got = _SCANS.get(code)
    if got is not None:
        return got
    chains: list = []
    imports: list = []
    local_mods: set = set()

    def walk(c: types.CodeType) -> None:
        cur = None
        consts: list = [None, None]
        pending = None  # [module, level, attr]
        for ins in dis.get_instructions(c):
            op = ins.opname
            if op in _SKIP_OPS:
                continue
            if op in _ATTR_OPS and cur is not None:
                cur[2].append(ins.argval)
                continue
            if cur is not None:
                chains.append((cur[0], cur[1], tuple(cur[2])))
            cur = None
            if op in ("LOAD_GLOBAL", "LOAD_NAME"):
                cur = ("g", ins.argval, [])
            elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
                cur = ("l" if ins.argval in local_mods else "d", ins.argval, [])
            elif op.startswith("LOAD_FAST") and ins.argval in local_mods:
                cur = ("l", ins.argval, [])
            elif op == "IMPORT_NAME":
                level = consts[-2] if isinstance(consts[-2], int) else 0
                pending = [ins.argval, level, None]
            elif op == "IMPORT_FROM" and pending is not None:
                pending[2] = ins.argval
            elif op.startswith("STORE_") and pending is not None:
                imports.append((ins.argval, pending[0], pending[1], pending[2]))
                local_mods.add(ins.argval)
                if pending[2] is None:
                    pending = None
            elif op != "POP_TOP":
                pending = None if op != "IMPORT_FROM" else pending
            if op == "LOAD_CONST":
                consts.append(ins.argval)
        if cur is not None:
            chains.append((cur[0], cur[1], tuple(cur[2])))
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                walk(const)

    walk(code)
    got = _SCANS[code] = (tuple(chains), tuple(imports))
    return got
