"""How a pipeline reaches a worker: by its import spec, `package.module:attribute`.

A worker is another process (or another machine), so it cannot be handed the Pipeline object:
it imports the spec and checks that what it got is the same graph (name and graph id). The
caller's process resolves and checks every spec before any work starts, so a pipeline defined
in a script's `__main__`, inside a function or built on the fly is refused up front, with what
to do about it, instead of failing in every worker.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Optional

from ..engine import Pipeline, load_pipeline_spec
from ..errors import InvalidRequest, RewindError

_UNIMPORTABLE = ("__main__", "__mp_main__", "builtins")


def _entry_module(pipeline: Pipeline) -> Optional[str]:
    """The module the entrypoint's function was defined in: the likeliest home of the pipeline."""
    action = pipeline.actions.get(pipeline.entrypoint)
    fn = getattr(action, "_fn", None) or getattr(action, "fn", None)
    return getattr(fn, "__module__", None) or type(action).__module__


def _holds(value: Any, pipeline: Pipeline) -> bool:
    if value is pipeline:
        return True
    return isinstance(value, (list, tuple)) and any(v is pipeline for v in value)


def _attribute_in(module_name: str, pipeline: Pipeline) -> Optional[str]:
    module = sys.modules.get(module_name)
    if module is None or module_name in _UNIMPORTABLE:
        return None
    try:
        names = list(vars(module).items())
    except TypeError:
        return None
    for name, value in names:
        if not name.startswith("__") and _holds(value, pipeline):
            return f"{module_name}:{name}"
    return None


def _candidate_specs(pipeline: Pipeline) -> Iterable[str]:
    """Cheapest first: an attribute of the module its entrypoint comes from (already imported),
    then the specs this process was told about, then any imported module that holds it."""
    own = getattr(pipeline, "import_spec", None)
    if isinstance(own, str):
        yield own
    home = _entry_module(pipeline)
    if home:
        found = _attribute_in(home, pipeline)
        if found:
            yield found
    for part in os.environ.get("REWIND_PIPELINES", "").split(","):
        if part.strip():
            yield part.strip()
    from ..pipelines import BUILTIN_SPECS

    yield from BUILTIN_SPECS
    for name in list(sys.modules):
        found = _attribute_in(name, pipeline)
        if found:
            yield found


def check_spec(spec: str, name: str, graph_id: str) -> Pipeline:
    """Import `spec` and return its pipeline called `name` with that graph id, or refuse."""
    try:
        found = load_pipeline_spec(spec)
    except RewindError as e:
        raise InvalidRequest(f"pipeline {name!r}: its import spec {spec!r} does not import "
                             f"({e}); workers could not load it", field="pipeline") from e
    for p in found:
        if p.name == name:
            if p.graph_id != graph_id:
                raise InvalidRequest(
                    f"pipeline {name!r} imported from {spec!r} is another graph (graph id "
                    f"{p.graph_id[:12]} here, {graph_id[:12]} expected); the module builds it "
                    "differently each time it is imported. Build it once at module level",
                    field="pipeline")
            return p
    raise InvalidRequest(f"{spec!r} holds no pipeline named {name!r} (it holds "
                         f"{', '.join(p.name for p in found) or 'none'})", field="pipeline")


def resolve_spec(pipeline: Pipeline) -> str:
    """The import spec workers load `pipeline` by; `InvalidRequest` when there is none."""
    tried = []
    for spec in dict.fromkeys(_candidate_specs(pipeline)):
        tried.append(spec)
        try:
            check_spec(spec, pipeline.name, pipeline.graph_id)
        except RewindError:
            continue
        return spec
    home = _entry_module(pipeline) or "?"
    where = ("a script run as __main__" if home in _UNIMPORTABLE else f"module {home!r}")
    raise InvalidRequest(
        f"pipeline {pipeline.name!r} is not importable by workers: no `module:attribute` "
        f"names it (its nodes come from {where}). Define it at module level in an importable "
        "module and pass pipeline='package.module:attribute' (or list that spec in "
        "REWIND_PIPELINES); nothing was forked", field="pipeline")


def pipeline_from_spec(rw: Any, spec: str) -> Pipeline:
    """`pipeline='pkg.mod:attr'` from the caller: import it, register it with `rw`."""
    found = load_pipeline_spec(spec)
    if len(found) != 1:
        raise InvalidRequest(f"pipeline spec {spec!r} names {len(found)} pipelines; name one",
                             field="pipeline")
    return rw.pipeline(found[0])
