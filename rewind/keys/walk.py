"""The walk behind a code fingerprint: from a node's function, everything its output may depend
on in the user's code, spelled without anything process-specific (see `keys.fingerprint` for
the two layers it fills and what "user code" means).

`_Walk` visits functions, classes, instances, globals and closure values, module attributes and
installed packages, collecting per-unit spellings and every binding it read (for the fast path
that re-reads them). It keys a value it cannot spell canonically (an object in a closure, a
partial's arguments) with the `key_value` it is given: `keys.fingerprint.param_hash`, which
walks again; handing it in keeps this module below the one that calls it.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import types
from typing import Any, Callable, Optional

from burr.core.action import FunctionBasedAction

from . import canonical
from .dynamicreach import module_units
from .classfields import reach_fields
from .modulereads import module_reads
from .bytecode import code_text as _code_text, names_used as _names_used
from .objectparts import (
    PARTS_DEPTH, PARTS_MAX, attributes, functions_of, made_of_user_code, parts_of, user_objects,
)
from .codeorigin import (  # noqa: F401
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
        return canonical._canon(value, "value", 0, canonical._LEGACY)
    except Exception:
        return None


class _Walk:
    """One traversal: the legacy parts (in the legacy order), the reach layer (a dict, so
    order-free), per-unit spellings, and every binding read on the way (for the fast path)."""

    def __init__(self, key_value: Callable[[Any, str], str]) -> None:
        self.key_value = key_value  # how a value with no canonical spelling is keyed
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
            self.add(f"{_unit(type(obj))}.self.{name}", self.key_value(value, name))

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
            self.add(f"{unit}.args", self.key_value([list(value.args), value.keywords], unit))
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
            self.add(unit, canonical.to_canonical(value, unit))
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
            return canonical.canonical_json(key).decode("utf-8")
        except Exception:
            sub = _Walk(self.key_value)
            sub.parts_left = min(self.parts_left, 1000)
            sub.reach_value(key, "key")
            return "~" + canonical.canonical_hash(sub.reach)[:16]
