"""End to end in a real browser: `streamlit run app.py` on a temp database, driven by Playwright
on Debian's chromium. Create the demo run from the UI, fork it at critique with an edit, open the
diff and check the verdict, with one screenshot per page in test-artifacts/screenshots/. The
documentation's pictures (docs/screenshots/, runs.png is README's) come from a separate run on
clean data, free of the HTML probes, refreshed only when REWIND_UPDATE_SCREENSHOTS is set.
And a deep link as the very first visit after the server starts gets the app shell (the four
titled pages, the wide layout, the Refresh button), never Streamlit's legacy `pages/` menu.

Issue 14 at 1280 px: a state-edit fork's diff shows delta 0 on every unchanged node with every
reason on screen (no horizontal scrolling), the fork plan names the nodes that will re-run, a
model call's messages are text, the graph draws a branching and a 40-node pipeline without a
vis-network console error, and a bad REWIND_PIPELINES entry is a banner while the demo runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import rewind

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "test-artifacts" / "screenshots"
DOCS_SHOTS = ROOT / "docs" / "screenshots"
PROBES = ("<img", "onerror", "<script", "alert(")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
EDITED = "How do Python generators differ from iterators? <img src=x onerror=alert(1)>"
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
STARTUP_TIMEOUT_S = 90
STEP_TIMEOUT_MS = 90_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)  # polling the health endpoint, not waiting for the UI
    raise RuntimeError(f"streamlit did not become healthy:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def _streamlit(tmp_path, extra_env: dict | None = None):
    import rewind.pipelines.research  # noqa: F401  (the demo must exist: no skip)

    port = _free_port()
    db = tmp_path / "browser.db"
    log = tmp_path / "streamlit.log"
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REWIND_MODEL", "REWIND_PROVIDER",
                        "REWIND_PIPELINES")}
    env.update({
        "REWIND_DB": str(db), "REWIND_OUTBOX": str(tmp_path / "outbox"),
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
        **(extra_env or {}),
    })
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
        "--server.address", "127.0.0.1", "--server.port", str(port),
        "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url, log)
        yield {"url": url, "db": str(db), "log": log}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.fixture
def server(tmp_path):
    with _streamlit(tmp_path) as s:
        yield s


@pytest.fixture
def bad_pipelines_server(tmp_path):
    with _streamlit(tmp_path, {"REWIND_PIPELINES": "no_such_module_14:pipeline"}) as s:
        yield s


@pytest.fixture
def browser():
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is needed for the browser tests (apt-get install chromium)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def settle(page, text: str | None = None) -> None:
    """Wait until `text` is on the page (when given) and the script is idle."""
    if text is not None:
        page.get_by_text(text).first.wait_for(state="visible", timeout=STEP_TIMEOUT_MS)
    page.wait_for_selector(IDLE, timeout=STEP_TIMEOUT_MS)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"] [data-testid=\"stStatusWidgetRunningIcon\"]')",
        timeout=STEP_TIMEOUT_MS,
    )


def open_by_click(page, button: str, text: str) -> None:
    """Click a button that opens another page and wait for `text` there. Streamlit can drop a
    click that lands while the page's graph component reports its first value (both ask for a
    rerun at once): a click that left the page idle, unchanged and the button still there is
    given once more. Only for buttons that open a page, never for one that writes."""
    target = page.get_by_role("button", name=button)
    target.click()
    try:
        page.get_by_text(text).first.wait_for(state="visible", timeout=30_000)
    except Exception as e:  # playwright's TimeoutError (imported with the browser, lazily)
        if type(e).__name__ != "TimeoutError":
            raise
        page.wait_for_selector(IDLE, timeout=STEP_TIMEOUT_MS)
        if not page.get_by_text(text).count() and target.count():
            target.first.click()
    settle(page, text)


def shot(page, name: str) -> Path:
    """A screenshot of the whole page: Streamlit scrolls inside its main block, so the viewport
    is grown to the content's height first (and the mouse moved off any tooltip)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.mouse.move(5, 5)
    page.wait_for_selector(IDLE, timeout=STEP_TIMEOUT_MS)
    page.wait_for_load_state("networkidle")  # lazily loaded element code (tables, charts)
    height = page.evaluate(
        "() => document.querySelector('[data-testid=\"stMainBlockContainer\"]').scrollHeight"
    )
    width = page.viewport_size["width"]
    page.set_viewport_size({"width": width, "height": min(max(int(height) + 40, 900), 7000)})
    page.wait_for_selector(IDLE, timeout=STEP_TIMEOUT_MS)
    page.wait_for_load_state("networkidle")
    # elements whose code is still loading are drawn as skeletons: wait until every one is real
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stSkeleton\"]')",
                           timeout=STEP_TIMEOUT_MS)
    for frame in page.frames[1:]:  # the graph component draws on a canvas in its iframe
        frame.wait_for_selector("canvas", timeout=STEP_TIMEOUT_MS)
    charts = page.locator('[data-testid="stPlotlyChart"]')
    for i in range(charts.count()):
        charts.nth(i).locator(".main-svg").first.wait_for(timeout=STEP_TIMEOUT_MS)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": width, "height": 1400})
    return path


def commit(locator) -> None:
    """Streamlit text widgets send their value on Enter (input) / Ctrl+Enter (text area)."""
    tag = locator.evaluate("el => el.tagName")
    locator.press("Control+Enter" if tag == "TEXTAREA" else "Enter")


def assert_app_shell(page) -> None:
    """The navigation app.py draws, not the legacy one (lowercase file names, narrow page)."""
    links = page.locator('[data-testid="stSidebarNav"] a')
    links.first.wait_for()
    # a material icon renders as its ligature name on a line of its own before the title
    names = [t.strip().splitlines()[-1].strip() for t in links.all_inner_texts()]
    assert names == ["Runs", "Fork", "Diff", "Batch", "Blame", "Settings"], names
    page.get_by_role("button", name="Refresh data").wait_for()
    width = page.locator('[data-testid="stMainBlockContainer"]').bounding_box()["width"]
    viewport = page.viewport_size["width"]
    assert width > 0.6 * viewport, f"narrow layout: main block {width}px of {viewport}px"


VIS_ERRORS = ("Unknown option", "Invalid type received", "Errors have been found in the supplied options")


def vis_errors(console: list) -> list:
    """vis-network's complaints about the options it was given (it ignores them and lays the
    graph out its own way)."""
    return [m for m in console if any(e in m for e in VIS_ERRORS)]


def table_rows(page) -> list:
    """The rows of the page's first static table (st.table) as {header: cell text}."""
    table = page.locator('[data-testid="stTable"] table').first
    table.locator("tbody tr").first.wait_for()  # element code loads lazily
    heads = [h.strip() for h in table.locator("thead th").all_inner_texts()]
    return [dict(zip(heads, [c.strip() for c in row.locator("td, th").all_inner_texts()]))
            for row in table.locator("tbody tr").all()]


def no_horizontal_scroll(page, selector: str) -> None:
    for i in range(page.locator(selector).count()):
        width, client = page.locator(selector).nth(i).evaluate("el => [el.scrollWidth, el.clientWidth]")
        assert width <= client + 1, f"{selector} #{i} scrolls sideways: {width}px in {client}px"


@pytest.mark.parametrize("target", ["diff", "fork", "runs"])
def test_a_deep_link_as_the_first_visit_gets_the_app_shell(server, browser, target):
    from rewind.pipelines.research import SAMPLE_QUESTIONS, pipeline

    with rewind.Rewind(server["db"]) as rw:  # written before any browser session exists
        root = rw.run(pipeline, {"question": SAMPLE_QUESTIONS[0]})
        fork = rw.fork(root.id, at="critique", edit={"question": SAMPLE_QUESTIONS[1]})
    path, expect = {
        "diff": (f"/diff?a={root.id}&b={fork.id}", "Diverged at"),
        "fork": (f"/fork?run={root.id}&node=critique", "Fields it reads"),
        "runs": (f"/runs?run={fork.id}&node=critique", "Step critique"),
    }[target]
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    console: list = []
    page.on("console", lambda m: console.append(m.text))
    page.goto(server["url"] + path)
    settle(page, expect)
    assert_app_shell(page)
    for frame in page.frames[1:]:  # the graph has been drawn
        frame.wait_for_selector("canvas", timeout=STEP_TIMEOUT_MS)
    assert not vis_errors(console), console
    assert not page.get_by_text("Page not found").count()
    if target == "diff":
        assert f"a={root.id}" in page.url and f"b={fork.id}" in page.url
        assert "critique" in page.get_by_text("Diverged at").first.inner_text()
    else:
        want = root.id if target == "fork" else fork.id
        assert f"run={want}" in page.url
    # the next page, through the navigation app.py drew
    page.get_by_role("link", name="Settings").click()
    settle(page, "Model provider")
    assert_app_shell(page)
    log = server["log"].read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_demo_run_fork_and_diff_in_a_browser(server, browser):
    dialogs: list = []
    page = browser.new_page(viewport={"width": 1440, "height": 1400})
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.set_default_timeout(STEP_TIMEOUT_MS)
    base = server["url"]

    # a fresh store: the dashboard offers the first demo run
    page.goto(base + "/")
    settle(page, "No runs yet")
    page.get_by_role("button", name="Create a demo run").click()
    settle(page, "Fork from this step")
    with rewind.Rewind(server["db"]) as rw:
        runs = rw.list_runs()
        assert len(runs) == 1 and runs[0].status == "completed" and runs[0].pipeline == "research"
        run = rw.get_run(runs[0].id)
    assert [s.node for s in run.steps] == [
        "plan", "research", "analyse", "critique", "revise", "compose", "verify", "publish"]
    page.get_by_text(f"Run {run.id}").first.wait_for()
    shot(page, "runs-first-run")

    # deep link to the critique step, then "Fork from this step"
    page.goto(f"{base}/?run={run.id}&node=critique")
    settle(page, "Step critique")
    open_by_click(page, "Fork from this step", "Fork & replay")
    page.get_by_text("Fields it reads").wait_for()
    question = page.get_by_label("question", exact=True)
    question.fill(EDITED)
    commit(question)
    settle(page, "What will change")
    page.get_by_text("No changes").wait_for(state="detached")
    shot(page, "fork")
    page.get_by_role("button", name="Replay").click()
    settle(page, "Last replay: fork")
    with rewind.Rewind(server["db"]) as rw:
        forks = rw.list_runs(forks_only=True)
        assert len(forks) == 1
        fork = rw.get_run(forks[0].id)
    assert fork.parent_id == run.id and fork.fork_node == "critique"
    assert fork.edit == {"question": EDITED}
    assert [s.status for s in fork.steps[:3]] == ["inherited"] * 3
    assert fork.step("critique").status == "executed"
    assert fork.step("publish").status == "dry-run"
    shot(page, "fork-result")

    # the diff
    page.get_by_role("button", name="Open the diff").click()
    settle(page, "Diverged at")
    verdict = page.get_by_text("Diverged at").first
    verdict.wait_for()
    assert "critique" in verdict.inner_text()
    assert f"a={run.id}" in page.url and f"b={fork.id}" in page.url
    shot(page, "diff")

    # settings, through the sidebar navigation
    page.get_by_role("link", name="Settings").click()
    settle(page, "Model provider")
    assert page.get_by_text("simulator").first.is_visible()
    shot(page, "settings")

    # the Runs page on the fork: lineage, inherited / executed / dry-run colours
    page.goto(f"{base}/?run={fork.id}&node=critique")
    settle(page, "Step critique")
    page.get_by_role("button", name=f"↑ {run.id}").wait_for()
    shot(page, "runs")

    # the edited question (with an <img onerror>) was shown as text everywhere, never as HTML
    assert not dialogs, f"text executed as script: {dialogs}"
    for frame in page.frames:
        assert frame.locator('img[src="x"]').count() == 0
    log = server["log"].read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_page_screenshots_for_the_docs(server, browser):
    """Every page on a demo run and a fork with an ordinary edit: no probe string anywhere on
    the page, so the pictures can go in the README (copied there on request only)."""
    from rewind.pipelines.research import SAMPLE_QUESTIONS, pipeline

    with rewind.Rewind(server["db"]) as rw:
        for q in SAMPLE_QUESTIONS[2:5]:  # a few more runs for the Batch page
            rw.run(pipeline, {"question": q})
        root = rw.run(pipeline, {"question": SAMPLE_QUESTIONS[0]})
        fork = rw.fork(root.id, at="critique", edit={"question": SAMPLE_QUESTIONS[1]})
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    base = server["url"]
    for name, path, expect in (
        ("runs", f"/?run={fork.id}&node=critique", "Step critique"),
        ("fork", f"/fork?run={root.id}&node=critique", "Fields it reads"),
        ("diff", f"/diff?a={root.id}&b={fork.id}", "Diverged at"),
        ("batch", "/batch", "Run batch"),
        ("settings", "/settings", "Model provider"),
    ):
        page.goto(base + path)
        settle(page, expect)
        assert_app_shell(page)
        if name == "fork":  # the plan of an ordinary edit
            question = page.get_by_label("question", exact=True)
            question.fill("How do Python decorators work?")
            commit(question)
            settle(page, "Will re-run:")
        if name == "batch":
            page.get_by_role("button", name="Run batch").click()
            settle(page, "Result: forked at")
        png = shot(page, f"docs-{name}")
        text = "\n".join(f.locator("body").inner_text() for f in page.frames)
        assert not [p for p in PROBES if p in text], f"{name}: a probe string is on the page"
        if os.environ.get("REWIND_UPDATE_SCREENSHOTS"):
            DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, DOCS_SHOTS / f"{name}.png")
    log = server["log"].read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_costs_plan_and_model_calls_at_1280_px(server, browser):
    """A state-edit fork's diff: delta 0 on every node whose inputs did not change, every reason
    on screen; the Fork page's plan names what will re-run; a model call's messages as text."""
    from rewind.pipelines.research import SAMPLE_QUESTIONS, pipeline

    with rewind.Rewind(server["db"]) as rw:
        root = rw.run(pipeline, {"question": SAMPLE_QUESTIONS[0]})
        fork = rw.fork(root.id, at="critique", edit={"question": SAMPLE_QUESTIONS[1]})
        d = rw.diff(root.id, fork.id)
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    console: list = []
    page.on("console", lambda m: console.append(m.text))

    page.goto(f"{server['url']}/diff?a={root.id}&b={fork.id}")
    settle(page, "Diverged at")
    assert_app_shell(page)
    rows = {r["Node"]: r for r in table_rows(page)}
    assert list(rows) == [r.node for r in d.rows]
    inherited = [n for n, r in rows.items() if r["B status"] == "inherited"]
    assert inherited == ["plan", "research", "analyse"]
    for n in inherited + ["publish"]:  # inputs unchanged: no cost change on these nodes
        assert rows[n]["Δ cost"] == "0", rows[n]
        assert rows[n]["A cost"] == rows[n]["B cost"], rows[n]
    assert rows["plan"]["A cost"] != "0"  # the inherited plan costs what it cost in A
    assert "question" in rows["critique"]["B reason"]
    no_horizontal_scroll(page, '[data-testid="stTable"]')
    for cell in page.locator('[data-testid="stTable"] td').all()[:40]:  # reasons on screen
        box = cell.bounding_box()
        assert box and box["x"] + box["width"] <= 1280 + 1, box
    assert page.get_by_text("Trajectory cost B").first.is_visible()

    # the fork plan, before anything runs
    page.goto(f"{server['url']}/fork?run={root.id}&node=critique")
    settle(page, "Fields it reads")
    question = page.get_by_label("question", exact=True)
    question.fill("How do Python decorators work?")
    commit(question)
    settle(page, "Fork plan")
    plan = page.get_by_text("Will re-run:").first
    plan.wait_for()
    assert "critique" in plan.locator("xpath=..").inner_text()
    skipped = page.get_by_text("Side effects skipped (dry-run):").first
    skipped.wait_for()  # drawn in the same run as the line above, streamed after it (a loaded CI lost the race)
    assert skipped.is_visible()
    with rewind.Rewind(server["db"]) as rw:
        assert rw.count_runs() == 2  # the plan ran nothing

    # the model call of the plan step: its messages as text
    page.goto(f"{server['url']}/runs?run={root.id}&node=plan")
    settle(page, "Step plan")
    page.get_by_role("tab", name="Model calls (1)").click()
    message = root.step("plan").calls[0]["messages"][0]["content"]
    first_line = message.splitlines()[0]
    shown = page.locator('[data-testid="stText"]').filter(has_text=first_line).first
    shown.wait_for()
    assert shown.inner_text().strip().splitlines()[0] == first_line  # real line breaks
    assert page.locator('[data-testid="stChatMessage"]').count() >= 2
    no_horizontal_scroll(page, '[data-testid="stMainBlockContainer"]')
    assert not vis_errors(console), vis_errors(console)
    log = server["log"].read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def _branching_and_long_pipelines():
    from burr.core import default, expr, when
    from burr.core.graph import GraphBuilder

    @rewind.action(reads=["n"], writes=["n", "side"])
    def start(state):
        return state.update(n=state["n"] + 1, side="left" if state["n"] % 2 == 0 else "right")

    @rewind.action(reads=["n"], writes=["path"])
    def left(state):
        return state.update(path="left")

    @rewind.action(reads=["n"], writes=["path"])
    def right(state):
        return state.update(path="right")

    @rewind.action(reads=["path", "n"], writes=["joined"])
    def join(state):
        return state.update(joined=f"{state['path']}:{state['n']}")

    @rewind.action(reads=["joined"], writes=["done"])
    def end(state):
        return state.update(done=True)

    branching = rewind.Pipeline(
        name="browser-branching", entrypoint="start",
        graph=GraphBuilder().with_actions(start=start, left=left, right=right, join=join, end=end)
        .with_transitions(("start", "left", when(side="left")), ("start", "right", default),
                          ("left", "join"), ("right", "join"), ("join", "start", expr("n < 3")),
                          ("join", "end", default)).build())

    @rewind.action(reads=["x"], writes=["x"])
    def bump(state):
        return state.update(x=state["x"] + 1)

    names = [f"step{i:02d}" for i in range(40)]
    long = rewind.Pipeline(
        name="browser-forty", entrypoint=names[0],
        graph=GraphBuilder().with_actions(**{n: bump for n in names})
        .with_transitions(*zip(names, names[1:])).build())
    return branching, long


def test_the_graph_draws_a_branching_and_a_40_node_pipeline_without_console_errors(server, browser):
    branching, long = _branching_and_long_pipelines()
    with rewind.Rewind(server["db"]) as rw:
        b = rw.run(branching, {"n": 0})
        f = rw.run(long, {"x": 0})
    assert b.status == f.status == "completed" and len(f.steps) == 40
    assert {s.node for s in b.steps} == {"start", "left", "right", "join", "end"}
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    console: list = []
    page.on("console", lambda m: console.append(m.text))
    for run, step in ((b, "Step start"), (f, "Step step00")):
        page.goto(f"{server['url']}/runs?run={run.id}")
        settle(page, step)
        page.locator("iframe").first.wait_for()  # the graph component's frame
        for frame in page.frames[1:]:
            frame.wait_for_selector("canvas", timeout=STEP_TIMEOUT_MS)
        shot(page, f"graph-{run.pipeline}")
    assert not vis_errors(console), vis_errors(console)
    assert not [m for m in console if "vis" in m.lower() and "error" in m.lower()], console


def test_a_bad_pipelines_entry_is_a_banner_and_the_demo_still_runs(bad_pipelines_server, browser):
    server = bad_pipelines_server
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    page.goto(server["url"] + "/")
    settle(page, "No runs yet")
    banner = page.get_by_text("REWIND_PIPELINES entry").first
    banner.wait_for()
    text = banner.inner_text()
    assert "no_such_module_14:pipeline" in text and "ModuleNotFoundError" in text, text
    page.get_by_role("button", name="Create a demo run").click()
    settle(page, "Fork from this step")
    with rewind.Rewind(server["db"]) as rw:
        runs = rw.list_runs()
    assert len(runs) == 1 and runs[0].status == "completed"
    open_by_click(page, "Fork from this step", "Fields it reads")
    assert not page.get_by_text("is not registered").count()
    assert page.get_by_text("REWIND_PIPELINES entry").first.is_visible()  # on every page
    log = server["log"].read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
