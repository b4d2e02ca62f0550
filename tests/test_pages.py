"""The dashboard pages under Streamlit's AppTest: every page on an empty store and on one with
runs and forks, deep links, the fork form (bad JSON writes nothing), the audit, the settings
(purge confirmation, no secret shown) and model text never rendered as HTML.

Each test gets its own SQLite file through `REWIND_DB`; the dashboard keys its Rewind handle and
its cached queries by that URL, so tests never share state.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from burr.core.graph import GraphBuilder
from streamlit.testing.v1 import AppTest

import rewind
from rewind import Pipeline, action

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT = 120

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = '<img src=x onerror="alert(2)">'


# --- a small pipeline of our own (the tests must not depend on the demo's wording) -------------

@action(reads=["question"], writes=["plan"])
def t_plan(state, model: str = "sim-small", temperature: float = 0.0):
    text = rewind.llm.chat([{"role": "user", "content": "Plan: " + state["question"]}],
                           model=model, temperature=temperature)
    return state.update(plan=text)


@action(reads=["plan"], writes=["analysis"])
def t_analyse(state):
    return state.update(analysis={"summary": state["plan"][:60], "points": 3, "tags": ["a", "b"]})


@action(reads=["question", "analysis"], writes=["critique"])
def t_critique(state, model: str = "sim-small", temperature: float = 0.0,
               prompt: str = "Critique the analysis below."):
    text = rewind.llm.chat(
        [{"role": "user", "content": f"{prompt}\n{state['question']}\n{state['analysis']['summary']}"}],
        model=model, temperature=temperature,
    )
    # model output that tries to smuggle HTML into the page
    return state.update(critique=f"{text}\n{XSS_SCRIPT}\n{XSS_IMG}")


@action(reads=["critique"], writes=["receipt"], determinism="side-effect")
def t_publish(state):
    return state.update(receipt={"chars": len(state["critique"])})


PIPELINE = Pipeline(
    name="uitest",
    graph=GraphBuilder()
    .with_actions(plan=t_plan, analyse=t_analyse, critique=t_critique, publish=t_publish)
    .with_transitions(("plan", "analyse"), ("analyse", "critique"), ("critique", "publish"))
    .build(),
    entrypoint="plan",
    description="A four-node pipeline for the dashboard tests.",
    sample_state={"question": "Why is the sky blue?"},
)


# --- fixtures ----------------------------------------------------------------------------------

@pytest.fixture
def db(tmp_path, monkeypatch):
    url = str(tmp_path / "ui.db")
    monkeypatch.setenv("REWIND_DB", url)
    rewind.register_pipeline(PIPELINE)
    return url


@pytest.fixture
def rw(db):
    handle = rewind.Rewind(db)
    yield handle
    handle.close()


@pytest.fixture
def runs(rw):
    """A root run (its question carries HTML) and a fork of it at critique."""
    root = rw.run(PIPELINE, {"question": f"Why is the sky blue? {XSS_IMG}"})
    fork = rw.fork(root.id, at="critique", edit={"question": "Why is the sea blue?"})
    assert root.status == fork.status == "completed"
    return root, fork


def app(query: dict | None = None, state: dict | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    for k, v in (state or {}).items():
        at.session_state[k] = v
    return at


def ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"pages/{page}.py")
    return ok(at.run())


def button(at: AppTest, text: str):
    found = [b for b in at.button if text in b.label]
    assert found, f"no button with {text!r}: {[b.label for b in at.button]}"
    return found[0]


def metrics(at: AppTest) -> dict:
    return {m.label: m.value for m in at.metric}


def texts(elements) -> list:
    return [str(e.value) for e in elements]


MARKDOWN_KINDS = ("markdown", "caption", "title", "header", "subheader", "info", "warning",
                  "error", "success", "toast")


def markdown_bodies(at: AppTest) -> list:
    """The body of every element Streamlit renders as markdown (plus status labels)."""
    bodies = []
    for kind in MARKDOWN_KINDS:
        bodies += texts(getattr(at, kind))
    bodies += [s.label for s in at.status] if hasattr(at, "status") else []
    return bodies


def page_dump(at: AppTest) -> str:
    """Every element of the page in protobuf text form (labels, values, bodies, help texts)."""
    def walk(node):
        yield node
        for child in (getattr(node, "children", None) or {}).values():
            yield from walk(child)

    return "\n".join(str(getattr(n, "proto", "")) for n in walk(at._tree))


def assert_no_raw_html(at: AppTest) -> None:
    for body in markdown_bodies(at):
        low = body.lower()
        assert "<script" not in low and "<img" not in low and "onerror=" not in low.replace("\\", ""), body
    for md in at.markdown:
        if getattr(md.proto, "allow_html", False):  # only our static legend may use HTML
            assert "script" not in md.value and "onerror" not in md.value and "<img" not in md.value


# --- empty store -------------------------------------------------------------------------------

def test_every_page_on_an_empty_store(db):
    at = ok(app().run())
    assert "Runs" in texts(at.title)
    assert any("No runs yet" in t for t in texts(at.info))
    assert button(at, "Create a demo run")
    assert not at.dataframe  # no table, no run detail yet
    at = goto(at, "fork")
    assert any("No runs yet" in t for t in texts(at.info))
    at = goto(at, "diff")
    assert any("needs two runs" in t for t in texts(at.info))
    at = goto(at, "settings")
    m = metrics(at)
    assert m["Runs"] == "0" and m["Forks"] == "0"
    assert m["Provider"] == "simulator"
    assert m["Node entries"] == "0"


def test_start_a_run_from_the_form(db, rw):
    at = ok(app().run())
    assert at.session_state["start_pipeline"] in rw.pipelines()
    at.selectbox(key="start_pipeline").set_value("uitest")
    ok(at.run())
    area = [t for t in at.text_area if t.label.startswith("Initial state")][0]
    assert "Why is the sky blue?" in area.value  # prefilled from pipeline.sample_state
    area.set_value("{not json")
    button(at, "Start run").click()
    ok(at.run())
    assert any("Initial state" in e and "JSON" in e for e in texts(at.error))
    assert rw.count_runs() == 0
    area = [t for t in at.text_area if t.label.startswith("Initial state")][0]
    area.set_value('{"question": "What is Rayleigh scattering?"}')
    button(at, "Start run").click()
    ok(at.run())
    assert rw.count_runs() == 1
    new = rw.list_runs(limit=1)[0]
    assert at.session_state["sel_run"] == new.id
    assert metrics(at)["Status"] == "completed"
    assert at.dataframe  # the table shows it (cached queries were invalidated)


# --- a store with runs and forks ---------------------------------------------------------------

def test_every_page_with_runs_and_forks(runs):
    root, fork = runs
    at = ok(app().run())
    # the runs table, newest first, and the newest run opened below it
    table = at.dataframe[0].value
    assert list(table["Run"]) == [fork.id, root.id]
    assert list(table["Parent"]) == [root.id, ""]
    assert any("of 2 runs" in c for c in texts(at.caption))
    assert at.session_state["sel_run"] == fork.id
    m = metrics(at)
    assert m["Status"] == "completed" and m["Steps"] == "4"
    assert any(b.label.startswith("↑ " + root.id) for b in at.button)  # lineage: the parent
    assert len(at.get("plotly_chart")) >= 2

    at = goto(at, "fork")
    assert "Fork & replay" in texts(at.title)
    assert at.selectbox(key="_w_fork_run").value == fork.id

    at = goto(at, "diff")
    assert at.session_state["diff_a"] == root.id and at.session_state["diff_b"] == fork.id
    verdict = " ".join(texts(at.warning))
    assert "Diverged at" in verdict and "critique" in verdict
    m = metrics(at)
    assert m["First divergence"] == "critique"
    assert m["Identical nodes"] == "2 / 3"  # publish is dry-run on B: not compared
    assert any(c.language == "diff" for c in at.code)

    at = goto(at, "settings")
    m = metrics(at)
    assert m["Runs"] == "2" and m["Forks"] == "1"
    assert int(m["Node entries"].replace(",", "")) >= 3


def test_runs_filters(runs, rw):
    root, fork = runs
    at = ok(app().run())
    at.toggle(key="flt_forks").set_value(True)
    ok(at.run())
    assert list(at.dataframe[0].value["Run"]) == [fork.id]
    at.toggle(key="flt_forks").set_value(False)
    at.text_input(key="flt_search").set_value(root.id[:8])
    ok(at.run())
    assert list(at.dataframe[0].value["Run"]) == [root.id]
    at.text_input(key="flt_search").set_value("")
    at.selectbox(key="flt_status").set_value("failed")
    ok(at.run())
    assert not any("Run" in df.value.columns for df in at.dataframe)  # no runs table
    assert any("No runs match" in c for c in texts(at.caption))


def test_deep_link_opens_run_and_node(runs):
    root, fork = runs
    at = ok(app(query={"run": root.id, "node": "critique"}).run())
    assert at.session_state["sel_run"] == root.id
    assert at.session_state["sel_node"] == "critique"
    assert at.selectbox(key="_w_sel_node").value == "critique"
    assert any("Step critique" in m for m in texts(at.markdown))
    # lineage: the fork is a clickable child
    child = button(at, "↓ " + fork.id)
    child.click()
    ok(at.run())
    assert at.session_state["sel_run"] == fork.id
    assert at.query_params.get("run") in (fork.id, [fork.id])
    # the selection survives a page switch
    at = goto(at, "settings")
    at = goto(at, "runs")
    assert at.session_state["sel_run"] == fork.id


def test_unknown_run_in_a_deep_link_is_a_warning(db):
    at = ok(app(query={"run": "nope"}).run())
    assert any("no run nope" in w for w in texts(at.warning))


def test_deep_link_diff(runs):
    root, fork = runs
    at = ok(app(query={"a": fork.id, "b": root.id}).run())
    assert "Diff" in texts(at.title)
    assert at.session_state["diff_a"] == fork.id and at.session_state["diff_b"] == root.id
    assert any("Diverged at" in w for w in texts(at.warning))
    # swapping puts them back
    button(at, "Swap").click()
    ok(at.run())
    assert at.session_state["diff_a"] == root.id and at.session_state["diff_b"] == fork.id


def test_identical_fork_verdict(rw, runs):
    root, _ = runs
    same = rw.fork(root.id, at="analyse")
    at = ok(app(query={"a": root.id, "b": same.id}).run())
    assert any("Identical" in s for s in texts(at.success))
    assert metrics(at)["First divergence"] == "none"


def test_fork_from_this_step_opens_the_fork_page(runs):
    root, _ = runs
    at = ok(app(query={"run": root.id, "node": "critique"}).run())
    button(at, "Fork from this step").click()
    ok(at.run())
    assert "Fork & replay" in texts(at.title)
    assert at.session_state["fork_run"] == root.id
    assert at.session_state["fork_node"] == "critique"
    labels = [t.label for t in at.text_area] + [t.label for t in at.text_input]
    assert "question" in labels and "analysis (JSON)" in labels and "prompt" in labels
    # prefilled from the step's recorded inputs and params
    question = [t for t in list(at.text_area) + list(at.text_input) if t.label == "question"][0]
    assert question.value == root.step("critique").inputs["question"]
    assert at.number_input(key=f"fk:{root.id}:critique:param:temperature").value == 0.0
    assert any("No changes" in i for i in texts(at.info))


def test_fork_bad_json_names_the_field_and_writes_nothing(rw, runs):
    root, _ = runs
    before = rw.count_runs()
    at = ok(app(state={"fork_run": root.id, "fork_node": "critique"}).run())
    at = goto(at, "fork")
    at.text_area(key=f"fk:{root.id}:critique:edit:analysis").set_value('{"summary": "x", points: 3')
    ok(at.run())
    errors = texts(at.error)
    assert any("analysis" in e and "JSON" in e for e in errors), errors
    button(at, "Replay").click()
    ok(at.run())
    assert any("Nothing was run or written" in e for e in texts(at.error))
    assert rw.count_runs() == before
    assert len(rw.lineage(root.id)["children"]) == 1


def test_fork_replay_sends_only_changes_and_opens_the_diff(rw, runs):
    root, _ = runs
    before = rw.count_runs()
    at = ok(app(state={"fork_run": root.id, "fork_node": "critique"}).run())
    at = goto(at, "fork")
    at.number_input(key=f"fk:{root.id}:critique:param:temperature").set_value(0.5)
    ok(at.run())
    preview = [str(m.value).replace("\\", "") for m in at.markdown if "Replaying from" in str(m.value)]
    assert any("critique: temperature" in p and "question" not in p for p in preview), preview
    button(at, "Replay").click()
    ok(at.run())
    assert rw.count_runs() == before + 1
    fork = rw.list_runs(limit=1)[0]
    assert fork.parent_id == root.id and fork.fork_node == "critique"
    assert fork.params == {"critique": {"temperature": 0.5}} and fork.edit == {}
    full = rw.get_run(fork.id)
    assert [s.status for s in full.steps] == ["inherited", "inherited", "executed", "dry-run"]
    status = at.status[0]
    assert "completed" in status.label
    m = metrics(at)
    assert m["Nodes re-executed"] == "1"
    assert m["Tokens spent"] == f"{fork.total_tokens:,}"
    button(at, "Open the diff").click()
    ok(at.run())
    assert "Diff" in texts(at.title)
    assert at.session_state["diff_a"] == root.id and at.session_state["diff_b"] == fork.id
    verdicts = [t for t in texts(at.warning) + texts(at.success) if t.startswith(("Diverged at", "Identical"))]
    assert len(verdicts) == 1, verdicts  # the verdict, said once
    # the runs table sees the new fork (queries invalidated after the fork)
    at = goto(at, "runs")
    assert fork.id in list(at.dataframe[0].value["Run"])


def test_fork_side_effects_warning(runs, monkeypatch):
    root, _ = runs
    monkeypatch.setenv("REWIND_ALLOW_SIDE_EFFECTS", "1")  # the server allows them (issue 13)
    at = ok(app(state={"fork_run": root.id, "fork_node": "critique"}).run())
    at = goto(at, "fork")
    side = at.toggle(key=f"fk:{root.id}:critique:side")
    assert side.value is False
    side.set_value(True)
    ok(at.run())
    assert any("Side effects are ON" in w and "publish" in w for w in texts(at.warning))


def test_model_text_is_never_rendered_as_html(runs):
    root, fork = runs
    # runs page with the critique step (its outputs and state) open
    at = ok(app(query={"run": root.id, "node": "critique"}).run())
    shown = " ".join(str(j.value) for j in at.json)
    assert XSS_SCRIPT in shown  # the output is shown, as JSON text
    assert any(XSS_IMG in t for t in texts(at.text))  # the question, as plain text
    assert_no_raw_html(at)
    at = goto(at, "fork")
    assert_no_raw_html(at)
    at = goto(at, "diff")
    assert_no_raw_html(at)
    # the graph tooltips are escaped too
    from rewind_ui import graph as ug

    spec = ug.run_graph_spec(["plan"], [], [rewind.Step(node="plan", status="executed", input_hash="a",
                                                         output_hash="b", reason=XSS_IMG, error=XSS_SCRIPT)])
    title = spec["nodes"][0]["title"]
    assert "<img" not in title and "<script" not in title and "&lt;img" in title


def test_audit_button_shows_the_report(runs):
    root, _ = runs
    at = ok(app(query={"run": root.id}).run())
    at.number_input(key="audit_repeats").set_value(2)
    button(at, "Audit determinism").click()
    ok(at.run())
    report = at.session_state["audits"][root.id]
    assert [r["Node"] for r in report["rows"]] == ["plan", "analyse", "critique", "publish"]
    assert any("stable" in s for s in texts(at.success) + texts(at.warning))


def test_noise_band_control(runs):
    root, fork = runs
    at = ok(app(query={"a": root.id, "b": fork.id}).run())
    at.number_input(key="noise_k").set_value(2)
    button(at, "Compute noise band").click()
    ok(at.run())
    errors = texts(at.error)
    assert not errors, errors
    noisy = at.session_state[f"noise:{root.id}:{fork.id}"]
    assert noisy["k"] == 2
    row = next(r for r in noisy["diff"].rows if r.node == "critique")
    assert row.noise in ("within noise", "beyond noise", None)


def test_nondeterminism_alarm_is_flagged(rw, db):
    counter = {"n": 0}

    @action(reads=["x"], writes=["y"])
    def jitter(state):
        counter["n"] += 1
        return state.update(y=counter["n"])

    pipe = Pipeline(name="jittery", graph=GraphBuilder().with_actions(jitter=jitter).build(),
                    entrypoint="jitter")
    rw.run(pipe, {"x": 1})
    second = rw.run(pipe, {"x": 1}, use_cache=False)
    assert rw.alarms(), "the engine records an alarm for a deterministic node that changed"
    at = ok(app(query={"run": second.id}).run())
    assert any("Nondeterminism alarm" in w and "jitter" in w for w in texts(at.warning))


def test_settings_purge_needs_confirmation(rw, runs):
    entries = rw.cache_stats()["entries"]
    assert entries >= 3
    at = ok(app().run())
    at = goto(at, "settings")
    at.number_input(key="purge_days").set_value(0.0)
    ok(at.run())
    purge = button(at, "Purge")
    assert purge.disabled  # not confirmed yet
    assert rw.cache_stats()["entries"] == entries
    at.checkbox(key="purge_confirm").check()
    ok(at.run())
    purge = button(at, "Purge")
    assert not purge.disabled
    purge.click()
    ok(at.run())
    assert rw.cache_stats()["entries"] == 0
    assert any("Purged" in s for s in texts(at.success))
    assert at.checkbox(key="purge_confirm").value is False


def test_settings_never_show_the_key(db, monkeypatch):
    secret = "sk-test-VERYSECRET-1234567890"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("OPENAI_BASE_URL", "https://user:hunter2@llm.example.invalid/v1")
    rewind.llm.reset()
    at = ok(app().run())
    at = goto(at, "settings")
    dump = page_dump(at)
    assert "OPENAI_API_KEY" in dump and "llm.example.invalid" in dump  # the dump is complete
    assert secret not in dump and "hunter2" not in dump
    assert metrics(at)["API key"] == "present"
    assert metrics(at)["Provider"] == "openai"


def test_settings_provider_form(db):
    at = ok(app().run())
    at = goto(at, "settings")
    at.radio[0].set_value("simulator")
    at.text_input[1].set_value("sim-large")
    button(at, "Apply").click()
    ok(at.run())
    assert rewind.llm.provider_info()["provider"] == "simulator"
    assert rewind.llm.provider_info()["model"] != "sim-large"  # the session's, not the process's
    assert metrics(at)["Provider"] == "simulator"
    rewind.llm.reset()


def test_runs_page_pages_through_a_large_store(rw, db, monkeypatch):
    """100k runs: the page only ever asks for one page of rows and a count."""
    rw.run(PIPELINE, {"question": "a real run"})
    now = time.time()
    with rw.store.transaction():
        for i in range(100_000):
            rw.store.insert_run({
                "id": f"bulk{i:07d}", "pipeline": "uitest", "status": "completed",
                "created_at": now - 10 - i, "finished_at": now - 9 - i,
                "summary": f"bulk question {i}", "total_tokens": i % 500, "tokens_saved": 0,
                "latency_ms": 12.5, "step_count": 4, "use_cache": 1, "allow_side_effects": 0,
            })
    limits, cursors = [], []
    real_list = rewind.Rewind.list_runs

    def spy(self, *a, **kw):
        limits.append(kw.get("limit", a[4] if len(a) > 4 else 50))
        cursors.append(kw.get("after"))
        return real_list(self, *a, **kw)

    monkeypatch.setattr(rewind.Rewind, "list_runs", spy)
    started = time.perf_counter()
    at = ok(app().run())
    elapsed = time.perf_counter() - started
    assert any("of 100,001 runs" in c for c in texts(at.caption))
    assert len(at.dataframe[0].value) == 50
    assert limits and max(limits) <= 200
    assert elapsed < 20, elapsed
    # the next page continues after the last run shown (keyset), with the rows offset gives
    first_page = list(at.dataframe[0].value["Run"])
    at.number_input(key="flt_page").set_value(2)
    ok(at.run())
    assert cursors[-1] == first_page[-1]
    assert list(at.dataframe[0].value["Run"]) == [r.id for r in rw.list_runs(limit=50, offset=50)]
    assert any("Showing 51–100 of 100,001 runs" in c for c in texts(at.caption))
    # a jump (to the last page) goes by offset
    at.number_input(key="flt_page").set_value(2001)
    ok(at.run())
    assert cursors[-1] is None
    assert list(at.dataframe[0].value["Run"]) == ["bulk0099999"]
    at.text_input(key="flt_search").set_value("bulk question 99998")
    ok(at.run())
    assert list(at.dataframe[0].value["Run"]) == ["bulk0099998"]


# --- helpers, without Streamlit ----------------------------------------------------------------

def test_editor_changes_and_errors():
    from rewind_ui import editors

    originals = {"q": "a", "n": 3, "t": 0, "d": {"k": [1, 2]}}
    kinds = {"q": editors.TEXT, "n": editors.INT, "t": editors.FLOAT, "d": editors.JSON}
    same = {"q": "a", "n": 3, "t": 0.0, "d": '{\n  "k": [1, 2]\n}'}
    assert editors.changes(originals, kinds, same) == ({}, [])
    changed, errors = editors.changes(originals, kinds, {**same, "q": "b", "d": '{"k": []}'})
    assert changed == {"q": "b", "d": {"k": []}} and not errors
    changed, errors = editors.changes(originals, kinds, {**same, "d": "{oops"})
    assert changed == {} and errors[0].field == "d" and "JSON" in errors[0].message


def test_formatting_helpers():
    from rewind_ui import fmt

    assert fmt.mask_url("postgresql://rw:s3cret@db:5432/rewind") == "postgresql://rw:***@db:5432/rewind"
    assert fmt.mask_url("/tmp/x.db") == "/tmp/x.db"
    assert "s3cret" not in fmt.mask_url("postgresql://db/rewind?user=rw&password=s3cret")
    masked = fmt.mask_url("http://alice:PW@[::1]:9/v1?api_key=Q&access_token=T&api-version=1")
    assert masked == "http://alice:***@[::1]:9/v1?api_key=***&access_token=***&api-version=1"
    escaped = fmt.md_escape(XSS_SCRIPT + " **bold** :red[x] $x$")
    assert "<" not in escaped and "**" not in escaped and ":red[" not in escaped
    # an apostrophe shows as typed (html.escape's `&#x27;` lost its `#` to the markdown escape)
    assert fmt.md_escape("it's") == "it's" and "&" not in fmt.md_escape('say "hi"')
    assert fmt.step_key("critique", 2) == "critique#2"
    assert fmt.parse_step_key("critique#2") == ("critique", 2)
    assert fmt.parse_step_key("critique") == ("critique", 1)


def test_an_interrupted_run_can_be_forked_at_the_node_it_never_reached(rw, db):
    root = rw.run(PIPELINE, {"question": "Why do cats purr?"})
    with rw.store.transaction():  # as if the process died after `analyse`
        rw.store.execute("DELETE FROM nodes WHERE run_id = ? AND idx >= 2", (root.id,))
        rw.store.update_run(root.id, status="interrupted")
    at = ok(app(state={"fork_run": root.id, "fork_node": "critique#1"}).run())
    at = goto(at, "fork")
    key = f"fk:{root.id}:critique:edit:question"
    question = [t for t in list(at.text_area) + list(at.text_input) if t.key == key]
    assert question and question[0].value == "Why do cats purr?"  # prefilled from saved state
    question[0].set_value("Why do lions roar?")
    ok(at.run())
    button(at, "Replay").click()
    ok(at.run())
    fork = rw.list_runs(limit=1)[0]
    assert fork.parent_id == root.id and fork.fork_node == "critique" and fork.status == "completed"
    full = rw.get_run(fork.id)
    assert [s.status for s in full.steps] == ["inherited", "inherited", "executed", "dry-run"]


def test_a_search_over_the_limit_is_a_message_not_a_traceback(runs):
    """A stranger typed 1,001 characters into Runs' search (and Batch's filter): the page showed
    the store's refusal as a traceback, for the rest of the session. The box takes at most
    `rewind.MAX_SEARCH` characters; a longer value set another way is one clear line."""
    at = ok(app(state={"flt_search": "x" * (rewind.MAX_SEARCH + 1)}).run())
    assert any("at most 1,000 characters" in e.value for e in at.error), [e.value for e in at.error]
    assert at.text_input(key="flt_search").max_chars == rewind.MAX_SEARCH


def test_a_huge_text_output_is_cut_on_the_page(rw, db):
    """A 1 MB output stalled the browser (every tab's text is in the page up front): a field's
    text is cut at `textview.SHOW_CHARS` characters, with a note of its real size."""
    from rewind_ui import textview

    @rewind.action(reads=["question"], writes=["answer"])
    def huge(state):
        return state.update(answer="A" * 1_000_000)

    pipeline = rewind.Pipeline("huge", GraphBuilder().with_actions(huge=huge).with_transitions().build(), "huge")
    run = rw.run(pipeline, {"question": "q"})
    rewind.register_pipeline(pipeline)
    at = ok(app(query={"run": run.id, "node": "huge"}).run())
    assert not [t for t in texts(at.text) if t.startswith("AAAA")]  # over 256 KB: when asked
    boxes = [b for b in at.checkbox if b.label.startswith("Show answer (")]
    assert len(boxes) == 2 and "976.6 KB recorded" in boxes[0].label  # its outputs; the state after
    boxes[0].check()
    ok(at.run())
    shown = [t for t in texts(at.text) if t.startswith("AAAA")]
    assert shown and all(len(t) < textview.SHOW_CHARS + 200 for t in shown)
    assert any("1,000,000 in all" in t for t in shown)


def test_a_read_only_store_offers_no_replay_and_no_demo_run(rw, runs, monkeypatch, db):
    """On a store open read-only the banner says so, and the buttons that would write are
    disabled, not refused after the engine tried to commit (a stranger's find)."""
    root, _ = runs
    rw.close()
    monkeypatch.setenv("REWIND_DB", f"sqlite:///{db}?mode=ro")
    at = ok(app().run())
    assert any("read-only" in w for w in texts(at.warning))
    assert button(at, "Create a demo run").disabled
    at = ok(app(state={"fork_run": root.id, "fork_node": "critique"}).run())
    at = goto(at, "fork")
    assert button(at, "Replay").disabled
    at = goto(at, "batch")
    assert button(at, "Run batch").disabled


def test_an_interrupted_run_says_why_and_can_be_resumed(rw, runs):
    """An interrupted run's page says what happened and offers to resume it (before: "The run
    did not complete:" and nothing to do but the CLI; a stranger's find)."""
    root, _ = runs
    with rw.store.transaction():
        rw.store.mark_interrupted(root.id, "interrupted (KeyboardInterrupt or exit)", root.finished_at)
    at = ok(app(query={"run": root.id}).run())
    assert any("interrupted before it finished" in e for e in texts(at.error)), texts(at.error)
    button(at, "Resume this run").click()
    ok(at.run())
    assert rw.get_run(root.id).status == "completed"
