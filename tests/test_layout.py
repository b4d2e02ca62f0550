"""The shape of the core (issue 15): every module of rewind/ says what it owns in its first lines,
stays under 500 lines, never imports streamlit, and the package has no import cycles; SQL lives
only under rewind/store."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "rewind"
MODULES = sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)
SQL = re.compile(r"^\s*(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)|ALTER\s+TABLE)\b",
                 re.I | re.S)


def _name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: pathlib.Path) -> set:
    """rewind modules imported at module level (imports inside functions are deferred on purpose)."""
    tree = ast.parse(path.read_text())
    here = _name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    out = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("rewind")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("rewind"):
                subs = {f"{mod}.{a.name}" for a in node.names} & NAMES
                out |= subs  # `from . import x`: the submodule x
                if len(subs) < len(node.names):  # names defined by the module itself
                    out.add(mod)
    return out


NAMES = {_name(p) for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_each_module_says_what_it_owns_and_stays_small(path):
    text = path.read_text()
    assert ast.get_docstring(ast.parse(text)), f"{path.name}: no module docstring"
    assert len(text.splitlines()) <= 500, f"{path} has {len(text.splitlines())} lines"
    assert not re.search(r"^\s*(import|from)\s+streamlit", text, re.M)


def test_no_import_cycles():
    # `rewind/__init__` is the public facade that re-exports everything; no module imports it
    graph = {_name(p): {m for m in _imports(p) if m in NAMES and m not in (_name(p), "rewind")}
             for p in MODULES if _name(p) != "rewind"}

    def parents(name):  # importing a.b.c runs a/b/__init__ first (a: the facade, left out)
        parts = name.split(".")
        return {".".join(parts[:i]) for i in range(2, len(parts))} & NAMES

    for name in graph:  # importing another package's module runs that package's __init__
        graph[name] |= {p for m in graph[name] for p in parents(m)} - parents(name) - {name}
    cycles, state = [], {}

    def visit(n, trail):
        state[n] = "open"
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                cycles.append(trail[trail.index(m):] + [m] if m in trail else [n, m])
            elif m not in state:
                visit(m, trail + [m])
        state[n] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    assert not cycles, cycles[:5]


def test_sql_only_under_the_store():
    offenders = []
    for path in MODULES:
        if path.relative_to(ROOT).parts[0] == "store":
            continue
        if path.relative_to(ROOT).as_posix() == "pipelines/corpus.py":
            continue  # the demo pipeline's own search index (an in-memory FTS5 database), not the store
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.match(node.value):
                offenders.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert not offenders, offenders
