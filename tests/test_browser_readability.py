"""Issue 41, parts 3 and 4, in a real browser at 1280 x 800 (Playwright on Debian's chromium,
the harness of tests/test_browser.py): long lines are never cut off and the pages say what they
mean.

- The Diff page's text diff and the Fork page's preview of an edit in the middle of one very
  long line show the changed words inside the viewport (the diff wraps).
- "Create a demo run" and "Forks only" are whole labels, the runs table's last column is on
  screen (no sideways scrolling), every row of the Diff legend is one line.
- The verdict is said once; a step that re-ran with every model call served from the model-call
  cache is named as such; "What will change" is sentences, not a JSON tree.
One screenshot per page in test-artifacts/screenshots/readability-*.png."""

from __future__ import annotations

import pytest
from burr.core.graph import GraphBuilder

import rewind
# the dashboard process imports this module by its package path (REWIND_PIPELINES below)
from tests.test_browser import (  # noqa: F401  (fixtures: browser; helpers)
    STEP_TIMEOUT_MS, _streamlit, browser, commit, settle, shot,
)

WIDTH, HEIGHT = 1280, 800
# one line of ~3,000 characters with the edit in its middle: off-screen in a code block that
# does not wrap
HEAD = " ".join(f"head{i}" for i in range(250))
TAIL = " ".join(f"tail{i}" for i in range(250))
LONG = f"{HEAD} then the answer must be terse and cite every source {TAIL}"
EDITED = LONG.replace("terse and cite", "detailed and quote")


@rewind.action(reads=["prompt", "note"], writes=["draft"])
def r41_draft(state):
    return state.update(draft="Draft: " + state["prompt"])


@rewind.action(reads=["draft"], writes=["size"])
def r41_size(state):
    return state.update(size=len(state["draft"]))


@rewind.action(reads=["answer"], writes=["size"])
def r41_answer_size(state):
    return state.update(size=len(state["answer"]))


@rewind.action(reads=["question", "note"], writes=["answer"])
def r41_ask(state, temperature: float = 0.0):
    return state.update(answer=rewind.llm.chat([{"role": "user", "content": state["question"]}],
                                               temperature=temperature))


ECHO = rewind.Pipeline(
    name="r41-echo", entrypoint="draft",
    graph=GraphBuilder().with_actions(draft=r41_draft, size=r41_size)
    .with_transitions(("draft", "size")).build())
ASK = rewind.Pipeline(
    name="r41-ask", entrypoint="ask",
    graph=GraphBuilder().with_actions(ask=r41_ask, size=r41_answer_size)
    .with_transitions(("ask", "size")).build())
# what the dashboard process registers (REWIND_PIPELINES), so the Fork page can edit these runs
PIPELINES_ENV = "tests.test_browser_readability:ECHO,tests.test_browser_readability:ASK"


@pytest.fixture
def server(tmp_path):
    with _streamlit(tmp_path, {"REWIND_PIPELINES": PIPELINES_ENV}) as s:
        yield s


def new_page(browser):
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    return page


def overflowing(locator) -> list:
    """The element and its descendants whose content is wider than their box (a label cut with
    an ellipsis, a line that scrolls sideways): [(tag, text, scrollWidth, clientWidth)]. The 1 px
    boxes that hold a widget's input for screen readers are not drawn text."""
    return locator.evaluate("""el => [el, ...el.querySelectorAll('*')]
        .filter(e => e.clientWidth > 1 && e.scrollWidth > e.clientWidth + 1)
        .map(e => [e.tagName, (e.innerText || '').slice(0, 60), e.scrollWidth, e.clientWidth])""")


def within_viewport(locator) -> None:
    """The element is drawn inside the viewport horizontally and not clipped by a parent that
    scrolls sideways."""
    box = locator.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH + 1, box
    clipped = locator.evaluate("""el => { const r = el.getBoundingClientRect(); const out = [];
        for (let p = el.parentElement; p; p = p.parentElement) {
            const q = p.getBoundingClientRect();
            if (getComputedStyle(p).overflowX !== 'visible' && (r.right > q.right + 1 || r.left < q.left - 1))
                out.push([p.tagName, q.left, q.right]);
        } return out; }""")
    assert not clipped, f"{locator} is cut by {clipped} (box {box})"


def test_a_long_line_edit_is_on_screen_in_the_diff_and_the_fork_preview(server, browser):
    with rewind.Rewind(server["db"]) as rw:
        root = rw.run(ECHO, {"prompt": LONG, "note": "a"})
        fork = rw.fork(root.id, at="draft", edit={"prompt": EDITED})
    page = new_page(browser)

    # the Diff page: the draft's text diff marks the changed words, inside the viewport
    page.goto(f"{server['url']}/diff?a={root.id}&b={fork.id}")
    settle(page, "Diverged at")
    page.get_by_text("Text diff").first.wait_for()
    for tag, words in (("ins", "detailed"), ("ins", "quote"), ("del", "terse"), ("del", "cite")):
        marked = page.locator(tag).filter(has_text=words).first
        marked.wait_for()
        marked.scroll_into_view_if_needed()
        within_viewport(marked)
    # the verdict once: the banner, no second line repeating it
    main = page.locator('[data-testid="stMainBlockContainer"]').inner_text().lower()
    assert main.count("diverged at") == 1, main[:600]
    assert "verdict:" not in main
    shot(page, "readability-diff")

    # the Fork page: an edit in the middle of the long prompt, previewed before anything runs
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    page.goto(f"{server['url']}/fork?run={root.id}&node=draft")
    settle(page, "Fields it reads")
    prompt = page.get_by_label("prompt", exact=True)
    prompt.fill(EDITED)
    commit(prompt)
    settle(page, "Fork plan")
    inserted = page.locator("ins").filter(has_text="detailed").first
    inserted.wait_for()
    inserted.scroll_into_view_if_needed()
    within_viewport(inserted)
    # "What will change" in words, never a JSON tree
    change = page.get_by_text("prompt: text changed").first
    change.wait_for()
    assert page.locator('[data-testid="stJson"]').count() == 0
    shot(page, "readability-fork")
    log = server["log"].read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_labels_are_whole_and_the_runs_table_fits_at_1280_px(server, browser):
    page = new_page(browser)
    page.goto(server["url"] + "/")
    settle(page, "No runs yet")
    demo = page.get_by_role("button", name="Create a demo run")
    assert not overflowing(demo), overflowing(demo)
    demo.click()
    settle(page, "Fork from this step")
    with rewind.Rewind(server["db"]) as rw:
        run = rw.list_runs()[0]
        rw.fork(run.id, at="critique", edit={"question": "How do Python decorators work?"})
    page.goto(f"{server['url']}/?run={run.id}")
    settle(page, f"Run {run.id}")
    forks_only = page.locator('[data-testid="stCheckbox"]').filter(has_text="Forks only").first
    forks_only.wait_for()
    assert not overflowing(forks_only), overflowing(forks_only)
    assert not overflowing(page.get_by_role("button", name="Create a demo run"))

    # the runs table and the step list: every column on screen, no sideways scrolling
    page.get_by_text("Steps", exact=True).first.wait_for()
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=\"stDataFrame\"] .dvn-scroller').length >= 2")
    tables = page.locator('[data-testid="stDataFrame"]')
    for name, table in (("runs table", tables.nth(0)), ("step list", tables.nth(1))):
        width, client = table.locator(".dvn-scroller").first.evaluate("el => [el.scrollWidth, el.clientWidth]")
        assert width <= client + 1, f"the {name} scrolls sideways: {width}px in {client}px"
        within_viewport(table)
    # the open run is marked: said under the table
    page.get_by_text(f"Highlighted: the open run {run.id}").first.wait_for()
    shot(page, "readability-runs")


def test_the_diff_legend_rows_are_one_line_each(server, browser):
    with rewind.Rewind(server["db"]) as rw:
        root = rw.run(ECHO, {"prompt": "short", "note": "a"})
        fork = rw.fork(root.id, at="draft", edit={"prompt": "shorter"})
    page = new_page(browser)
    for path, expect in ((f"/diff?a={root.id}&b={fork.id}", "Diverged at"), (f"/?run={fork.id}", "Step draft")):
        page.goto(server["url"] + path)
        settle(page, expect)
        rows = page.locator(".rw-legend-row")
        rows.first.wait_for()
        assert rows.count() >= 1
        for i in range(rows.count()):
            row = rows.nth(i)
            height, line = row.evaluate(
                "el => [el.getBoundingClientRect().height, parseFloat(getComputedStyle(el).lineHeight)]")
            assert height <= line * 1.3, f"{path}: legend row {i} takes {height}px (a line is {line}px): {row.inner_text()}"
            assert not overflowing(row), overflowing(row)
            within_viewport(row)


def test_a_rerun_with_every_model_call_served_is_named_as_such(server, browser):
    with rewind.Rewind(server["db"]) as rw:
        root = rw.run(ASK, {"question": "Why is the sky blue?", "note": "a"})
        fork = rw.fork(root.id, at="ask", edit={"note": "b"})
        step = fork.step("ask")
    assert step.status == "executed" and step.calls and all(c["served"] for c in step.calls)
    page = new_page(browser)
    page.goto(f"{server['url']}/?run={fork.id}&node=ask")
    settle(page, "Step ask")
    title = page.get_by_text("Step ask").first.inner_text()
    assert "re-ran · calls served" in title, title
    legend = page.locator(".rw-legend-row").filter(has_text="re-ran · calls served")
    legend.first.wait_for()  # the legend is drawn after the graph's component
    assert legend.count() == 1
    page.goto(f"{server['url']}/?run={root.id}&node=ask")
    settle(page, "Step ask")
    assert "re-ran" not in page.get_by_text("Step ask").first.inner_text()
