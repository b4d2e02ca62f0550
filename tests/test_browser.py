"""End to end in a real browser: `streamlit run app.py` on a temp database, driven by Playwright
on Debian's chromium. Create the demo run from the UI, fork it at critique with an edit, open the
diff and check the verdict, with one screenshot per page in test-artifacts/screenshots/. The
documentation's pictures (docs/screenshots/, runs.png is README's) come from a separate run on
clean data, free of the HTML probes, refreshed only when REWIND_UPDATE_SCREENSHOTS is set.
And a deep link as the very first visit after the server starts gets the app shell (the four
titled pages, the wide layout, the Refresh button), never Streamlit's legacy `pages/` menu."""

from __future__ import annotations

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


@pytest.fixture
def server(tmp_path):
    try:
        import rewind.pipelines.research  # noqa: F401
    except ImportError as e:
        pytest.skip(f"the demo pipeline is not available yet: {e}")
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
def browser():
    exe = shutil.which("chromium")
    if not exe:
        pytest.skip("chromium is not installed")
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
    assert names == ["Runs", "Fork", "Diff", "Batch", "Settings"], names
    page.get_by_role("button", name="Refresh data").wait_for()
    width = page.locator('[data-testid="stMainBlockContainer"]').bounding_box()["width"]
    viewport = page.viewport_size["width"]
    assert width > 0.6 * viewport, f"narrow layout: main block {width}px of {viewport}px"


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
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    console: list = []
    page.on("console", lambda m: console.append(m.text))
    page.goto(server["url"] + path)
    settle(page, expect)
    assert_app_shell(page)
    for frame in page.frames[1:]:  # the graph has been drawn
        frame.wait_for_selector("canvas", timeout=STEP_TIMEOUT_MS)
    assert not [m for m in console if "Unknown option" in m], console
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
    page.get_by_role("button", name="Fork from this step").click()
    settle(page, "Fork & replay")
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
    settle(page, "Verdict:")
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
        root = rw.run(pipeline, {"question": SAMPLE_QUESTIONS[0]})
        fork = rw.fork(root.id, at="critique", edit={"question": SAMPLE_QUESTIONS[1]})
    page = browser.new_page(viewport={"width": 1440, "height": 1400})
    page.set_default_timeout(STEP_TIMEOUT_MS)
    base = server["url"]
    for name, path, expect in (
        ("runs", f"/?run={fork.id}&node=critique", "Step critique"),
        ("fork", f"/fork?run={root.id}&node=critique", "Fields it reads"),
        ("diff", f"/diff?a={root.id}&b={fork.id}", "Diverged at"),
        ("settings", "/settings", "Model provider"),
    ):
        page.goto(base + path)
        settle(page, expect)
        assert_app_shell(page)
        png = shot(page, f"docs-{name}")
        text = "\n".join(f.locator("body").inner_text() for f in page.frames)
        assert not [p for p in PROBES if p in text], f"{name}: a probe string is on the page"
        if os.environ.get("REWIND_UPDATE_SCREENSHOTS"):
            DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, DOCS_SHOTS / f"{name}.png")
    log = server["log"].read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
