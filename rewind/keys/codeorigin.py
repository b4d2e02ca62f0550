"""Where code comes from: the user's own code, the standard library, an installed package
(site-packages, dist-packages), or Rewind itself; and the distribution and version of an
installed package. Classified once per module name, versions looked up once per package.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import sysconfig
import threading
from typing import Any, Optional

USER, STDLIB, PACKAGE, FRAMEWORK = "user", "stdlib", "package", "rewind"

_LOCK = threading.Lock()
_KINDS: dict = {}
_VERSIONS: dict = {}
_DISTS: Optional[dict] = None
_STDLIB_DIRS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib")} if p
)
_SITE_PARTS = ("site-packages", "dist-packages")


def module_kind(name: str) -> str:
    """`user`, `stdlib`, `package` (installed) or `rewind` (the framework) for a module name."""
    got = _KINDS.get(name)
    if got is None:
        got = _KINDS[name] = _classify(name)
    return got


def _classify(name: str) -> str:
    if not name:
        return USER
    top = name.partition(".")[0]
    if top == "rewind":
        return FRAMEWORK
    if name in sys.builtin_module_names or top == "builtins":
        return STDLIB
    # a standard module's name is the standard module unless its file is elsewhere: a project's
    # own `chunk.py` or `statistics.py` shadows it, and is the user's code (a dotted name not
    # loaded is not looked for: finding it would import its package)
    standard = top in sys.stdlib_module_names
    where = _location(name) if not standard or name in sys.modules or "." not in name else None
    if where is None:  # not standard: made at run time (exec, types.ModuleType), nobody's package
        return STDLIB if standard else USER
    real = os.path.realpath(where)
    if any(part in _SITE_PARTS for part in real.split(os.sep)):
        return STDLIB if standard else PACKAGE
    if real.startswith(_STDLIB_DIRS):
        return STDLIB
    return USER


def _location(name: str) -> Optional[str]:
    """The file (or package folder) module `name` is loaded from, or would be imported from."""
    mod = sys.modules.get(name)
    where = getattr(mod, "__file__", None) if mod is not None else None
    if where is None and mod is not None:
        where = next(iter(getattr(mod, "__path__", None) or ()), None)
    if where is None and mod is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        where = spec.origin if spec is not None and spec.origin not in (None, "built-in", "frozen") else None
    return where


def distribution_of(module: str) -> tuple:
    """(distribution name, version) of the installed package that provides `module`; the
    import name and "unknown" when no distribution claims it. Looked up once per name."""
    top = module.partition(".")[0]
    got = _VERSIONS.get(top)
    if got is None:
        global _DISTS
        with _LOCK:
            if _DISTS is None:
                try:
                    _DISTS = importlib.metadata.packages_distributions()
                except Exception:
                    _DISTS = {}
        dist = sorted(_DISTS.get(top) or [top])[0]
        try:
            version = importlib.metadata.version(dist)
        except Exception:
            version = "unknown"
        got = _VERSIONS[top] = (dist, version)
    return got


def version_of(module: str) -> Optional[str]:
    """`dist==version` for a module of an installed package, else None."""
    if module_kind(module) != PACKAGE:
        return None
    dist, version = distribution_of(module)
    return f"{dist}=={version}"


def type_name(t: Any) -> str:
    return f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', getattr(t, '__name__', '?'))}"


def import_user_module(name: str) -> Any:
    """The module `name`, imported only when it is user code (what the node would import);
    an installed or standard module is looked up, never imported by a fingerprint."""
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    if module_kind(name) != USER:
        return None
    try:
        return importlib.import_module(name)
    except Exception:
        return None
