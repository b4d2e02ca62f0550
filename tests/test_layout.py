"""The shape of the house (issues 15 and 36): every module of rewind/ says what it owns in its
first lines and stays under 500 lines (rewind_ui/'s too), `rewind` never imports streamlit, the
root of rewind/ holds at most 10 modules (the public face; the rest lives in packages named for
what they do), and rewind/ and rewind_ui/ have no import cycle, counting the imports deferred
into functions too (a deferred import hides a cycle from the loader, not from the reader). SQL
lives only under rewind/store."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

HOUSE = pathlib.Path(__file__).resolve().parent.parent
ROOT = HOUSE / "rewind"
PACKAGES = ("rewind", "rewind_ui")
MODULES = sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)
ALL = sorted(p for pkg in PACKAGES for p in (HOUSE / pkg).rglob("*.py") if "__pycache__" not in p.parts)
MAX_ROOT_MODULES = 10
SQL = re.compile(r"^\s*(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)|ALTER\s+TABLE)\b",
                 re.I | re.S)


def _name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(HOUSE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


NAMES = {_name(p) for p in ALL}


def _ours(mod: str) -> bool:
    return any(mod == pkg or mod.startswith(pkg + ".") for pkg in PACKAGES)


def _type_checking_only(tree: ast.AST) -> set:
    """Import nodes under `if TYPE_CHECKING:` (never run)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for b in node.body for n in ast.walk(b)}
    return out


def _imports(path: pathlib.Path) -> set:
    """Modules of ours that `path` imports anywhere: at module level or inside a function."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree)
    here = _name(path)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if _ours(a.name)}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if _ours(mod):
                subs = {f"{mod}.{a.name}" for a in node.names} & NAMES
                out |= subs  # `from . import x`: the submodule x
                if len(subs) < len(node.names):  # names defined by the module itself
                    out.add(mod)
    return out


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(HOUSE)))
def test_each_module_says_what_it_owns_and_stays_small(path):
    text = path.read_text()
    assert ast.get_docstring(ast.parse(text)), f"{path.name}: no module docstring"
    assert len(text.splitlines()) <= 500, f"{path} has {len(text.splitlines())} lines"
    if path.is_relative_to(ROOT):
        assert not re.search(r"^\s*(import|from)\s+streamlit", text, re.M)


def test_the_root_of_rewind_is_its_public_face():
    root = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the root of rewind/: {root}"


def find_cycles(graph: dict) -> list:
    """Every import cycle found by a depth-first walk of `graph` (module -> modules it imports)."""
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
    return cycles


def import_graph() -> dict:
    # `rewind/__init__` is the public facade that re-exports everything; no module of rewind
    # imports it (rewind_ui does, from above: it is never imported back)
    graph = {_name(p): {m for m in _imports(p) if m in NAMES and m not in (_name(p), "rewind")}
             for p in ALL if _name(p) != "rewind"}

    def parents(name):  # importing a.b.c runs a/b/__init__ first (rewind: the facade, left out)
        parts = name.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts))} & NAMES - {"rewind"}

    for name in graph:  # importing another package's module runs that package's __init__
        graph[name] |= {p for m in graph[name] for p in parents(m)} - parents(name) - {name}
    return graph


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, cycles[:5]


def test_the_cycle_check_sees_deferred_imports(tmp_path):
    # the check itself can fail: a cycle made only of an import inside a function is found
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text('"""a"""\nimport b\n')
    b.write_text('"""b"""\ndef f():\n    import a\n')
    graph = {"a": {"b"}, "b": set()}
    for node in ast.walk(ast.parse(b.read_text())):
        if isinstance(node, ast.Import):
            graph["b"] |= {n.name for n in node.names}
    assert find_cycles(graph) == [["a", "b", "a"]]


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
