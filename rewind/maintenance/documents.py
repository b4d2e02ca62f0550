"""The export document, as pydantic (v2) models: what `import_run` accepts, field by field.

The row models are built from the store's schema (`rewind.store.schema`): one column list, one
meaning per column (`Column.kind`), so a column added to the schema is importable at once.
Values are checked strictly (a string is never taken for a number, NaN and 2**70 are refused,
a lone surrogate is refused). Every run id the document brings (a run's id and parent, a step's
run, state app and source run, a cache entry's source run, a saved state's app, the missing
ancestors) must be a plain name (`rewind.paths.SAFE_ID`): an id is used as a folder name by
`export-burr`, and `/tmp/victim` or `../..` must never get that far. The whole document is
also refused when nested deeper than `rewind.paths.MAX_JSON_DEPTH` (a RecursionError later). `parse(doc)` returns the validated `ExportDocument` or raises
`InvalidRequest` naming the offending place: "import document: runs[0].status must be one of
...". Checks across parts of the document (ids that refer to each other, blobs that match
their hashes) are `references.check`'s.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Annotated, Any, Callable, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model
from pydantic_core import PydanticCustomError

from ..errors import InvalidRequest
from ..models import RUN_STATUSES, STEP_STATUSES
from ..paths import SAFE_ID_RULE, is_safe_id, json_problem
from ..store import SCHEMA_VERSION
from ..store.rows import DOC_KEY, PARTITION_KEY, REFS_KEY, STEP_DOC_KEY
from ..store.schema import CACHE, NODES, RUNS, Table
from .export import EXPORT_FORMAT, EXPORT_VERSION

HASH = re.compile(r"^[0-9a-f]{64}$")
_INT_MAX = 2**63 - 1


def fail(what: str, sub: str = "") -> None:
    """Refuse a value: `what` follows its path in the message; `sub` extends the path."""
    raise PydanticCustomError("rewind", "{what}", {"what": what, "sub": sub})


# --- one value --------------------------------------------------------------------------------
def text(value: Any, ident: bool = False) -> str:
    if not isinstance(value, str):
        fail(f"must be a string, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        fail("is not valid Unicode (a lone surrogate)")
    if ident:
        if not value or len(value) > 500:
            fail("must be a non-empty string of at most 500 characters")
        if "\x00" in value:
            fail("contains a NUL character")
    return value


def run_ident(value: Any) -> str:
    """A run id: a plain name, never a path (see the module's docstring)."""
    value = text(value)
    if not is_safe_id(value):
        fail(f"must be a run id ({SAFE_ID_RULE} characters), not {value[:140]!r}")
    return value


def integer(value: Any) -> int:
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        fail(f"must be an integer, not {type(value).__name__}")
    if abs(value) > _INT_MAX:
        fail(f"is out of range ({value})")
    return value


def number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(f"must be a number, not {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        fail(f"must be a finite number, not {value}")
    return value


def sha256(value: Any, sub: str = "") -> str:
    if not isinstance(value, str) or not HASH.match(value):
        fail(f"must be a sha256 hex digest, not {str(value)[:80]!r}", sub)
    return value


def json_text(value: Any) -> str:
    value = text(value)
    try:
        json.loads(value)
    except ValueError:
        fail("is not valid JSON")
    return value


def refs(value: Any) -> str:
    data = json.loads(json_text(value))
    if not isinstance(data, dict):
        fail("must be a JSON object of {field: blob hash}")
    for k, h in data.items():
        if h is not None:  # null: the step removed the field
            sha256(h, f"[{k!r}]")
    return value


def one_of(choices: tuple) -> Callable:
    def check(value: Any) -> str:
        if value not in choices:
            fail(f"must be one of {', '.join(choices)}, not {str(value)[:40]!r}")
        return value
    return check


KINDS: dict = {
    "ident": lambda v: text(v, ident=True), "run_id": run_ident, "text": text, "int": integer,
    "number": number, "hash": sha256, "json": json_text, "refs": refs, "run_status": one_of(RUN_STATUSES),
    "step_status": one_of(STEP_STATUSES), "any": lambda v: v,
}


def _column_check(kind: str, required: bool, default: Any) -> Callable:
    check = KINDS[kind]

    def validate(value: Any) -> Any:
        if value is None:
            if default is not None:
                return default
            if required:
                fail("is missing")
            return None
        return check(value)
    return validate


# the columns that hold a run id (the schema calls them "ident", like node and pipeline names)
RUN_ID_COLUMNS = {(RUNS.name, "id"), (RUNS.name, "parent_id"), (NODES.name, "run_id"),
                  (NODES.name, "state_app_id"), (NODES.name, "source_run"),
                  (CACHE.name, "source_run")}


def row_model(table: Table, name: str) -> type:
    """A strict pydantic model of one row of `table` (unknown fields refused)."""
    fields: dict = {}
    for c in table.columns:
        kind = "run_id" if (table.name, c.name) in RUN_ID_COLUMNS else c.kind
        annotated = Annotated[Any, BeforeValidator(_column_check(kind, c.required, c.default))]
        default = Field(...) if c.required and c.default is None else Field(None, validate_default=True)
        fields[c.name] = (annotated, default)
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


RunRow = row_model(RUNS, "RunRow")
NodeRow = row_model(NODES, "NodeRow")
CacheRow = row_model(CACHE, "CacheRow")


# --- the parts that are not table rows ----------------------------------------------------------
def _state(value: Any) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            fail("is not valid JSON")
    if not isinstance(value, dict) or not isinstance(value.get(REFS_KEY, {}), dict):
        fail(f"must be an object with a {REFS_KEY!r} object or a {DOC_KEY!r} hash")
    for k, h in value.get(REFS_KEY, {}).items():
        sha256(h, f".{REFS_KEY}[{k!r}]")
    for key in (DOC_KEY, STEP_DOC_KEY):
        if key in value:
            sha256(value[key], f".{key}")
    try:
        dumped = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
        dumped.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        fail("holds a value JSON cannot carry (NaN or invalid Unicode)")
    if "\\u0000" in dumped:
        fail("contains a NUL character")
    return value


class StateRow(BaseModel):
    """A Burr state row: the refs of a saved state (by doc hash, or inline in the first layout)."""

    model_config = ConfigDict(extra="forbid")
    partition_key: Annotated[Any, BeforeValidator(text)] = PARTITION_KEY
    app_id: Annotated[Any, BeforeValidator(run_ident)]
    sequence_id: Annotated[Any, BeforeValidator(integer)]
    position: Annotated[Any, BeforeValidator(lambda v: text(v, ident=True))]
    status: Annotated[Any, BeforeValidator(lambda v: text(v, ident=True))]
    state: Annotated[Any, BeforeValidator(_state)]

    @property
    def as_text(self) -> str:
        return json.dumps(self.state, sort_keys=True, separators=(",", ":"), allow_nan=False)

    @property
    def inline_refs(self) -> dict:
        return self.state.get(REFS_KEY, {})

    @property
    def doc_hash(self) -> Optional[str]:
        return self.state.get(DOC_KEY) or self.state.get(STEP_DOC_KEY)


def _edge(value: Any) -> tuple:
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        fail("must be [ord, src, dst, condition]")
    parts = []
    for name, check, v in zip(("ord", "src", "dst", "condition"),
                              (integer, lambda x: text(x, ident=True), text, text), value):
        if v is None and name in ("dst", "condition"):
            parts.append(None)
            continue
        try:
            parts.append(check(v) if v is not None else fail("is missing"))
        except PydanticCustomError as e:
            fail(e.context["what"], f".{name}")
    return tuple(parts)


def _blob(value: Any) -> bytes:
    if not isinstance(value, str):
        fail("must be base64 text")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        fail("is not valid base64")


def _container(kind: type, what: str, non_empty: bool = False) -> Callable:
    def check(value: Any) -> Any:
        if not isinstance(value, kind) or (non_empty and not value):
            fail(what)
        return value
    return check


def _format(value: Any) -> str:
    if value != EXPORT_FORMAT:
        fail(f"must be {EXPORT_FORMAT!r}, not {str(value)[:60]!r}")
    return value


def _version(value: Any) -> int:
    value = integer(value)
    if value > EXPORT_VERSION:
        fail(f"is {value}, newer than this Rewind reads ({EXPORT_VERSION}); upgrade")
    return value


def _schema_version(value: Any) -> int:
    value = integer(value)
    if value > SCHEMA_VERSION:
        fail(f"is {value}, newer than this database's ({SCHEMA_VERSION})")
    return value


HashKey = Annotated[str, BeforeValidator(sha256)]
IdentKey = Annotated[str, BeforeValidator(lambda v: text(v, ident=True))]
RunIdKey = Annotated[str, BeforeValidator(run_ident)]


class ExportDocument(BaseModel):
    """What `export_run` writes and `import_run` reads."""

    model_config = ConfigDict(extra="forbid")
    format: Annotated[Any, BeforeValidator(_format)]
    version: Annotated[Any, BeforeValidator(_version)]
    schema_version: Annotated[Any, BeforeValidator(_schema_version)] = SCHEMA_VERSION
    exported_at: Any = None
    run_id: Annotated[Any, BeforeValidator(run_ident)]
    runs: Annotated[list[RunRow], BeforeValidator(_container(list, "must be a non-empty list", True))]
    missing_ancestors: Annotated[list[RunIdKey], BeforeValidator(
        _container(list, "must be a list of run ids"))] = []
    nodes: Annotated[list[NodeRow], BeforeValidator(_container(list, "must be a list"))] = []
    states: Annotated[list[StateRow], BeforeValidator(_container(list, "must be a list"))] = []
    blobs: Annotated[dict[HashKey, Annotated[bytes, BeforeValidator(_blob)]], BeforeValidator(
        _container(dict, "must be an object of {hash: base64 data}"))] = {}
    cache: Annotated[list[CacheRow], BeforeValidator(_container(list, "must be a list"))] = []
    edges: Annotated[dict[IdentKey, Annotated[list[Annotated[tuple, BeforeValidator(_edge)]],
                                              BeforeValidator(_container(list, "must be a list"))]],
                     BeforeValidator(_container(
                         dict, "must be an object of {graph_id: [[ord, src, dst, condition], ...]}"))] = {}


# --- errors -------------------------------------------------------------------------------------
def where(loc: tuple) -> str:
    """A pydantic error location as the document's path: runs[0].status, blobs[0123abcd…]."""
    out = ""
    for i, part in enumerate(loc):
        if part == "[key]":
            out += " key"
        elif isinstance(part, int):
            out += f"[{part}]"
        elif i == 0:
            out += str(part)
        elif i == 1 and loc[0] == "blobs":
            out += f"[{str(part)[:12]}…]"
        elif i == 1 and loc[0] == "edges":
            out += f"[{part!r}]"
        else:
            out += f".{part}"
    return out or "the document"


def _message(err: dict) -> str:
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        parent, name = where(loc[:-1]), loc[-1]
        return f"{parent} has unknown field(s) {name!r}"
    if err["type"] == "missing":
        return f"{where(loc)} is missing"
    if err["type"] in ("model_type", "model_attributes_type", "dict_type"):
        return f"{where(loc)} must be an object, not {type(err.get('input')).__name__}"
    ctx = err.get("ctx") or {}
    if err["type"] == "rewind":
        return f"{where(loc)}{ctx.get('sub', '')} {ctx['what']}"
    return f"{where(loc)} {err['msg']}"


def parse(doc: Any) -> ExportDocument:
    """The validated document, or `InvalidRequest` naming the first offending place."""
    if not isinstance(doc, dict):
        raise InvalidRequest(
            f"import document must be an object from export_run, not {type(doc).__name__}"
        )
    problem = json_problem(doc, finite=False)  # before pydantic, json.dumps recurse in it
    if problem:
        raise InvalidRequest(f"import document: {problem}; nothing was imported")
    try:
        return ExportDocument.model_validate(doc)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        more = f" ({len(errors) - 1} more problem(s) in the document)" if len(errors) > 1 else ""
        raise InvalidRequest(f"import document: {_message(errors[0])}{more}") from None
