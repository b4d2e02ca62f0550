"""The storage layer's shape: one concept per module, no cycles, SQL only in `rewind.store`.

Static checks (the source is parsed, nothing is run): every module of `rewind.store` and
`rewind.maintenance` opens with a docstring and stays under 500 lines; `rewind.store` imports
nothing of Rewind but errors, redaction and the key machinery (`rewind.keys`) (never the engine, the API, the UI); the
imports between its modules have no cycle; `rewind.maintenance` holds no SQL statement.
"""

from __future__ import annotations

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("rewind/store", "rewind/maintenance")
STORE_MAY_IMPORT = {"rewind.errors", "rewind.keys", "rewind.redaction"}  # leaves
SQL = re.compile(r"\b(SELECT\s+\S+.*\bFROM|INSERT\s+INTO|DELETE\s+FROM|UPDATE\s+\w+\s+SET|"
                 r"CREATE\s+(TABLE|INDEX)|ALTER\s+TABLE|LOCK\s+TABLE)\b", re.I | re.S)


def _modules(package: str) -> dict:
    folder = os.path.join(ROOT, package)
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            dotted = package.replace("/", ".") + ("" if name == "__init__.py" else "." + name[:-3])
            out[dotted] = os.path.join(folder, name)
    return out


def _imports(dotted: str, path: str) -> set:
    tree = ast.parse(open(path, encoding="utf-8").read())
    package = dotted if path.endswith("__init__.py") else dotted.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)  # `from . import x`
    return {m for m in found if m and m.startswith("rewind")}


def test_each_module_says_what_it_owns_and_stays_small():
    for package in PACKAGES:
        for dotted, path in _modules(package).items():
            source = open(path, encoding="utf-8").read()
            assert ast.get_docstring(ast.parse(source)), f"{dotted} has no docstring"
            lines = source.count("\n")
            assert lines < 500, f"{dotted} has {lines} lines"


def test_the_store_imports_no_engine_api_or_ui_and_has_no_cycle():
    modules = _modules("rewind/store")
    graph = {}
    for dotted, path in modules.items():
        deps = _imports(dotted, path)
        allowed = STORE_MAY_IMPORT | {"rewind.store"}
        outside = {d for d in deps if d != "rewind"
                   and not any(d == a or d.startswith(a + ".") for a in allowed)}
        assert not outside, f"{dotted} imports {sorted(outside)}"
        graph[dotted] = {d for d in deps if d in modules and d != dotted}
    # the package's __init__ re-exports its modules; cycles are between the modules themselves
    graph.pop("rewind.store", None)
    for deps in graph.values():
        deps.discard("rewind.store")
    state: dict = {}

    def visit(m: str, path: list) -> None:
        if state.get(m) == "done":
            return
        assert state.get(m) != "active", " -> ".join(path + [m])
        state[m] = "active"
        for d in sorted(graph.get(m, ())):
            visit(d, path + [m])
        state[m] = "done"

    for m in sorted(graph):
        visit(m, [])


def test_maintenance_holds_no_sql():
    for dotted, path in _modules("rewind/maintenance").items():
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
                raise AssertionError(f"{dotted}:{node.lineno} holds SQL: {node.value[:80]!r}")
