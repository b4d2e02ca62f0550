"""Code fingerprints: the part of a node's key that says which code (and which constants the code
names) produced its output, so an edit anywhere the node reaches in the user's code is a miss.

Two layers, hashed together:
- the legacy layer, unchanged since caches were first written (tests/test_golden.py): the
  node's source, the module-level constants and closure values it names, the same-module
  helpers and closure functions it calls, followed;
- the reach layer, present only when it is not empty, so a node that reaches nothing more keeps
  its old key: attributes read from other user modules (`prompts.SYSTEM`), helpers in other
  user modules (transitively, cycles cut), the methods and user-code bases of classes (class-
  based actions included) with what they use, bound methods' instances, partials' arguments,
  and the version of every installed package the code uses.

"User code" is anything outside the standard library and installed packages (site-packages,
dist-packages). Rewind's own modules are the framework: never followed and never versioned,
so upgrading Rewind does not invalidate every cache (the golden test guards its hashes).
Nothing process-specific enters a fingerprint: names, source text, canonical values only.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import types
from typing import Any, Callable, Optional

from burr.core.action import FunctionBasedAction

from . import hashing
from .dynamicreach import module_units
from .classfields import reach_fields
from .modulereads import module_reads
from .bytecode import code_text as _code_text, names_used as _names_used
from .objectparts import (
    PARTS_DEPTH, PARTS_MAX, attributes, functions_of, made_of_user_code, parts_of, user_objects,
)
from .codeorigin import (  # noqa: F401  (re-exported: hashing keys params with them)
    FRAMEWORK, PACKAGE, STDLIB, USER, distribution_of, import_user_module, module_kind, type_name,
    version_of,
)

# --- reaching -------------------------------------------------------------------------------

_MISSING = object()
_ACTION_ATTRIBUTE = FunctionBasedAction.ACTION_FUNCTION  # where `@action` hangs its Action


def _unit(obj: Any) -> str:
    """A unit's stable name: `module.qualname` (`helpers.clean`, `kact.Tagger.run`)."""
    if isinstance(obj, functools.partial):
        return f"partial({_unit(obj.func)})"
    qual = getattr(obj, "__qualname__", None)
    if not isinstance(qual, str):  # an instance: named after its class
        return f"{_unit(type(obj))}()"
    return f"{getattr(obj, '__module__', None) or '?'}.{qual}"


def _layer_unit(f: Any) -> str:
    """A decorator layer's unit: wraps() gave it the wrapped function's names, so it is named
    after its own code as well."""
    return f"{_unit(f)}.<wrapped by {f.__code__.co_qualname}>"


def _legacy_constant(value: Any) -> Any:
    """The spelling the legacy layer gives a constant, or None to leave it out."""
    if isinstance(value, (types.ModuleType, type)) or callable(value):
        return None
    try:
        return hashing._canon(value, "value", 0, hashing._LEGACY)
    except Exception:
        return None


class _Walk:
    """One traversal: the legacy parts (in the legacy order), the reach layer (a dict, so
    order-free), per-unit spellings, and every binding read on the way (for the fast path)."""

    def __init__(self) -> None:
        self.legacy: list = []
        self.reach: dict = {}
        self.units: dict = {}
        self.bindings: list = []
        self.seen: set = set()
        self.visited: list = []
        self.wrappers: list = []  # decorator layers found on the way (`note_wrappers`)
        self.depth = 0  # of `visit_parts` within itself
        self.parts_left = PARTS_MAX

    # the legacy layer, exactly as it always was
    def legacy_visit(self, f: Any) -> None:
        if callable(f):
            self.note_wrappers(f)
            f = inspect.unwrap(f)
        if id(f) in self.seen:
            return
        self.seen.add(id(f))
        self.visited.append(f)
        text = _code_text(f)
        self.legacy.append(text)
        self.units[_unit(f)] = text
        code = getattr(f, "__code__", None)
        if code is None:
            return
        for name, value, where, unit in self._named(f, code):
            self.bindings.append((where, value))
            if inspect.isfunction(value) and (
                value.__module__ == getattr(f, "__module__", None) or where[0] == "c"
            ):
                self.legacy_visit(value)
                continue
            spelled = _legacy_constant(value)
            if spelled is not None:
                self.legacy.append([name, spelled])
                self.units[unit] = spelled

    @staticmethod
    def _named(f: Any, code: types.CodeType) -> list:
        g = getattr(f, "__globals__", {})
        module = g.get("__name__", getattr(f, "__module__", "?"))
        named = [(n, g[n], ("g", g, n), f"{module}.{n}") for n in sorted(_names_used(code)) if n in g]
        for cell_name, cell in zip(code.co_freevars, getattr(f, "__closure__", None) or ()):
            try:
                named.append((cell_name, cell.cell_contents, ("c", cell), f"{_unit(f)}.{cell_name}"))
            except ValueError:
                continue
        return named

    # the reach layer
    def extend(self) -> None:
        for f in self.visited[1:]:  # the node's own defaults are its params, keyed as such
            self.add_defaults(f)
        for f in list(self.visited):
            if isinstance(f, type):
                self.visit_class(f, own_source=False)
            elif isinstance(f, functools.partial):
                self.reach_value(f, _unit(f.func))
            elif inspect.ismethod(f):
                self.visit_bound(f)
            elif getattr(f, "__code__", None) is None and not inspect.isbuiltin(f):
                self.visit_instance(f)
            code = getattr(f, "__code__", None)
            if not isinstance(code, types.CodeType):
                continue
            for _name, value, where, unit in self._named(f, code):
                if isinstance(value, types.ModuleType):
                    continue  # followed by the chains its code reads (module_reads)
                if inspect.isfunction(value) and (
                    value.__module__ == getattr(f, "__module__", None) or where[0] == "c"
                ):
                    continue  # followed by the legacy layer
                if _legacy_constant(value) is None:
                    self.reach_value(value, unit)
                else:  # spelled by its fields alone in the legacy layer
                    self.reach_user_objects(value, unit)
            module_reads(self, f, code)
        for f in list(self.visited):
            if inspect.isfunction(f) and module_kind(f.__module__ or "") == USER:
                self.reach_attributes(f, _unit(f), own_action=True)
        done = 0
        while done < len(self.wrappers):  # visiting one may find more
            layer = self.wrappers[done]
            self.visit_function(layer, layer=True)
            # a singledispatch helper's registry lives on its wrapper, not on what it wraps
            self.reach_attributes(layer, _layer_unit(layer), own_action=True)
            done += 1

    def reach_attributes(self, f: Any, unit: str, own_action: bool = False) -> None:
        """What is set on a user function (`helper.k = 2`, a singledispatch registry): its
        code reads it at run time, so it is part of the key. Not its `__wrapped__` (visited
        as code) nor its methods bound to itself (Burr's `.bind`). `own_action`: the Action
        `@action` hangs on a function the walk already follows as code says nothing more
        (keying it would add Burr's version to every node's key, a miss on every upgrade)."""
        dispatcher = isinstance(getattr(f, "registry", None), types.MappingProxyType) and callable(
            getattr(f, "dispatch", None))
        for name, attr in attributes(f):
            if name == "__wrapped__" or getattr(attr, "__self__", None) is f:
                continue
            if dispatcher and name == "_clear_cache":
                continue  # singledispatch's cache of types dispatched so far: not code
            if own_action and name == _ACTION_ATTRIBUTE:
                continue
            self.bindings.append((("a", f, name), attr))  # set again at run time: walked again
            self.reach_value(attr, f"{unit}.{name}")

    def add(self, unit: str, spelling: Any) -> None:
        self.reach[unit] = spelling
        self.units[unit] = spelling

    def visit_function(self, f: Any, layer: bool = False) -> None:
        if not layer:
            self.note_wrappers(f)
            f = inspect.unwrap(f)
        if id(f) in self.seen:
            return
        self.seen.add(id(f))
        code = getattr(f, "__code__", None)
        if layer:
            self.add(_layer_unit(f), _code_text(code))
        else:
            self.add(_unit(f), _code_text(f))
        self.add_defaults(f)
        if code is None:
            return
        for name, value, where, unit in self._named(f, code):
            self.bindings.append((where, value))
            if not isinstance(value, types.ModuleType):  # a module: by its chains (module_reads)
                self.reach_value(value, unit)
        module_reads(self, f, code)

    def note_wrappers(self, f: Any) -> None:
        """The layers a user's own decorator put around a function: `functools.wraps` hides
        them behind `__wrapped__`, but their code runs too (`extend` visits them)."""
        layer, depth = f, 0
        while getattr(layer, "__wrapped__", None) is not None and depth < 100:
            if inspect.isfunction(layer) and module_kind(layer.__module__ or "") == USER:
                self.wrappers.append(layer)
            layer, depth = layer.__wrapped__, depth + 1

    def add_defaults(self, f: Any) -> None:
        """A user helper's default argument values: bound when its `def` ran (`p=PROMPT`), so
        its source does not say what they are."""
        if not inspect.isfunction(f) or module_kind(f.__module__ or "") != USER:
            return
        unit = _unit(f)
        for i, value in enumerate(f.__defaults__ or ()):
            self.reach_value(value, f"{unit}.<default {i}>")
        for name in sorted(f.__kwdefaults__ or {}):
            self.reach_value(f.__kwdefaults__[name], f"{unit}.<default {name}>")

    def visit_class(self, cls: type, own_source: bool = True) -> None:
        """A class's methods (and what they use), class attributes and user-code bases; an
        installed base adds its package's version."""
        if own_source:
            if id(cls) in self.seen:
                return
            self.seen.add(id(cls))
            self.add(_unit(cls), _code_text(cls))
        meta = type(cls)  # a metaclass of the user's runs when the class is called
        if meta is not type and module_kind(getattr(meta, "__module__", "") or "") == USER:
            self.visit_class(meta)
        for klass in cls.__mro__:
            kind = module_kind(getattr(klass, "__module__", "") or "")
            if kind == PACKAGE:
                self.add_package(klass.__module__)
                continue
            if kind != USER:
                continue
            if klass is not cls:
                if id(klass) in self.seen:
                    continue
                self.seen.add(id(klass))
                self.add(_unit(klass), _code_text(klass))
            members = klass.__dict__
            for name in sorted(members):
                member = members[name]
                self.bindings.append((("d", members, name), member))
                fns = functions_of(member)
                for fn in fns:
                    self.visit_function(fn)
                if not fns and not name.startswith("__"):
                    self.reach_value(member, f"{_unit(klass)}.{name}")
            reach_fields(self, klass, members, _unit(klass))

    def visit_instance(self, obj: Any) -> None:
        self.visit_class(type(obj))
        for name, value in attributes(obj):  # a slotted instance holds its values in its slots
            self.add(f"{_unit(type(obj))}.self.{name}", hashing.param_hash(value, name))

    def visit_bound(self, m: Any) -> None:
        owner = m.__self__
        if isinstance(owner, type):
            self.visit_class(owner)
        elif not isinstance(owner, types.ModuleType):
            self.visit_instance(owner)

    def add_package(self, module: str) -> None:
        dist, version = distribution_of(module)
        self.add(dist, version)

    def reach_value(self, value: Any, unit: str) -> None:
        """A value the code names (a global, a closure value, a module attribute)."""
        if isinstance(value, types.ModuleType):
            kind = module_kind(value.__name__)
            if kind == PACKAGE:
                self.add_package(value.__name__)
            elif kind == USER and id(value) not in self.seen:
                # a user module held as a value (in a dict, a default, an attribute, an alias):
                # the code that reads it reads it by name elsewhere, so it counts whole
                self.seen.add(id(value))
                for part, spelling in module_units(value).items():
                    self.add(part, spelling)
            return
        if isinstance(value, functools.partial):
            self.reach_value(value.func, unit)
            self.add(f"{unit}.args", hashing.param_hash([list(value.args), value.keywords], unit))
            return
        if inspect.ismethod(value):
            self.reach_value(value.__func__, unit)
            self.visit_bound(value)
            return
        owner = getattr(value, "__self__", None) if inspect.isbuiltin(value) else None
        if owner is not None and not isinstance(owner, types.ModuleType):
            # `"v1 {}".format`, `{...}.get`: a builtin bound to a value, keyed by both
            self.add(f"{unit}.<method>", value.__name__)
            self.reach_value(owner, f"{unit}.__self__")
            return
        # functools.cache / lru_cache: the function inside (its own attribute: a proxy that
        # answers any name would hand out a new `__wrapped__` for ever)
        wrapped = (getattr(value, "__dict__", None) or {}).get("__wrapped__") if callable(value) else None
        if wrapped is not None and not isinstance(value, (type, types.FunctionType)) and id(value) not in self.seen:
            self.seen.add(id(value))
            self.reach_value(wrapped, unit)
            return
        if inspect.isfunction(value) or inspect.isbuiltin(value) or isinstance(value, type):
            kind = module_kind(getattr(value, "__module__", None) or "")
            if kind == USER:
                if isinstance(value, type):
                    self.visit_class(value)
                else:
                    self.visit_function(value)
                    # what is set on it: Burr's `@action` keeps its action there, and
                    # `.bind(p=...)` the bound arguments
                    self.reach_attributes(value, unit)
            elif kind == PACKAGE:
                self.add_package(value.__module__)
            return
        if value is None or type(value) in (str, int, float, bool):
            if _legacy_constant(value) is not None:
                self.add(unit, _legacy_constant(value))
            return
        try:
            self.add(unit, hashing.to_canonical(value, unit))
        except Exception:
            pass
        else:
            self.reach_user_objects(value, unit)
            return
        t = type(value)
        kind = module_kind(t.__module__ or "")
        if kind == USER:
            self.visit_class(t)
        elif kind == PACKAGE:
            self.add_package(t.__module__)
            render = getattr(value, "root_render_func", None)  # a jinja2 Template: its text
            if inspect.isfunction(render):  # is in the code it was compiled to
                blocks = getattr(value, "blocks", None) or {}
                self.add(f"{unit}.<template>", [_code_text(f) for _, f in sorted(
                    [("", render), *blocks.items()]) if inspect.isfunction(f)])
            if t.__module__.partition(".")[0] == "jinja2":
                self.reach_jinja(getattr(value, "environment", value), unit)
            if not made_of_user_code(t):
                return  # an installed package's object: its version says which code made it
        self.visit_parts(value, unit)

    def reach_user_objects(self, value: Any, unit: str) -> None:
        """The user's classes in a value its fields spell (a dataclass, a pydantic model, a
        str subclass): their code, and what their instances hold besides those fields."""
        for suffix, obj in user_objects(value, self.parts_left):
            if id(obj) in self.seen:
                continue
            self.seen.add(id(obj))
            self.parts_left -= 1
            self.visit_class(type(obj))
            for name, attr in attributes(obj):
                self.reach_value(attr, f"{unit}{suffix}.{name}")

    def reach_jinja(self, env: Any, unit: str) -> None:
        """What the user put into a jinja2 Environment: filters, tests and globals of their
        code (and the data they set as globals), a DictLoader's templates."""
        if id(env) in self.seen or not hasattr(env, "filters"):
            return
        self.seen.add(id(env))
        for kind in ("filters", "tests", "globals"):
            mapping = getattr(env, kind, None) or {}
            for name in sorted(mapping, key=str):
                got = mapping[name]
                mod = getattr(got, "__module__", None) or ""
                if not callable(got) or module_kind(mod) == USER:
                    self.reach_value(got, f"{unit}.<jinja {kind}>.{name}")
        templates = getattr(getattr(env, "loader", None), "mapping", None)
        if isinstance(templates, dict):
            self.reach_value(templates, f"{unit}.<jinja loader>")

    def visit_parts(self, value: Any, unit: str) -> None:
        """A value with no canonical encoding, by its parts: a container's items, an object's
        attributes (or `rewind_key`), else what it pickles as (`re.compile`'s pattern and
        flags, a `string.Template`'s text). What has none of these is known by its type."""
        if id(value) in self.seen or self.depth >= PARTS_DEPTH or self.parts_left <= 0:
            return
        if not self.depth and module_kind(unit.partition(".")[0]) == FRAMEWORK:
            return  # Rewind's own constants change only with an upgrade, which keeps caches
        self.seen.add(id(value))
        self.depth += 1
        try:
            parts = parts_of(value, self.spell)[: self.parts_left]
            self.parts_left -= len(parts)
            for name, part in parts:
                self.reach_value(part, f"{unit}{name}")
        finally:
            self.depth -= 1

    def spell(self, key: Any) -> str:
        """A dict key's or a set item's name in a unit: its canonical JSON, else the digest of
        its own walk (a repr may hold a memory address)."""
        try:
            return hashing.canonical_json(key).decode("utf-8")
        except Exception:
            sub = _Walk()
            sub.parts_left = min(self.parts_left, 1000)
            sub.reach_value(key, "key")
            return "~" + hashing.canonical_hash(sub.reach)[:16]


def _read_binding(where: tuple) -> Any:
    kind = where[0]
    if kind in ("g", "d"):  # a module's globals, a class's members
        return where[1].get(where[2], _MISSING)
    if kind == "c":
        try:
            return where[1].cell_contents
        except ValueError:
            return _MISSING
    if kind == "a":
        return getattr(where[1], where[2], _MISSING)
    return sys.modules.get(where[1], _MISSING)


# Fingerprints being computed on this thread: a function reached again through an object's
# state while its own walk is under way is keyed by name, so the walk ends.
_ACTIVE = threading.local()

# (fn, version) -> (mapping bindings to re-read, other bindings, digest, units), each binding with its object
_FINGERPRINTS: dict = {}


def _fingerprint(fn: Any, version: Optional[str]) -> tuple:
    try:
        memo = _FINGERPRINTS.get((fn, version))
    except TypeError:
        memo = None
    if memo is not None:
        gets, others = memo[0], memo[1]
        for mapping, name, o in gets:  # a module's globals, a class's members: no call each
            if mapping.get(name, _MISSING) is not o:
                break
        else:
            for w, o in others:
                if _read_binding(w) is not o:
                    break
            else:
                return memo
    walk = _Walk()
    active = _ACTIVE.__dict__.setdefault("fns", set())
    active.add(id(fn))
    try:
        walk.legacy_visit(fn)
        walk.extend()
    finally:
        active.discard(id(fn))
    doc = {"code": walk.legacy, "version": version}
    if walk.reach:
        doc["deps"] = walk.reach
    digest = hashing.canonical_hash(doc)
    units = {u: hashing.canonical_hash(s, u) for u, s in sorted(walk.units.items())}
    if version is not None:
        units["version"] = hashing.canonical_hash(version)
    # the re-read of every call, split once: bindings read from a mapping, and the rest
    gets = [(w[1], w[2], o) for w, o in walk.bindings if w[0] in ("g", "d")]
    others = [(w, o) for w, o in walk.bindings if w[0] not in ("g", "d")]
    memo = (gets, others, digest, units)
    try:
        _FINGERPRINTS[(fn, version)] = memo
    except TypeError:
        pass
    return memo


def code_fingerprint(fn: Callable, version: Optional[str] = None) -> str:
    """The `code` hash of a node: its source, the constants and closure values it names, the
    helpers it calls (same module: the legacy layer; other user modules: followed), the module
    attributes it reads, its class's methods and bases, installed packages' versions, and
    `version`. Re-read on every call; recomputed only when a binding it read was rebound. A
    mutable global mutated in place keeps its first spelling, so a counter never makes every
    run miss."""
    return _fingerprint(fn, version)[2]


def describe_fingerprint(fn: Callable, version: Optional[str] = None) -> dict:
    """{unit: hash} of everything `code_fingerprint(fn, version)` covers: `mod.func` for code,
    `mod.NAME` for a constant or module attribute, `mod.func.var` for a closure value,
    `mod.Cls.method`, a distribution name (`openai`) for an installed package, `version`."""
    return dict(_fingerprint(fn, version)[3])


def changed_units(before: dict, after: dict) -> list:
    """The units whose hash differs between two `describe_fingerprint` results (added and
    removed ones included), sorted: what a miss reason names."""
    return sorted(u for u in set(before) | set(after) if before.get(u) != after.get(u))
