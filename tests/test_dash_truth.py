"""Issue 14 under AppTest: the dashboard tells the truth at a glance. Costs are the core's
(spent, trajectory cost, saved; a state-edit fork's diff has delta 0 on every unchanged node),
model calls are readable text, the Fork page shows a plan before paying and asks for a
confirmation when the plan says so, a bad REWIND_PIPELINES entry is a banner, the model client
is warmed at start, and every smaller point (10) of the issue: a NaN seed, malformed JSON beside
"No changes", `{}` or an unknown field in Start-a-run, `?node=unknown`, a filter with no match,
an all-zero chart, the noise band's detail.
"""

from __future__ import annotations

import json

import pytest
from burr.core.graph import GraphBuilder
from streamlit.testing.v1 import AppTest

import rewind
from rewind import Pipeline, action

# the AppTest helpers every page test uses
from tests.test_pages import APP, TIMEOUT, app, button, goto, metrics, ok, texts  # noqa: E402

PROMPT = "Plan the answer.\nOne point per line.\nQuestion:"


@action(reads=["question"], writes=["plan"])
def d_plan(state, model: str = "sim-small", temperature: float = 0.0):
    return state.update(plan=rewind.llm.chat(
        [{"role": "system", "content": "You plan.\nBriefly."},
         {"role": "user", "content": f"{PROMPT} {state['question']}"}], model=model, temperature=temperature))


@action(reads=["plan"], writes=["notes"])
def d_notes(state):
    return state.update(notes={"lines": state["plan"].count("\n") + 1, "first": state["plan"][:40]})


@action(reads=["question", "notes"], writes=["answer"])
def d_answer(state, model: str = "sim-small", temperature: float = 0.0, seed: int = 0):
    return state.update(answer=rewind.llm.chat(
        [{"role": "user", "content": f"Answer {state['question']} using {state['notes']['first']}"}],
        model=model, temperature=temperature))


@action(reads=["answer"], writes=["summary"])
def d_summary(state, model: str = "sim-small", temperature: float = 0.0):
    return state.update(summary=rewind.llm.chat(
        [{"role": "user", "content": "Summarise: " + state["answer"]}], model=model, temperature=temperature))


@action(reads=["summary"], writes=["receipt"], determinism="side-effect")
def d_send(state):
    return state.update(receipt=len(state["summary"]))


PIPELINE = Pipeline(
    name="dashtruth",
    graph=GraphBuilder().with_actions(plan=d_plan, notes=d_notes, answer=d_answer, summary=d_summary, send=d_send)
    .with_transitions(("plan", "notes"), ("notes", "answer"), ("answer", "summary"), ("summary", "send")).build(),
    entrypoint="plan", sample_state={"question": "Why is the sky blue?"},
)


@action(reads=["x"], writes=["y"])
def z_first(state):
    return state.update(y=state["x"] + 1)


@action(reads=["y"], writes=["z"])
def z_second(state):
    return state.update(z=state["y"] * 2)


FREE = Pipeline(name="dashfree", graph=GraphBuilder().with_actions(first=z_first, second=z_second)
                .with_transitions(("first", "second")).build(), entrypoint="first")


@pytest.fixture
def db(tmp_path, monkeypatch):
    url = str(tmp_path / "truth.db")
    monkeypatch.setenv("REWIND_DB", url)
    monkeypatch.delenv("REWIND_PIPELINES", raising=False)
    monkeypatch.delenv("REWIND_CONFIRM_TOKENS", raising=False)
    rewind.register_pipeline(PIPELINE)
    rewind.register_pipeline(FREE)
    return url


@pytest.fixture
def rw(db):
    handle = rewind.Rewind(db)
    yield handle
    handle.close()


@pytest.fixture
def pair(rw):
    """A root run and a state-edit fork of it at answer (plan and notes inherited)."""
    root = rw.run(PIPELINE, {"question": "Why is the sky blue?"})
    fork = rw.fork(root.id, at="answer", edit={"question": "Why is the sea blue?"})
    assert root.status == fork.status == "completed"
    return rw.get_run(root.id), rw.get_run(fork.id)














def frame(at: AppTest, column: str):
    return next(df.value for df in at.dataframe if column in df.value.columns)


# --- costs ---------------------------------------------------------------------------------------

def test_a_state_edit_forks_diff_shows_delta_zero_on_every_unchanged_node(pair):
    root, fork = pair
    at = ok(app(query={"a": root.id, "b": fork.id}).run())
    table = next(t.value for t in at.table if "Δ cost" in t.value.columns)  # wraps: no scrolling
    rows = {r["Node"]: r for r in table.to_dict("records")}
    assert rows["plan"]["B status"] == "inherited" and rows["notes"]["B status"] == "inherited"
    for node in ("plan", "notes", "send"):  # inputs unchanged: no cost change, whatever B spent
        assert rows[node]["Δ cost"] == 0, rows[node]
        assert rows[node]["A cost"] == rows[node]["B cost"], rows[node]
    assert rows["plan"]["A cost"] > 0  # inherited, but it costs what it cost in A
    m = metrics(at)
    assert m["Trajectory cost A"] == f"{root.trajectory_cost:,}"
    assert m["Trajectory cost B"] == f"{fork.trajectory_cost:,}"
    assert m["Spent by B"] == f"{fork.spent:,}"
    delta = next(x for x in at.metric if x.label == "Trajectory cost B").delta
    changed = sum(rows[n]["Δ cost"] for n in rows)
    assert str(changed) in str(delta)  # the headline is the sum of the per-node changes
    assert any("Trajectory cost in USD" in c for c in texts(at.caption))
    # the cost chart draws the core's delta, not B − A spent
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    bars = {t["name"]: t["y"] for t in spec["data"]}
    assert bars["delta (B − A)"][:2] == [0, 0]


def test_runs_page_and_fork_page_use_the_cores_costs(rw, pair):
    root, fork = pair
    at = ok(app(query={"run": fork.id}).run())
    m = metrics(at)
    assert m["Tokens spent"] == f"{fork.spent:,}"
    assert m["Trajectory cost"] == f"{fork.trajectory_cost:,}"
    assert m["Tokens saved"] == f"{fork.saved:,}"
    assert m["Cost (USD)"] == "$0"  # the simulator's models are in the price table at 0
    steps = frame(at, "Cost")
    assert list(steps["Cost"]) == [s.cost for s in fork.steps]
    # the Fork page's replay summary compares trajectory cost with trajectory cost
    at = ok(app(state={"fork_run": root.id, "fork_node": "answer"}).run())
    at = goto(at, "fork")
    at.number_input(key=f"fk:{root.id}:answer:param:temperature").set_value(0.5)
    ok(at.run())
    button(at, "Replay").click()
    ok(at.run())
    new = rw.get_run(rw.list_runs(limit=1)[0].id)
    m = metrics(at)
    assert m["Trajectory cost"] == f"{new.trajectory_cost:,}"
    assert m["Original's trajectory cost"] == f"{root.trajectory_cost:,}"
    assert m["Tokens spent"] == f"{new.spent:,}"


# --- model calls ---------------------------------------------------------------------------------

def test_a_steps_model_calls_are_shown_as_text_with_real_line_breaks(pair):
    root, _ = pair
    at = ok(app(query={"run": root.id, "node": "plan"}).run())
    shown = texts(at.text)
    call = root.step("plan").calls[0]
    assert f"{PROMPT} Why is the sky blue?" in shown  # the user message, line breaks and all
    assert "You plan.\nBriefly." in shown  # the system message
    assert call["response_text"] in shown and "\n" in call["response_text"]
    assert root.step("plan").outputs["plan"] in shown  # a text field: real line breaks, not "\n"
    assert [c.name for c in at.get("chat_message")][:3] == ["ai", "user", "assistant"]
    labels = [e.label for e in at.expander]
    assert any(lbl.startswith("Call 1") and "sim\\-small" in lbl for lbl in labels), labels
    m = metrics(at)
    assert m["Prompt tokens"] == f"{call['prompt_tokens']:,}"
    assert any("params temperature" in c for c in texts(at.caption)), [c for c in texts(at.caption) if "params" in c]
    for md in at.markdown:  # no model text in markdown that may render HTML
        assert not (getattr(md.proto, "allow_html", False) and "Why is" in md.value)


# --- the fork plan -------------------------------------------------------------------------------

def test_the_fork_plan_names_what_will_rerun_before_anything_runs(rw, pair):
    root, _ = pair
    before = rw.count_runs()
    at = ok(app(state={"fork_run": root.id, "fork_node": "answer"}).run())
    at = goto(at, "fork")
    at.text_input(key=f"fk:{root.id}:answer:edit:question").set_value("Why is grass green?")
    ok(at.run())
    lines = " ".join(texts(at.markdown))
    assert "Will re\\-run:** answer" in lines or "Will re-run:** answer" in lines, lines
    assert "summary" in lines and "send" in lines and "Estimate:" in lines
    plan = frame(at, "Will")
    assert dict(zip(plan["Node"], plan["Will"])) == {
        "plan": "inherited", "notes": "inherited", "answer": "re-run", "summary": "may re-run", "send": "dry-run"}
    assert "question" in plan[plan["Node"] == "answer"]["Why"].iloc[0]
    assert rw.count_runs() == before  # the plan wrote nothing
    assert not at.checkbox  # no confirmation needed for a small edit


def test_a_huge_edit_needs_a_confirmation_and_is_never_dumped_into_the_preview(rw, pair):
    root, _ = pair
    huge = "x" * 300_000
    before = rw.count_runs()
    at = ok(app(state={"fork_run": root.id, "fork_node": "answer"}).run())
    at = goto(at, "fork")
    at.text_input(key=f"fk:{root.id}:answer:edit:question").set_value(huge)
    ok(at.run())
    assert all(len(str(j.value)) < 10_000 for j in at.json)
    assert all(len(str(c.value)) < 10_000 for c in at.code)
    assert any("300,000" in str(m.value) for m in at.markdown)  # said in words, never dumped
    assert all(len(str(h.proto.body)) < 10_000 for h in at.get("html"))
    assert any("explicit confirmation" in w for w in texts(at.warning))
    box = at.checkbox[0]
    assert box.value is False and "characters" in box.label
    button(at, "Replay").click()
    ok(at.run())
    assert any("tick the confirmation" in e for e in texts(at.error))
    assert rw.count_runs() == before


def test_a_plan_over_the_token_budget_needs_a_confirmation(rw, pair, monkeypatch):
    root, _ = pair
    monkeypatch.setenv("REWIND_CONFIRM_TOKENS", "1")
    at = ok(app(state={"fork_run": root.id, "fork_node": "answer"}).run())
    at = goto(at, "fork")
    at.text_input(key=f"fk:{root.id}:answer:edit:question").set_value("Why is grass green?")
    ok(at.run())
    box = at.checkbox[0]
    assert "REWIND\\_CONFIRM\\_TOKENS" in box.label or "REWIND_CONFIRM_TOKENS" in box.label
    box.check()
    ok(at.run())
    before = rw.count_runs()
    button(at, "Replay").click()
    ok(at.run())
    assert rw.count_runs() == before + 1


# --- start-up and registration -------------------------------------------------------------------

def test_the_model_client_is_warmed_when_the_app_starts(db, monkeypatch):
    calls = []
    monkeypatch.setattr(rewind.llm, "warm_up", lambda: calls.append(1) or 0.0)
    ok(app().run())
    assert calls


def test_a_bad_pipelines_entry_is_a_banner_and_everything_else_works(db, rw, monkeypatch):
    monkeypatch.setenv("REWIND_PIPELINES", "no_such_module_14:pipeline")
    root = rw.run(PIPELINE, {"question": "q"})
    at = ok(app().run())
    banner = [e for e in texts(at.error) if "REWIND\\_PIPELINES" in e or "REWIND_PIPELINES" in e]
    assert banner and "no\\_such\\_module\\_14" in banner[0] and "ModuleNotFoundError" in banner[0], texts(at.error)
    assert at.dataframe  # the runs table still works
    at = goto(at, "fork")
    at.selectbox(key="_w_fork_run").set_value(root.id)
    ok(at.run())
    assert "Fields it reads" in [s.value for s in at.subheader]
    assert not [e for e in texts(at.error) if "not registered" in e]


# --- point 10 ------------------------------------------------------------------------------------

def _start(at: AppTest, pipeline: str, text: str) -> AppTest:
    at.selectbox(key="start_pipeline").set_value(pipeline)
    ok(at.run())
    [t for t in at.text_area if t.label.startswith("Initial state")][0].set_value(text)
    button(at, "Start run").click()
    return ok(at.run())


@pytest.mark.parametrize("text, says", [
    ('{"question": "q", "seed": NaN}', "NaN is not a JSON number"),
    ("{}", "empty, but pipeline **dashtruth** needs **question**"),
    ('{"question": "q", "qestion": "typo"}', "reads **qestion**"),
])
def test_start_a_run_refuses_nan_an_empty_state_and_unknown_fields(rw, text, says):
    at = _start(ok(app().run()), "dashtruth", text)
    errors = texts(at.error)
    assert any(says in e and "Nothing was run" in e for e in errors), errors
    assert rw.count_runs() == 0


def test_a_nan_typed_into_the_fork_editor_is_refused_by_name(rw, pair):
    root, _ = pair
    # the JSON editor of a non-text field (answer reads notes, a dict)
    at = ok(app(state={"fork_run": root.id, "fork_node": "answer"}).run())
    at = goto(at, "fork")
    at.text_area(key=f"fk:{root.id}:answer:edit:notes").set_value('{"lines": NaN, "first": "x"}')
    ok(at.run())
    errors = texts(at.error)
    assert any("notes" in e and "NaN" in e and "finite number" in e for e in errors), errors


def test_malformed_json_is_never_shown_beside_no_changes(pair):
    root, _ = pair
    at = ok(app(state={"fork_run": root.id, "fork_node": "answer"}).run())
    at = goto(at, "fork")
    assert any("No changes" in i for i in texts(at.info))
    at.text_area(key=f"fk:{root.id}:answer:edit:notes").set_value('{"lines": 3, first')
    ok(at.run())
    assert any("notes" in e and "JSON" in e for e in texts(at.error))
    assert not any("No changes" in i for i in texts(at.info))


@pytest.mark.parametrize("page", ["runs", "fork"])
def test_an_unknown_node_in_a_deep_link_warns(pair, page):
    root, _ = pair
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    if page == "fork":
        ok(at.run())
        at.switch_page("pages/fork.py")
    at.query_params.update({"run": root.id, "node": "unknown"})
    ok(at.run())
    assert any("no step unknown in this run" in w for w in texts(at.warning)), texts(at.warning)


def test_a_filter_with_no_match_shows_no_stale_run(pair):
    root, fork = pair
    at = ok(app().run())
    assert any(s.value == f"Run {fork.id}" for s in at.subheader)
    at.text_input(key="flt_search").set_value("matches-nothing-14")
    ok(at.run())
    assert any("No runs match" in c for c in texts(at.caption))
    assert not any(s.value.startswith("Run ") for s in at.subheader)
    assert "Tokens spent" not in metrics(at)
    # a run asked for by id is still shown under the same filter
    at.text_input(key="open_run_id").set_value(root.id)
    ok(at.run())
    assert any(s.value == f"Run {root.id}" for s in at.subheader)


def test_an_all_zero_chart_starts_at_zero(rw):
    run = rw.run(FREE, {"x": 1})
    at = ok(app(query={"run": run.id}).run())
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    tokens = next(s for s in specs if "Tokens" in json.dumps(s["layout"].get("title")))
    assert tokens["layout"]["yaxis"]["range"] == [0, 1]


def test_the_noise_band_detail_is_readable(pair):
    root, fork = pair
    at = ok(app(query={"a": root.id, "b": fork.id}).run())
    at.number_input(key="noise_k").set_value(2)
    button(at, "Compute noise band").click()
    ok(at.run())
    row = next(r for r in at.session_state[f"noise:{root.id}:{fork.id}"]["diff"].rows if r.node == "answer")
    assert row.noise_detail
    tables = [t.value for t in at.table if "Measure" in t.value.columns]
    assert tables, "the noise detail is a table"
    measures = list(tables[0]["Measure"])
    assert len(measures) == len(row.noise_detail)
    assert all("{...}" not in str(v) for v in tables[0]["Value"])
    assert not [j for j in at.json if j.proto.expanded is False]  # no collapsed {...}


def test_the_graph_layout_fans_out_a_branch_and_points_a_loop_back():
    from rewind_ui import graph as ug

    edges = [{"source": a, "target": b} for a, b in (
        ("start", "left"), ("start", "right"), ("left", "join"), ("right", "join"),
        ("join", "start"), ("join", "end"))]
    assert ug.levels(["start", "left", "right", "join", "end"], edges) == {
        "start": 0, "left": 1, "right": 1, "join": 2, "end": 3}
    chain = [f"n{i}" for i in range(40)]
    lv = ug.levels(chain, [{"source": a, "target": b} for a, b in zip(chain, chain[1:])])
    assert [lv[n] for n in chain] == list(range(40))
