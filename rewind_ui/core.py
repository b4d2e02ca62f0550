"""The dashboard's handle on Rewind: one `Rewind` per (store URL, owner, admin) scope
(st.cache_resource), cached read queries keyed by that scope and invalidated by a version
counter, the demo pipeline and the registered ones.

The scope comes from rewind_ui/access.py: the signed-in user's email as owner (an admin's
handle sees every run), or no owner in single-user mode. Every cached query takes the scope as
its first argument, so one user's cached rows can never answer another user's query.

Everything here goes through the public API of `rewind`; pages never see SQL. Records that
rewind returns as dicts today (lineage, alarms, the next node) are read through `_get`, which
also reads attributes, so the typed records rewind is moving to need no change here.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from typing import Any, Optional

import streamlit as st

import rewind
from rewind import Rewind

from . import access, redact
from .fmt import fmt_ts, to_jsonable

DEMO_MODULE = "rewind.pipelines.research"
QUERY_TTL_S = 5



def _get(record: Any, name: str, default: Any = None) -> Any:
    """A field of a rewind record, whether it is a dict or a typed record."""
    if record is None:
        return default
    if isinstance(record, dict):
        return record.get(name, default)
    return getattr(record, name, default)


# --- the store -----------------------------------------------------------------------------------

def db_url() -> str:
    """`REWIND_DB`, else ./rewind.db; a SQLite path is made absolute so it keys one handle.
    A REWIND_DB set but empty stays empty: opening it is refused, as the CLI and the API refuse it."""
    url = os.environ.get("REWIND_DB", "rewind.db").strip()
    if url and "://" not in url and url != ":memory:":
        url = os.path.abspath(url)
    return url


def scope() -> tuple:
    """(url, owner, admin) of this script run; raises access.AccessDenied for a visitor who
    is not signed in while sign-in is configured (never a see-all scope by accident)."""
    v = access.viewer()
    return (db_url(), v.owner, bool(v.admin and v.owner is not None))


@st.cache_resource(show_spinner=False, max_entries=256)
def _handle(url: str, owner: Optional[str] = None, admin: bool = False) -> Rewind:
    url = url or None  # empty: REWIND_DB is set but empty, and opening it names it
    if owner is None:
        return Rewind(url)  # single-user mode: every run
    # the core's run isolation: another owner's runs are not found through this handle
    return Rewind(url, owner=owner, admin=admin)


_demo_lock = threading.Lock()
_demo_state: dict = {"module": None, "error": None, "tried_at": 0.0}


def demo_module() -> Optional[Any]:
    """`rewind.pipelines.research` if it can be imported (registered for every handle)."""
    with _demo_lock:
        if _demo_state["module"] is not None:
            return _demo_state["module"]
        if time.time() - _demo_state["tried_at"] < 2.0 and _demo_state["error"]:
            return None
        _demo_state["tried_at"] = time.time()
        try:
            mod = importlib.import_module(DEMO_MODULE)
            pipe = getattr(mod, "pipeline")
            if callable(pipe) and not isinstance(pipe, rewind.Pipeline):
                pipe = pipe()
            rewind.register_pipeline(pipe)
        except Exception as e:  # not written yet, or broken: the dashboard still works
            _demo_state["error"] = f"{type(e).__name__}: {e}"
            return None
        _demo_state["module"], _demo_state["error"] = mod, None
        return mod


def demo_error() -> Optional[str]:
    return _demo_state["error"]


def get_rw() -> Rewind:
    demo_module()
    return _handle(*scope())


def read_only_help(what: str) -> Optional[str]:
    """Why a button that would write is disabled (`what`: "forked", "run"), or None when the
    store can be written."""
    if getattr(get_rw().store, "read_only", False):
        return f"The store is open read-only: nothing can be {what}"
    return None


def rw_url() -> str:
    return db_url()


def demo_pipeline() -> Optional[Any]:
    mod = demo_module()
    if mod is None:
        return None
    pipe = getattr(mod, "pipeline")
    return pipe() if callable(pipe) and not isinstance(pipe, rewind.Pipeline) else pipe


def demo_questions() -> list:
    mod = demo_module()
    return list(getattr(mod, "SAMPLE_QUESTIONS", []) or []) if mod is not None else []


def sample_state(pipeline: Any) -> dict:
    state = dict(getattr(pipeline, "sample_state", {}) or {})
    if not state and getattr(pipeline, "name", None) == getattr(demo_pipeline(), "name", object()):
        qs = demo_questions()
        if qs:
            state = {"question": qs[0]}
    return state


# --- versions: invalidating cached queries after a run or a fork ------------------------------------

@st.cache_resource(show_spinner=False)
def _versions() -> dict:
    return {"lock": threading.Lock(), "v": {}}


def version() -> int:
    return int(_versions()["v"].get(db_url(), 0))


def bump() -> None:
    """Call after anything that writes (run, fork, purge): every cached query is stale."""
    box = _versions()
    with box["lock"]:
        box["v"][db_url()] = box["v"].get(db_url(), 0) + 1


# --- cached queries (keyed by url and version; short ttl for writes from other processes) ------

def _run_row(r: Any) -> dict:
    return {
        # plain strings: cache_data pickles rows, and a Streamlit reload of `rewind` makes a
        # new RunStatus that the old handle's enum objects are no longer
        "id": r.id, "pipeline": r.pipeline, "summary": r.summary, "status": str(r.status),
        "created_at": r.created_at, "started": fmt_ts(r.created_at), "steps": r.step_count,
        "tokens": r.total_tokens, "tokens_saved": r.tokens_saved,
        "latency_ms": r.latency_ms, "parent_id": r.parent_id, "fork_node": r.fork_node,
    }


@st.cache_data(ttl=QUERY_TTL_S, max_entries=256, show_spinner=False)
def _runs_page(sc: tuple, ver: int, pipeline: Optional[str], status: Optional[str],
               forks_only: bool, search: Optional[str], limit: int, offset: int,
               after: Optional[str] = None) -> list:
    # keyset (`after`): the page after that run, not `offset` rows scanned and dropped
    runs = _handle(*sc).list_runs(pipeline=pipeline, status=status, search=search, limit=limit,
                                  offset=0 if after else offset, after=after, forks_only=forks_only)
    return [_run_row(r) for r in runs]


@st.cache_data(ttl=QUERY_TTL_S, max_entries=256, show_spinner=False)
def _runs_count(sc: tuple, ver: int, pipeline: Optional[str], status: Optional[str],
                forks_only: bool, search: Optional[str]) -> int:
    filters: dict = {"pipeline": pipeline, "status": status, "search": search}
    if forks_only:
        filters["forks_only"] = True
    return int(_handle(*sc).count_runs(**filters))


def runs_page(pipeline=None, status=None, forks_only=False, search=None, limit=50, offset=0,
              after=None) -> list:
    """A page of run rows, by `offset` or (faster, deep in a large store) `after` a run id."""
    get_rw()
    return _runs_page(scope(), version(), pipeline or None, status or None, bool(forks_only),
                      (search or "").strip() or None, int(limit), int(offset), after or None)


def runs_count(pipeline=None, status=None, forks_only=False, search=None) -> int:
    get_rw()
    return _runs_count(scope(), version(), pipeline or None, status or None, bool(forks_only),
                       (search or "").strip() or None)


def _sees_all(sc: tuple) -> bool:
    return sc[1] is None or bool(sc[2])


def _visible_in(sc: tuple) -> Any:
    """visible(run_id) for this scope, memoised for one record (the scrubbers ask per step)."""
    rw, memo = _handle(*sc), {}

    def visible(run_id: str) -> bool:
        if run_id not in memo:
            try:
                rw.get_run(run_id)
                memo[run_id] = True
            except rewind.RewindError:
                memo[run_id] = False
        return memo[run_id]

    return visible


@st.cache_resource(ttl=QUERY_TTL_S * 4, max_entries=64, show_spinner=False)
def _get_run(sc: tuple, ver: int, run_id: str) -> Any:
    run = _handle(*sc).get_run(run_id)
    # a cache hit's reason names the run the entry came from: maybe another owner's
    return run if _sees_all(sc) else redact.run(run, _visible_in(sc))


def get_run(run_id: str) -> Any:
    """The full Run (raises rewind.NotFound)."""
    get_rw()
    return _get_run(scope(), version(), str(run_id))


def find_run(run_id: Optional[str]) -> Optional[Any]:
    if not run_id:
        return None
    try:
        return get_run(run_id)
    except rewind.RewindError:
        return None


@st.cache_data(ttl=QUERY_TTL_S, max_entries=128, show_spinner=False)
def _lineage(sc: tuple, ver: int, run_id: str) -> dict:
    lin = _handle(*sc).lineage(run_id)

    def row_of(a: Any) -> Any:  # an ancestor's run row (a dict today), or the record itself
        return _get(a, "row") if _get(a, "row") is not None else a

    return {
        "ancestors": [
            {"id": _get(a, "id"), "missing": bool(_get(a, "missing", False)),
             "fork_node": _get(row_of(a), "fork_node"), "summary": _get(row_of(a), "summary")}
            for a in _get(lin, "ancestors", [])
        ],
        "children": [
            {"id": _get(c, "id"), "fork_node": _get(c, "fork_node"), "status": _get(c, "status"),
             "total_tokens": _get(c, "total_tokens")}
            for c in _get(lin, "children", [])
        ],
    }


def visible(run_id: Optional[str]) -> bool:
    """Whether this viewer may see run `run_id` (another owner's run is not found)."""
    return find_run(run_id) is not None


def lineage(run_id: str) -> dict:
    """{"ancestors": [{id, missing, fork_node, summary}], "children": [{id, fork_node, status,
    total_tokens}]} (oldest ancestor first). For an owner's scope, a relative owned by someone
    else is never named: an ancestor shows as missing without its summary, a child is left out
    (the core hides them too; this holds whatever the core's lineage returns)."""
    get_rw()
    sc = scope()
    lin = _lineage(sc, version(), str(run_id))
    if _sees_all(sc):
        return lin
    return {
        "ancestors": [a if visible(a["id"]) else
                      {"id": "another owner's run", "missing": True, "fork_node": None, "summary": None}
                      for a in lin["ancestors"]],
        "children": [c for c in lin["children"] if visible(c["id"])],
    }


def next_node(run_id: str) -> Optional[dict]:
    """The visit an interrupted run never reached, {"node", "occurrence", "state"} (the state
    saved before it); None when there is none or it cannot be told."""
    try:
        nxt = get_rw().next_node(run_id)
    except rewind.RewindError:
        return None
    if nxt is None:
        return None
    return {"node": _get(nxt, "node"), "occurrence": int(_get(nxt, "occurrence", 1) or 1),
            "state": dict(_get(nxt, "state") or {})}


@st.cache_resource(ttl=QUERY_TTL_S * 4, max_entries=64, show_spinner=False)
def _graph(sc: tuple, ver: int, run_id: str) -> tuple:
    rw = _handle(*sc)
    nodes, edges = rw.graph(_get_run(sc, ver, run_id))
    return list(nodes), [tuple(e) for e in edges]


def graph_of(run: Any) -> tuple:
    get_rw()
    return _graph(scope(), version(), run.id)


ALARM_FIELDS = ("node", "input_hash", "output_hash_a", "output_hash_b", "run_id", "created_at")


@st.cache_data(ttl=QUERY_TTL_S, max_entries=8, show_spinner=False)
def _alarms(sc: tuple, ver: int) -> list:
    return [{k: _get(a, k) for k in ALARM_FIELDS} for a in _handle(*sc).alarms()]


def alarms() -> list:
    get_rw()
    return _alarms(scope(), version())


def alarms_for(run: Any) -> list:
    """Nondeterminism alarms that concern a run: raised by it, or on a (node, input hash) it ran.
    For an owner's scope, only alarms raised by runs this viewer can see: an alarm raised by
    another owner's run would name that run and tell what their step returned."""
    keys = {(s.node, s.input_hash) for s in run.steps}
    found = [a for a in alarms() if a["run_id"] == run.id or (a["node"], a["input_hash"]) in keys]
    if _sees_all(scope()):
        return found
    return [a for a in found if a["run_id"] == run.id or visible(a["run_id"])]


@st.cache_resource(ttl=QUERY_TTL_S * 4, max_entries=32, show_spinner=False)
def _diff(sc: tuple, ver: int, a: str, b: str) -> Any:
    d = _handle(*sc).diff(a, b)
    return d if _sees_all(sc) else redact.diff(d, _visible_in(sc))


def diff(a: str, b: str) -> Any:
    get_rw()
    return _diff(scope(), version(), str(a), str(b))


def noise_diff(a: str, b: str, samples: int, on_progress: Any = None) -> Any:
    """The diff with a noise band of `samples` re-samples per node (spends tokens; not cached)."""
    sc = scope()
    d = get_rw().diff(str(a), str(b), noise_samples=int(samples), on_progress=on_progress)
    return d if _sees_all(sc) else redact.diff(d, _visible_in(sc))


@st.cache_data(ttl=QUERY_TTL_S, max_entries=8, show_spinner=False)
def _cache_stats(sc: tuple, ver: int) -> dict:
    stats = _handle(*sc).cache_stats()
    return dict(stats) if isinstance(stats, dict) else to_jsonable(stats)


def cache_stats() -> dict:
    get_rw()
    return _cache_stats(scope(), version())


def pipeline_names() -> list:
    return sorted(get_rw().pipelines())


def find_pipeline(name: str) -> Optional[Any]:
    try:
        return get_rw().pipeline(name)
    except rewind.RewindError:
        return None



# --- maintenance: admins only ----------------------------------------------------------------------

def can_maintain() -> bool:
    """Purging the cache and gc touch every owner's data: admins only (and the single user)."""
    return access.viewer().admin


def _require_admin(what: str) -> Rewind:
    v = access.viewer()
    if not v.admin:
        raise access.AccessDenied(f"{what} is for admins only ({access.ADMINS_ENV}); {v.owner} is not one")
    return get_rw()


def purge_cache(older_than_days: float, dry_run: bool = False) -> int:
    return int(_require_admin("purging the cache").purge_cache(float(older_than_days), dry_run=dry_run))


def gc(older_than_days: float, dry_run: bool = False) -> dict:
    return dict(_require_admin("gc").gc(float(older_than_days), dry_run=dry_run))
