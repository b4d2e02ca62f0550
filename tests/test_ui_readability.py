"""Issue 41, parts 3 and 4, without a browser: the pure view logic (rewind_ui) and the pages under
AppTest. A text diff marks the changed words and keeps a long line's change in view; the Diff
page states its verdict once; a step that re-ran with every model call served from the
model-call cache has its own label and colour (the stored status stays `executed`); the Fork
page's "What will change" is sentences; the open run is marked in the runs table."""

from __future__ import annotations

import pytest
from burr.core.graph import GraphBuilder

import rewind
from rewind_ui import fmt, fork_view, runs_view, worddiff
from rewind_ui import graph as ug
from test_pages import (  # noqa: F401  (fixtures: db, rw, runs; AppTest helpers)
    app, db, goto, markdown_bodies, ok, runs, rw, texts,
)


def unescape(text: str) -> str:
    """Markdown text as the reader sees it (md_escape's backslashes gone)."""
    return text.replace("\\", "")


# --- the word-level text diff --------------------------------------------------------------------

LONG = " ".join(f"w{i}" for i in range(600)) + " the answer must be terse " + " ".join(f"x{i}" for i in range(600))


def changed(parts: list) -> list:
    return [text for tag, text in parts if tag == worddiff.CHANGED]


def test_an_edit_in_a_long_line_marks_the_changed_words_and_keeps_them_in_view():
    after = LONG.replace("terse", "detailed")
    lines = worddiff.diff_lines(LONG, after)
    assert [kind for kind, _ in lines] == ["-", "+"]
    assert changed(lines[0][1]) == ["terse"] and changed(lines[1][1]) == ["detailed"]
    # the unchanged thousands of characters around the change are cut to a little context
    shown = "".join(text for _, text in lines[1][1])
    assert len(shown) < 2 * worddiff.KEEP + 60, len(shown)
    assert "must be detailed" in shown and worddiff.GAP in [t for tag, t in lines[1][1] if tag == worddiff.ELIDED]
    html = worddiff.to_html(lines)
    assert "<ins" in html and ">detailed</ins>" in html and ">terse</del>" in html
    assert "pre-wrap" in html  # what is shown wraps: never a line that scrolls sideways


def test_words_next_to_each_other_are_one_mark_and_lines_keep_their_context():
    lines = worddiff.diff_lines("a b c d e", "a x y d e")
    assert changed(lines[0][1]) == ["b c"] and changed(lines[1][1]) == ["x y"]
    before = "\n".join(f"line {i}" for i in range(30))
    after = before.replace("line 3\n", "line three\n").replace("line 25", "line 25 and more")
    kinds = [kind for kind, _ in worddiff.diff_lines(before, after)]
    assert kinds == ["…", " ", "-", "+", " ", "…", " ", "-", "+", " ", "…"], kinds
    added = worddiff.diff_lines("one", "one\ntwo")
    assert [k for k, _ in added] == [" ", "+"] and changed(added[1][1]) == ["two"]
    assert worddiff.diff_lines("same", "same") == []


def test_the_text_diff_shows_model_text_as_text():
    before, after = '<img src=x onerror="alert(1)"> fine', '<img src=x onerror="alert(2)"> fine'
    html = worddiff.to_html(worddiff.diff_lines(before, after))
    assert "<img" not in html and "&lt;img" in html and "<script" not in html


# --- the verdict once ----------------------------------------------------------------------------

def test_the_diff_page_states_its_verdict_once(runs):
    root, fork = runs
    at = ok(app(query={"a": root.id, "b": fork.id}).run())
    at = goto(at, "diff")
    said = [b for b in markdown_bodies(at) if "diverged at" in unescape(b).lower()]
    assert len(said) == 1, said
    assert not any(c.startswith("Verdict:") for c in texts(at.caption))


def test_the_diff_page_draws_the_text_diff_with_marked_words(runs):
    root, fork = runs
    at = ok(app(query={"a": root.id, "b": fork.id}).run())
    at = goto(at, "diff")
    bodies = [e.proto.body for e in at.get("html")]
    assert any("<ins" in b or "<del" in b for b in bodies), bodies
    assert not any("<img" in b or "<script" in b for b in bodies)  # the critique's HTML, as text


# --- re-ran, model calls served ------------------------------------------------------------------

@rewind.action(reads=["question", "note"], writes=["answer"])
def r41_ask(state):
    return state.update(answer=rewind.llm.chat([{"role": "user", "content": state["question"]}]))


@rewind.action(reads=["answer"], writes=["size"])
def r41_size(state):
    return state.update(size=len(state["answer"]))


ASK = rewind.Pipeline(name="r41-unit-ask", entrypoint="ask",
                      graph=GraphBuilder().with_actions(ask=r41_ask, size=r41_size)
                      .with_transitions(("ask", "size")).build())


@pytest.fixture
def served(rw):
    rewind.register_pipeline(ASK)
    root = rw.run(ASK, {"question": "Why is the sky blue?", "note": "a"})
    fork = rw.fork(root.id, at="ask", edit={"note": "b"})
    return rw.get_run(root.id), rw.get_run(fork.id)


def test_a_rerun_with_every_call_served_has_its_own_label_and_colour(served):
    root, fork = served
    step = fork.step("ask")
    assert step.status == "executed" and step.tokens == 0  # the stored status is unchanged
    assert step.calls and all(c["served"] for c in step.calls)
    label = ug.SERVED_RERUN
    assert label == "re-ran · calls served"
    assert fmt.shown_status(step) == label and fmt.shown_status(root.step("ask")) == "executed"
    colours = ug.STATUS_COLORS
    assert colours[label] not in (colours["executed"], colours["cached"], colours["inherited"])
    assert label in ug.STATUS_HELP and label in ug.legend_html(colours, ug.STATUS_HELP)

    node = {n["id"]: n for n in ug.run_graph_spec(["ask", "size"], [("ask", "size")], fork.steps)["nodes"]}
    assert node["ask"]["status"] == label and node["ask"]["color"] == colours[label]
    assert node["size"]["status"] == "cached"
    assert [r["Status"] for r in runs_view.step_rows(fork)] == [label, "cached"]
    assert runs_view.status_colors(fork.steps)[0] == colours[label]
    assert label in unescape(runs_view.step_title("ask", step))
    assert runs_view.step_choices(fork)[0].label == f"1. ask — {label}"
    assert label in unescape(fmt.step_line(step)) and "executed" not in fmt.step_line(step)
    assert "model-call cache" in runs_view.step_note(step)
    assert runs_view.step_note(root.step("ask")) is None
    # the root's own run: really executed, in the executed colour
    assert ug.run_graph_spec(["ask"], [], root.steps)["nodes"][0]["color"] == colours["executed"]


def test_only_an_executed_step_whose_every_call_was_served_is_a_served_rerun():
    def step(status, calls):
        return rewind.Step(node="n", status=status, input_hash="a", output_hash="b", calls=calls)

    served, sent = {"served": True}, {"served": False}
    assert fmt.shown_status(step("executed", [])) == "executed"  # no model call at all
    assert fmt.shown_status(step("executed", [served, sent])) == "executed"
    assert fmt.shown_status(step("executed", [served, served])) == ug.SERVED_RERUN
    assert fmt.shown_status(step("cached", [served])) == "cached"
    assert fmt.shown_status(step("failed", [served])) == "failed"


def test_the_runs_page_names_the_served_rerun(served):
    _, fork = served
    at = ok(app(query={"run": fork.id, "node": "ask"}).run())
    bodies = [unescape(b) for b in markdown_bodies(at)]
    assert any(b.startswith("#### Step ask · re-ran · calls served") for b in bodies), bodies
    assert any("model-call cache" in b for b in bodies)
    steps = at.dataframe[1]  # the step list: statuses in their colours, latency as before
    assert list(steps.value["Status"]) == [ug.SERVED_RERUN, "cached"]
    styler = steps.proto.arrow_data.styler
    assert ug.STATUS_COLORS[ug.SERVED_RERUN] in styler.styles
    import pyarrow as pa  # a Styler prints six decimals unless told: the latency keeps one

    shown = pa.ipc.open_stream(styler.display_values).read_all().to_pandas()
    assert all(len(str(v).split(".")[-1]) == 1 for v in shown[fmt.LATENCY_COLUMN]), shown


# --- "What will change" as sentences -------------------------------------------------------------

def test_what_will_change_is_said_in_sentences():
    lines = fork_view.change_lines("critique", {"question": "How?", "items": [1, 2, 3]},
                                   {"temperature": 0.9},
                                   {"question": "Why?", "items": [1, 2]}, {"temperature": 0.7})
    assert lines == ['question: "Why?" → "How?"', "items: [1, 2] → [1, 2, 3]",
                     "critique: temperature 0.7 → 0.9"]
    edited = LONG.replace("terse", "detailed")
    (line,) = fork_view.change_lines("plan", {"prompt": edited}, {}, {"prompt": LONG}, {})
    assert line.startswith("prompt: text changed") and f"{len(edited):,}" in line
    assert len(line) < 200  # never the value itself
    (line,) = fork_view.change_lines("plan", {}, {"style": "terse"}, {}, {})
    assert line == 'plan: style (not set) → "terse"'


def test_the_fork_page_says_what_will_change_in_words(runs):
    root, _ = runs
    at = ok(app(state={"fork_run": root.id, "fork_node": "critique"}).run())
    at = goto(at, "fork")
    at.number_input(key=f"fk:{root.id}:critique:param:temperature").set_value(0.5)
    ok(at.run())
    lines = [unescape(b) for b in texts(at.markdown)]
    assert any("critique: temperature 0 → 0.5" in b or "critique: temperature 0.0 → 0.5" in b
               for b in lines), lines
    assert not at.json  # no raw JSON tree


# --- the open run in the runs table --------------------------------------------------------------

def test_the_open_run_is_marked_in_the_runs_table(runs):
    root, fork = runs
    rows = [{"id": fork.id}, {"id": root.id}]
    assert runs_view.open_row(rows, root.id) == 1 and runs_view.open_row(rows, "other") is None
    assert runs_view.open_note(rows, root.id) == f"Highlighted: the open run {root.id}"
    assert "not on this page" in runs_view.open_note(rows, "other")
    at = ok(app(query={"run": root.id}).run())
    table = at.dataframe[0]
    assert list(table.value["Run"]) == [fork.id, root.id]
    styles = str(table.proto.arrow_data.styler)
    assert runs_view.OPEN_ROW_BACKGROUND in styles.lower()
    assert any(f"Highlighted: the open run {root.id}" in unescape(c) for c in texts(at.caption))


def test_the_runs_table_columns_fit_at_1280_px():
    row = {"id": "a" * 16, "parent_id": "b" * 16, "fork_node": "critique", "status": "completed",
           "pipeline": "research", "summary": "q", "started": "2026-12-06 10:08:50", "created_at": 0,
           "steps": 8, "tokens": 1911, "latency_ms": 16.0}
    columns = list(runs_view.table([row])[0])
    widths = runs_view.column_widths()
    assert set(widths) == set(columns)
    # the main block is 820 px wide at 1280 px (sidebar open), the row checkbox ~35 px
    assert sum(widths.values()) <= 820 - 40, widths
    steps = [{"Status": "executed"}, {"Status": ug.SERVED_RERUN}]
    for rows in (steps[:1], steps):
        widths = runs_view.step_column_widths(rows)
        assert sum(widths.values()) <= 820 - 40 and widths["Reason"] >= 250, widths


def test_a_huge_text_diff_is_quick_and_bounded():
    import time

    big = "x\n" * 150_000 + "one change here\n" + "y " * 150_000
    edited = big.replace("one change", "two changes")
    started = time.perf_counter()
    lines = worddiff.diff_lines(big, edited)
    assert time.perf_counter() - started < 2.0
    assert [k for k, _ in lines] == ["…", " ", "-", "+", " "]
    assert changed(lines[3][1]) == ["two changes"]
    pasted = worddiff.diff_lines("a", "a " + "word " * 100_000)  # one line: a pasted page
    html = worddiff.to_html(pasted)
    assert len(html) < 5_000 and "more characters" in html
    rewritten = worddiff.diff_lines("\n".join(f"a{i}" for i in range(9000)),
                                    "\n".join(f"b{i}" for i in range(9000)))
    assert sum(len(t) for _, parts in rewritten for _, t in parts) < worddiff.SHOWN_CHARS + 2_000
    assert "not shown" in rewritten[-1][1][0][1]
