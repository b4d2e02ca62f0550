"""The dashboard's pure parts without Streamlit: the view-models of the Runs, Fork and Diff
pages on real runs, the step picker's choice logic, the one formatting module, the charts,
and the shape of the app shell (every page guarded, every titled page, loopback by default).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind import Pipeline, action
from rewind_ui import charts, diff_view, fmt, fork_view, runs_view, steps
from rewind_ui import graph as ug

ROOT = Path(__file__).resolve().parents[1]
PURE = ("fmt", "graph", "steps", "charts", "editors", "progress", "runs_view", "fork_view", "diff_view",
        "calls_view")


@action(reads=["question"], writes=["plan"])
def v_plan(state, temperature: float = 0.0):
    return state.update(plan="plan: " + state["question"])


@action(reads=["plan", "question"], writes=["answer"])
def v_answer(state, style: str = "plain"):
    return state.update(answer={"text": state["plan"].upper() + " / " + state["question"], "style": style})


@action(reads=["answer"], writes=["receipt"], determinism="side-effect")
def v_send(state):
    return state.update(receipt=len(state["answer"]["text"]))


PIPELINE = Pipeline(
    name="uiview",
    graph=GraphBuilder().with_actions(plan=v_plan, answer=v_answer, send=v_send)
    .with_transitions(("plan", "answer"), ("answer", "send")).build(),
    entrypoint="plan",
)


@pytest.fixture
def rw(tmp_path):
    rewind.register_pipeline(PIPELINE)
    handle = rewind.Rewind(str(tmp_path / "views.db"))
    yield handle
    handle.close()


@pytest.fixture
def pair(rw):
    root = rw.run(PIPELINE, {"question": "why?"})
    fork = rw.fork(root.id, at="answer", edit={"question": "how?"})
    return rw.get_run(root.id), rw.get_run(fork.id)


# --- no streamlit in the pure modules ------------------------------------------------------------

def _imports(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(("." * node.level) + (node.module or ""))
            if node.level and not node.module:
                names |= {"." + a.name for a in node.names}
    return names


def test_view_models_never_import_streamlit():
    seen, todo = set(), list(PURE)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for imp in _imports(ROOT / "rewind_ui" / f"{name}.py"):
            assert not imp.startswith("streamlit"), f"rewind_ui/{name}.py imports {imp}"
            if imp.startswith(".") and imp.strip("."):
                todo.append(imp.strip(".").split(".")[0])
    assert {"runs_view", "fork_view", "diff_view", "fmt"} <= seen


def test_every_page_runs_the_guard_before_drawing_and_the_shell_names_every_page():
    for page in sorted((ROOT / "pages").glob("*.py")):
        body = [n for n in ast.parse(page.read_text()).body
                if not isinstance(n, (ast.Import, ast.ImportFrom))
                and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        first = ast.unparse(body[0])
        assert first == "shell.page_guard()", f"{page.name} starts with {first!r}"
    from rewind_ui import shell

    assert [p[1] for p in shell.PAGES] == ["Runs", "Fork", "Diff", "Batch", "Blame", "Settings"]
    assert sorted(p[0] for p in shell.PAGES) == sorted(f"pages/{p.name}" for p in (ROOT / "pages").glob("*.py"))


def test_the_server_listens_on_loopback_by_default():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    assert "showSidebarNavigation" not in config.get("client", {})  # it would hide st.navigation


# --- one formatting module ---------------------------------------------------------------------

def test_latency_and_counts_print_the_same_everywhere():
    assert fmt.fmt_ms(1234) == "1.23 s" and fmt.fmt_ms(312.4) == "312 ms" and fmt.fmt_ms(8.5) == "8.5 ms"
    assert fmt.fmt_ms(12_345) == "12.3 s" and fmt.fmt_ms(None) == "—" and fmt.fmt_ms(float("nan")) == "—"
    assert fmt.fmt_count(1234567) == "1,234,567" and fmt.fmt_tokens("x") == "—"
    assert fmt.latency_value(12.345) == 12.3 and fmt.latency_value(None) == 0.0
    step = rewind.Step(node="plan", status="executed", input_hash="a", output_hash="b", tokens=1234,
                       latency_ms=1234.0)
    title = ug.run_graph_spec(["plan"], [], [step])["nodes"][0]["title"]
    assert "1,234 tokens" in title and "1.23 s" in title and "1234 ms" not in title
    assert "1.23 s" in fmt.step_line(step) and "1,234 tokens" in fmt.step_line(step)
    label = fmt.run_label({"id": "r1", "pipeline": "p", "summary": "q " * 40, "parent_id": "r0",
                           "fork_node": "plan"})
    assert label.startswith("r1 · p ↳plan · q q") and label.endswith("…") and len(label) < 80


def test_charts_start_at_zero_and_an_all_zero_chart_is_not_centred_on_zero():
    flat = charts.node_bars("Tokens", ["a", "b"], [0, 0], "tokens", ["#000", "#000"])
    assert tuple(flat.layout.yaxis.range) == (0, 1)
    cmp = charts.compare_bars("Tokens", ["a", "b"], [5, 3], [2, 9], "tokens", delta=True)
    delta = cmp.data[2]
    assert list(delta.y) == [-3, 6] and list(delta.marker.color) == [charts.LESS, charts.MORE]
    assert cmp.layout.yaxis.range is None


# --- the step picker's choices -----------------------------------------------------------------

def test_the_picker_resolves_deep_links_and_clicks():
    choices = steps.numbered([("plan", 1, "executed"), ("critique", 1, "cached"), ("critique", 2, "executed")])
    assert [c.label for c in choices] == ["1. plan — executed", "2. critique — cached", "3. critique#2 — executed"]
    assert steps.resolve(choices, "critique#2") == ("critique#2", None)
    assert steps.resolve(choices, "critique") == ("critique", None)
    assert steps.resolve(choices, "critique#7") == ("critique", None)  # a visit that is not there
    assert steps.resolve(choices, None, default="critique#2") == ("critique#2", None)
    assert steps.resolve(choices, "unknown") == ("plan", "unknown")  # said, not silently swapped
    assert steps.resolve([], "plan") == (None, "plan")
    assert steps.after_click(choices, "critique#2", "critique") == (None, False)  # stays on visit 2
    assert steps.after_click(choices, "plan", "critique") == ("critique", False)
    assert steps.after_click(choices, "plan", "publish") == (None, True)
    assert steps.after_click(choices, "plan", None) == (None, False)


# --- Runs --------------------------------------------------------------------------------------

def test_runs_view_on_a_fork(pair, rw):
    root, fork = pair
    assert runs_view.parse_initial_state('{"question": "x"}') == ({"question": "x"}, None)
    state, problem = runs_view.parse_initial_state("{oops")
    assert state is None and "not valid JSON" in problem and "line 1" in problem
    assert "JSON object" in runs_view.parse_initial_state("[1]")[1]
    assert runs_view.demo_state(["a", "b"], 3, {}) == {"question": "b"}
    assert runs_view.filters("(all)", "failed", 0, "q") == {
        "pipeline": None, "status": "failed", "forks_only": False, "search": "q"}
    assert runs_view.page_count(0, 50) == 1 and runs_view.page_count(101, 50) == 3
    assert runs_view.showing(50, 50, 1234) == "Showing 51–100 of 1,234 runs · click a row to open it"

    metrics = {label: value for label, value, _ in runs_view.run_metrics(fork)}
    assert metrics["Status"] == "completed" and metrics["Steps"] == 3
    assert metrics["Tokens spent"] == fmt.fmt_tokens(fork.spent)
    assert metrics["Trajectory cost"] == fmt.fmt_tokens(fork.trajectory_cost)
    assert metrics["Tokens saved"] == fmt.fmt_tokens(fork.saved)
    assert runs_view.fork_change(root) is None
    assert runs_view.fork_change(fork)["edit"] == {"question": "how?"}
    assert "fork of " + root.id in runs_view.run_caption(fork)

    assert [c.key for c in runs_view.step_choices(fork)] == ["plan", "answer", "send"]
    rows = runs_view.step_rows(fork)
    assert [r["Status"] for r in rows] == ["inherited", "executed", "dry-run"]
    assert all(fmt.LATENCY_COLUMN in r for r in rows)
    (t_title, t_values, t_unit, _), (l_title, _, l_unit, _) = runs_view.chart_series(fork)
    assert t_unit == "tokens" and l_unit == fmt.LATENCY_UNIT and len(t_values) == 3
    step = fork.step("answer")
    assert runs_view.step_title("answer", step) == "#### Step answer · executed"
    assert [m[0] for m in runs_view.step_metrics(step)] == [
        "Step spent", "Step cost", "Step cost (USD)", "Latency", "Occurrence"]

    lin = runs_view.lineage_view({
        "ancestors": [{"id": "gone", "missing": True}, {"id": root.id, "missing": False}],
        "children": [{"id": f"c{i}", "fork_node": "plan", "status": "completed"} for i in range(32)],
    })
    assert lin.ancestors[0] == ("gone", "gone (purged)", False) and lin.ancestors[1][2] is True
    assert len(lin.children) == runs_view.MAX_CHILDREN and lin.more_children == 2


def test_runs_view_alarms_and_audit():
    alarms = [{"node": "b", "input_hash": "i" * 40, "output_hash_a": "x" * 40, "output_hash_b": "y" * 40,
               "run_id": "r", "created_at": 0}, {"node": "a", "input_hash": None, "output_hash_a": None,
                                                 "output_hash_b": None, "run_id": "r", "created_at": None}]
    assert runs_view.alarmed_nodes(alarms) == ["a", "b"]
    assert runs_view.alarm_rows(alarms)[0]["Input hash"] == "i" * 16
    assert "**a**, **b**" in runs_view.alarm_message(["a", "b"])
    report = SimpleNamespace(repeats=2, unstable_nodes=["plan"], rows=[
        SimpleNamespace(node="plan", occurrence=1, status="executed", stable=False, distinct_outputs=2,
                        unstable_fields=["plan"], samples=2)])
    view = runs_view.audit_view(report)
    assert view["rows"][0]["Stable"] == "✗ unstable"
    assert runs_view.audit_verdict(view) == ("warning", "Unstable nodes (2 repeats): plan")


# --- Fork --------------------------------------------------------------------------------------

def test_fork_points_of_an_interrupted_run_are_the_uis_own_records(rw):
    run = rw.run(PIPELINE, {"question": "why?"})
    with rw.store.transaction():  # as if the process died after `plan`
        rw.store.execute("DELETE FROM nodes WHERE run_id = ? AND idx >= 1", (run.id,))
        rw.store.update_run(run.id, status="interrupted")
    run = rw.get_run(run.id)
    nxt = rw.next_node(run.id)
    points = fork_view.fork_points(run, nxt, PIPELINE)
    assert [(p.key, p.status, p.reached) for p in points] == [
        ("plan", "executed", True), ("answer", ug.NOT_REACHED, False)]
    pending = points[-1]
    assert not isinstance(pending, rewind.Step)
    assert pending.inputs() == {"plan": "plan: why?", "question": "why?"}  # only what it reads
    assert pending.params == {"style": "plain"} and pending.reason == fork_view.NOT_REACHED_REASON
    assert points[0].inputs() == {"question": "why?"}
    assert [c.label for c in fork_view.choices(points)] == ["1. plan — executed", "2. answer — not reached"]
    assert fork_view.inherited_keys(points, "answer") == ["plan"]


def test_fork_view_params_preview_and_summary(pair):
    root, fork = pair
    point = fork_view.from_step(root.step("answer"))
    assert fork_view.shown_params(PIPELINE, point) == [("style", "plain", "plain")]
    diffs = fork_view.text_diffs({"question": "how?", "n": 2}, {"question": "why?", "n": 1})
    assert len(diffs) == 1 and diffs[0][0] == "question" and ">why</del>" in diffs[0][1] and ">how</ins>" in diffs[0][1]
    assert fork_view.side_effect_nodes(PIPELINE) == ["send"]
    assert "**send**" in fork_view.side_effects_warning(["send"])
    last = fork_view.last_fork(fork, root, "answer")
    assert last["executed"] == ["answer"] and last["dry_run"] == ["send"]
    assert last["original"] == root.trajectory_cost and last["cost"] == fork.trajectory_cost
    assert dict(fork_view.last_fork_metrics(last))["Nodes re-executed"] == 1
    assert fork_view.last_fork_caption(last) == "re-executed: answer · cached: none · dry-run: send"


# --- Diff --------------------------------------------------------------------------------------

def test_diff_view_of_a_fork(pair, rw):
    root, fork = pair
    d = rw.diff(root.id, fork.id)
    assert diff_view.default_pair({"id": fork.id, "parent_id": root.id}, []) == (root.id, fork.id)
    assert diff_view.default_pair(None, [{"id": "new"}, {"id": "old"}]) == ("old", "new")
    assert diff_view.default_pair(None, []) == (None, None)
    kind, text = diff_view.verdict(d)
    assert kind == "warning" and "Diverged at **answer**" in text
    m = {label: (value, delta) for label, value, delta, _ in diff_view.metrics(d)}
    assert m["First divergence"] == ("answer", None) and m["Identical nodes"][0] == "1 / 2"
    # like with like: trajectory cost A against B, the change only where inputs changed
    assert m["Trajectory cost B"] == (fmt.fmt_tokens(d.cost_b), d.cost_delta)
    assert m["Spent by B"] == (fmt.fmt_tokens(d.tokens_b), None)
    assert diff_view.first_diverged(d) == "answer"
    assert [c.label for c in diff_view.choices(d)][0] == "plan — identical"
    assert [r["Match"] for r in diff_view.table(d, with_noise=False)] == ["✓ same", "✗ differs", "– n/a"]
    assert "Noise" in diff_view.table(d, with_noise=True)[0]
    row = diff_view.rows_by_key(d)["answer"]
    assert any(r["Path"] for r in diff_view.field_rows(row))
    assert diff_view.fork_caption(root, fork).startswith("B is a fork of A at **answer**")
    assert diff_view.fork_caption(fork, root) is None
    a_cost, b_cost, delta = diff_view.cost_series(d)
    assert len(a_cost) == len(b_cost) == len(delta) == 3
    assert delta[0] == 0  # plan is inherited: its inputs did not change
    assert diff_view.noise_rows(d, 3) == [{"Node": "answer", "Noise (k=3)": "—"}]


def test_a_preview_cuts_long_lists_and_dicts_not_only_strings():
    """33k short strings in a list were 2.4 MB on a page: a preview keeps the first items."""
    value = {"items": [f"s{i}" for i in range(33_000)], "map": {f"k{i}": i for i in range(500)},
             "text": "x" * 5_000}
    shown = fmt.preview_value(value, limit=100, items=10)
    assert shown["items"][:10] == [f"s{i}" for i in range(10)]
    assert shown["items"][10] == "… 32,990 more items, 33,000 in all" and len(shown["items"]) == 11
    assert len(shown["map"]) == 11 and shown["map"]["…"] == "490 more keys, 500 in all"
    assert shown["text"].startswith("x" * 100) and "5,000 in all" in shown["text"]
    assert fmt.preview_value([1, 2], items=10) == [1, 2]


def test_the_node_a_run_never_reached_offers_its_large_inputs_only_when_asked():
    pipeline = SimpleNamespace(reads=lambda node: ["big", "small"], params=lambda node: {})
    point = fork_view.not_reached({"node": "n", "occurrence": 1,
                                   "state": {"big": "x" * 300_000, "small": "s"}}, pipeline)
    assert set(point.large_inputs()) == {"big"} and point.large_inputs()["big"] >= 300_000
    assert point.inputs(skip={"big"}) == {"small": "s"}
