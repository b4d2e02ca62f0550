"""What a class's fields bring into a fingerprint: a user class used as a field's type (a nested
pydantic model, `List[Item]`), the validators in `Annotated[..., ...]` metadata, and pydantic's
field defaults and default factories (pydantic keeps them on the field, not on the class, so a
walk over the class's members never meets them).
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from .codeorigin import USER, module_kind
from .objectparts import PARTS_DEPTH, attributes


def reach_fields(walk: Any, klass: type, members: Any, unit: str) -> None:
    """Record on `walk` what `klass`'s fields reach (`unit`: the class's unit name); pydantic's
    resolved fields where there are some, else the annotations."""
    fields = members.get("__pydantic_fields__")
    if isinstance(fields, dict):
        found = [(n, [f.annotation, *(f.metadata or ())]) for n, f in fields.items()
                 if hasattr(f, "annotation")]
        for name in sorted(n for n in fields if isinstance(n, str)):
            field = fields[name]  # `tone: str = prompts.TONE`, `Field(default_factory=make)`
            default = getattr(field, "default", None)
            if default is not None and type(default).__name__ != "PydanticUndefinedType":
                walk.reach_value(default, f"{unit}.<default {name}>")
            factory = getattr(field, "default_factory", None)
            if factory is not None:
                walk.reach_value(factory, f"{unit}.<default_factory {name}>")
    else:
        found = [(n, [a]) for n, a in (members.get("__annotations__") or {}).items()]
    for name, annotations in sorted(found, key=lambda nf: str(nf[0])):
        for annotation in annotations:
            _reach_annotation(walk, annotation, f"{unit}.<type {name}>", 0)


def _reach_annotation(walk: Any, annotation: Any, unit: str, depth: int) -> None:
    if depth > PARTS_DEPTH or annotation is None or isinstance(annotation, str):
        return
    if isinstance(annotation, type):
        if module_kind(annotation.__module__ or "") == USER:
            walk.visit_class(annotation)
        return
    args = typing.get_args(annotation)
    for arg in args:
        _reach_annotation(walk, arg, unit, depth + 1)
    if not args and typing.get_origin(annotation) is None:  # metadata: AfterValidator(f)
        for name, value in attributes(annotation):
            if inspect.isfunction(value):
                walk.reach_value(value, f"{unit}.{name}")
