"""A visit served without stepping Burr is indistinguishable from one Burr stepped (issue 16).

The stepper (rewind/engine/stepper.py) serves cache hits and dry runs itself, doing to the state
what `Application.step` does and calling the same lifecycle hooks. Each of Burr's example apps
(tests/burr_apps.py) is run, then forked with and without an edit, twice: once as shipped, once
with the stepper made to hand every visit to Burr (`burr_inputs` answering None, which is its
"let Burr see these inputs" answer). The two forks must write the same step rows and the same
Burr state rows, and every hook must hear the same calls with the same arguments, in order.
"""

import copy
import re

import pytest
from burr.lifecycle import (PostApplicationExecuteCallHook, PostRunStepHook,
                            PreApplicationExecuteCallHook, PreRunStepHook)

from rewind import Rewind
from rewind.engine import runner, stepper
from rewind.store import PARTITION_KEY
from tests.burr_apps import APPS, CALLS
from tests.test_burr_fidelity import clean_calls, run_turns  # noqa: F401 (an autouse fixture)


class Spy(PreRunStepHook, PostRunStepHook, PreApplicationExecuteCallHook,
          PostApplicationExecuteCallHook):
    """Every lifecycle call of a run's application, with the state it was handed (by value)."""

    def __init__(self, log: list):
        self.log = log

    @staticmethod
    def _state(state):
        return copy.deepcopy(state.get_all())

    def pre_run_execute_call(self, *, app_id, partition_key, state, method, **kw):
        self.log.append(("pre_call", partition_key, str(method), self._state(state)))

    def post_run_execute_call(self, *, app_id, partition_key, state, method, exception, **kw):
        self.log.append(("post_call", partition_key, str(method), self._state(state), exception))

    def pre_run_step(self, *, app_id, partition_key, sequence_id, state, action, inputs, **kw):
        self.log.append(("pre_step", action.name, sequence_id, self._state(state),
                         sorted(k for k in inputs if not k.startswith("__"))))

    def post_run_step(self, *, app_id, partition_key, sequence_id, state, action, result,
                      exception, **kw):
        self.log.append(("post_step", action.name, sequence_id, self._state(state),
                         copy.deepcopy(result), type(exception).__name__ if exception else None))


@pytest.fixture
def spied(monkeypatch):
    """Hook calls by run id: the spy rides in every application and in the stepper."""
    calls: dict = {}

    def hooks(ctx):
        return [*original(ctx), Spy(calls.setdefault(ctx.run_id, []))]

    original = stepper.burr_hooks
    monkeypatch.setattr(stepper, "burr_hooks", hooks)
    monkeypatch.setattr(runner, "burr_hooks", hooks)
    return calls


def burr_steps_everything(monkeypatch) -> None:
    """The stepper hands every visit to Burr's own step (the path before issue 16)."""
    monkeypatch.setattr(stepper, "burr_inputs", lambda action, inputs: None)


RUN_ID = re.compile(r"\b[0-9a-f]{16}\b")  # the databases name their runs differently


def trajectory(rw: Rewind, run) -> list:
    """A run as written, without what names it: its step rows and the Burr state of each."""
    out = []
    for s in rw.get_run(run.id).steps:
        saved = rw.store.persister().load(PARTITION_KEY, s.state_app_id or run.id, s.sequence_id) \
            if s.sequence_id is not None else None
        out.append((s.index, s.node, s.occurrence, str(s.status), s.input_hash, s.output_hash,
                    s.sequence_id, s.tokens, s.tokens_saved, RUN_ID.sub("<run>", s.reason),
                    None if saved is None else (saved["position"], saved["status"],
                                                saved["sequence_id"], saved["state"].get_all())))
    return out


def forks(rw: Rewind, name: str, spied: dict) -> list:
    """(trajectory, hook calls) of a no-edit fork and an edit fork of app `name`."""
    app = APPS[name]()
    run = run_turns(rw, app)
    out = []
    for kwargs in ({"at": app.mid, "occurrence": app.mid_occurrence},
                   {"at": app.edit_at, "occurrence": app.edit_occurrence, "edit": app.edit}):
        CALLS.clear()
        fork = rw.fork(run.id, **kwargs)
        # sorted: sub-applications on worker threads call their nodes in any order
        out.append((str(fork.status), fork.error, sorted(CALLS), trajectory(rw, fork),
                    spied.get(fork.id, [])))
    return out


@pytest.mark.parametrize("name", list(APPS))
def test_served_visits_write_and_call_what_burrs_steps_do(tmp_path, monkeypatch, spied, name):
    with Rewind(str(tmp_path / "served.db")) as rw:
        served = forks(rw, name, spied)
    burr_steps_everything(monkeypatch)
    with Rewind(str(tmp_path / "stepped.db")) as rw:
        stepped = forks(rw, name, spied)
    for (label, a, b) in zip(("no-edit fork", "edit fork"), served, stepped):
        assert a[:3] == b[:3], f"{name}, {label}: status, error or calls differ"
        assert a[3] == b[3], f"{name}, {label}: the rows written differ"
        assert a[4] == b[4], f"{name}, {label}: the hooks heard different calls"
        assert a[4], f"{name}, {label}: the spy heard nothing"



@pytest.mark.parametrize("name", list(APPS))
def test_served_visits_with_only_rewinds_hooks_write_what_burrs_steps_do(tmp_path, monkeypatch,
                                                                         name):
    """With no hook but Rewind's own, a served visit calls only the two that record it (the
    step recorder and Burr's persister hook, `burr_compat.own_hooks`): the rows and Burr states
    it writes are still exactly those of Burr's own step."""
    with Rewind(str(tmp_path / "served.db")) as rw:
        served = [f[:4] for f in forks(rw, name, {})]
    burr_steps_everything(monkeypatch)
    with Rewind(str(tmp_path / "stepped.db")) as rw:
        stepped = [f[:4] for f in forks(rw, name, {})]
    assert served == stepped
    assert any(row[3] == "cached" for f in served for row in f[3]), "no visit was served"

def test_a_served_fork_builds_no_burr_application(tmp_path, monkeypatch):
    """The point of it: a fork served wholly from the cache never builds or steps Burr."""
    app = APPS["collatz"]()
    with Rewind(str(tmp_path / "r.db")) as rw:
        run = run_turns(rw, app)
        built = []
        real = stepper.Stepper.burr_app
        monkeypatch.setattr(stepper.Stepper, "burr_app",
                            lambda self: (self.app is None and built.append(1)) or real(self))
        fork = rw.fork(run.id, at=app.mid)
        assert fork.status == "completed" and {str(s.status) for s in fork.steps} <= {"inherited", "cached"}
        assert built == []
        edited = rw.fork(run.id, at=app.edit_at, edit=app.edit)
        assert edited.status == "completed" and built == [1]  # built once, at the first miss


def test_burr_resumes_and_forks_from_a_served_step(tmp_path):
    """Burr's own rows are written for every served step: Burr's `initialize_from` forks from
    one and computes what plain Burr does from there."""
    from burr.core import ApplicationBuilder

    from tests.test_burr_fidelity import burr_trajectory, visible

    app = APPS["collatz"]()
    with Rewind(str(tmp_path / "r.db")) as rw:
        run = run_turns(rw, app)
        fork = rw.fork(run.id, at=app.mid)
        step = [s for s in fork.steps if str(s.status) == "cached"][2]
        burr = (ApplicationBuilder().with_graph(app.graph)
                .initialize_from(rw.store.persister(), resume_at_next_action=True,
                                 default_state={}, default_entrypoint=app.entrypoint,
                                 fork_from_app_id=fork.id, fork_from_partition_key=PARTITION_KEY,
                                 fork_from_sequence_id=step.sequence_id)
                .with_identifiers(app_id="plain-burr", partition_key=PARTITION_KEY).build())
        assert burr.parent_pointer is not None and burr.parent_pointer.app_id == fork.id
        _, _, final = burr.run(halt_after=["result"])
        expected = burr_trajectory(app.graph, app.entrypoint, app.state, app.turns)
        assert visible(final.get_all()) == expected.states[-1]


# --- Rewind's own shapes: a side effect dry-run on a fork, branches, a loop, params ------------

def shape_runs(rw: Rewind, spied: dict) -> list:
    """A first run, an identical re-run (hits inside a run whose app Burr built), and forks at
    every visit of each shape: no edit, with a param change, and performing side effects."""
    from tests import shapes

    out = []
    for make, state, change in ((shapes.linear, {"topic": "wasps"}, ("plan", {"temperature": 0.5})),
                                (shapes.branching, {"text": "bees " * 9}, None),
                                (shapes.loop, {"goal": "x"}, ("improve", {"suffix": "!"}))):
        pipeline = make()
        runs = [rw.run(pipeline, dict(state)), rw.run(pipeline, dict(state))]
        for s in runs[0].steps:
            runs.append(rw.fork(runs[0].id, at=s.node, occurrence=s.occurrence))
        if change:
            runs.append(rw.fork(runs[0].id, at=change[0], params=change[1]))
        runs.append(rw.fork(runs[0].id, at=runs[0].steps[0].node, allow_side_effects=True))
        out.extend((str(r.status), r.error, trajectory(rw, r), spied.get(r.id, [])) for r in runs)
    return out


def test_shapes_write_and_call_what_burrs_steps_do(tmp_path, monkeypatch, spied):
    with Rewind(str(tmp_path / "served.db")) as rw:
        served = shape_runs(rw, spied)
    burr_steps_everything(monkeypatch)
    with Rewind(str(tmp_path / "stepped.db")) as rw:
        stepped = shape_runs(rw, spied)
    assert len(served) == len(stepped) > 10
    statuses = {row[3] for run in served for row in run[2]}
    assert {"cached", "dry-run", "executed", "inherited"} <= statuses
    for i, (a, b) in enumerate(zip(served, stepped)):
        assert a == b, f"run {i} differs"
