"""Sign-in and sharing in a real browser: `streamlit run app.py` with `[auth]` pointing at a real
OIDC provider on loopback (`oidc-provider-mock`, started here), driven by Playwright on Debian's
chromium, one browser context per person.

- a visitor who has not signed in sees the sign-in page only, whatever the URL (no run id, no
  run data, no Settings);
- alice signs in and sees her runs only; bob, in another context, does not see them even by
  deep link; an admin (REWIND_ADMINS) sees both;
- bob's base URL on Settings leaves alice's session as it was, and the capture server he enters
  there never receives the server's OPENAI_API_KEY (the server's env points OPENAI_BASE_URL at
  `python -m rewind serve-llm`, its key is a dummy we can search for); his own key, sent to his
  URL, is never shown again.

Needs the core's run isolation (`Rewind(url, owner=..., admin=...)`) and per-session model
settings (`rewind.llm.session_settings`).
"""

from __future__ import annotations

import http.server
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import rewind

# one browser, one way to wait for an idle page, and the same timeouts as the other browser tests
from tests.test_browser import (  # noqa: F401  (browser: a fixture)
    STARTUP_TIMEOUT_S, STEP_TIMEOUT_MS, browser, settle,
)

ROOT = Path(__file__).resolve().parents[1]
SERVER_KEY = "sk-server-DUMMY-" + "k" * 24  # what must never reach a URL a visitor chose
BOB_KEY = "sk-bob-own-" + "b" * 24
ALICE, BOB, ADMIN = "alice@example.com", "bob@example.com", "admin@example.com"


# --- processes and servers -----------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, log: Path, what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)  # polling a health endpoint, not waiting for the UI
    raise RuntimeError(f"{what} did not come up at {url}:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


def start(cmd: list, log: Path, env: dict | None = None, cwd: Path = ROOT) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def streamlit_cmd(port: int, *extra: str) -> list:
    return [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
            "--server.address", "127.0.0.1", "--server.port", str(port),
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none", *extra]


def base_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REWIND_MODEL", "REWIND_PROVIDER",
                        "REWIND_PIPELINES", "REWIND_ADMINS", "REWIND_ALLOW_SIDE_EFFECTS")}
    env.update({"REWIND_OUTBOX": str(tmp_path / "outbox"), "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
                "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])})
    return env


class Capture(http.server.ThreadingHTTPServer):
    """A model endpoint a visitor might enter: records every request (raw headers and body) and
    answers by forwarding to serve-llm without any credential."""

    daemon_threads = True

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.seen: list = []
        super().__init__(("127.0.0.1", 0), _CaptureHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _CaptureHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append({"path": self.path, "headers": str(self.headers), "body": body,
                                 "authorization": self.headers.get("Authorization")})
        path = self.path[len("/v1"):] if self.path.startswith("/v1") else self.path
        req = urllib.request.Request(self.server.upstream + path, data=body or None, method=self.command,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, data = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _forward


@pytest.fixture
def stack(tmp_path):
    """serve-llm, the capture server, the OIDC provider and the dashboard with [auth]."""
    try:
        import rewind.pipelines.research  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the demo pipeline is needed: {e}")
    procs: list = []
    capture = None
    try:
        # the server's own model endpoint
        llm_log = tmp_path / "serve-llm.log"
        llm = start([sys.executable, "-m", "rewind", "serve-llm", "--host", "127.0.0.1", "--port", "0"],
                    llm_log, env=base_env(tmp_path))
        procs.append(llm)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not re.search(r"listening on (http://\S+/v1)", llm_log.read_text()):
            assert llm.poll() is None and time.monotonic() < deadline, llm_log.read_text()
            time.sleep(0.1)  # polling the log for the address it chose
        llm_url = re.search(r"listening on (http://\S+/v1)", llm_log.read_text()).group(1)

        capture = Capture(llm_url)
        threading.Thread(target=capture.serve_forever, daemon=True).start()

        # the identity provider
        idp_port = free_port()
        idp_log = tmp_path / "oidc.log"
        idp = start([sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1", "--port", str(idp_port)],
                    idp_log, env=base_env(tmp_path))
        procs.append(idp)
        idp_url = f"http://127.0.0.1:{idp_port}"
        wait_http(idp_url + "/.well-known/openid-configuration", idp, idp_log, "oidc-provider-mock")

        # the dashboard, its secrets in a file of its own (never the repository's .streamlit/)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        secrets_file = tmp_path / "secrets.toml"
        secrets_file.write_text(
            "[auth]\n"
            f'redirect_uri = "{url}/oauth2callback"\n'
            f'cookie_secret = "{secrets.token_urlsafe(32)}"\n'
            'client_id = "rewind-dashboard"\n'
            f'client_secret = "{secrets.token_urlsafe(16)}"\n'
            f'server_metadata_url = "{idp_url}/.well-known/openid-configuration"\n'
        )
        db = tmp_path / "shared.db"
        env = base_env(tmp_path)
        env.update({"REWIND_DB": str(db), "OPENAI_API_KEY": SERVER_KEY, "OPENAI_BASE_URL": llm_url,
                    "REWIND_ADMINS": f" {ADMIN.upper()} , ops@example.com",
                    # the provider runs on plain http on loopback
                    "AUTHLIB_INSECURE_TRANSPORT": "1"})
        log = tmp_path / "streamlit.log"
        app = start(streamlit_cmd(port, "--secrets.files", str(secrets_file)), log, env=env)
        procs.append(app)
        wait_http(url + "/_stcore/health", app, log, "streamlit")
        yield {"url": url, "db": str(db), "capture": capture, "llm_url": llm_url, "log": log}
    finally:
        for p in reversed(procs):
            stop(p)
        if capture is not None:
            capture.shutdown()
            capture.server_close()


def everything(page) -> str:
    """All a visitor could read: the text and the HTML of every frame, and the URL."""
    return "\n".join([page.url] + [f.content() for f in page.frames]
                     + [f.locator("body").inner_text() for f in page.frames])


def new_page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 1200})
    page = context.new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    return page


def sign_in(page, base: str, email: str) -> None:
    page.goto(base + "/")
    settle(page, "Sign in")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector('input[name="sub"]')  # the provider's own page
    assert page.url.startswith("http://127.0.0.1:") and "/oauth2/authorize" in page.url
    page.fill('input[name="sub"]', email)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(re.compile(re.escape(base) + r"/?(\?.*)?$"))
    settle(page, f"Signed in as {email}")


def create_demo_run(page) -> None:
    page.get_by_role("link", name="Runs").click()
    settle(page, "All runs")
    page.get_by_role("button", name="Create a demo run").click()
    settle(page, "Fork from this step")


def runs_shown(page) -> str:
    """The Runs page's "Showing 1–n of N runs" caption."""
    page.get_by_role("link", name="Runs").click()
    settle(page, "All runs")
    return page.get_by_text(re.compile(r"Showing .* runs")).first.inner_text()


def owned(db: str, owner: str) -> list:
    with rewind.Rewind(db, owner=owner) as rw:
        return [r.id for r in rw.list_runs()]


def assert_sign_in_only(page, run_ids: list) -> None:
    settle(page, "Sign in")
    text = everything(page)
    for rid in run_ids:
        assert f"Run {rid}" not in text and f"run {rid}" not in text.lower().replace(f"?run={rid}", "")
    for word in ("Model provider", "All runs", "Fork & replay", "Create a demo run", "Refresh data"):
        assert word not in text, word
    assert not page.locator('[data-testid="stSidebarNav"] a').count()


def open_settings(page) -> None:
    page.get_by_role("link", name="Settings").click()
    settle(page, "Model provider")


# --- the test ------------------------------------------------------------------------------------

def test_sign_in_isolation_and_safe_settings(stack, browser):
    base, db, capture = stack["url"], stack["db"], stack["capture"]

    # alice signs in and makes a run
    alice = new_page(browser)
    sign_in(alice, base, ALICE)
    create_demo_run(alice)
    (alice_run,) = owned(db, ALICE)
    assert "of 1 runs" in runs_shown(alice)

    # bob, in a browser context of his own, makes his and never sees hers
    bob = new_page(browser)
    sign_in(bob, base, BOB)
    assert "No runs yet" in everything(bob)
    create_demo_run(bob)
    (bob_run,) = owned(db, BOB)
    assert bob_run != alice_run
    assert "of 1 runs" in runs_shown(bob)
    assert alice_run not in everything(bob)
    for path in (f"/?run={alice_run}", f"/runs?run={alice_run}&node=critique",
                 f"/fork?run={alice_run}", f"/diff?a={alice_run}&b={bob_run}"):
        bob.goto(base + path)
        settle(bob)
        body = "\n".join(f.locator("body").inner_text() for f in bob.frames)
        assert f"Run {alice_run}" not in body, path
        assert "Step critique" not in body or f"Run {bob_run}" in body, path
        if path.startswith("/fork"):
            assert f"There is no run {alice_run}" in body
        if path.startswith("/diff"):
            assert "Diverged at" not in body and "Identical" not in body, path
    alice.goto(f"{base}/?run={bob_run}")
    settle(alice)
    assert f"Run {bob_run}" not in alice.locator("body").inner_text()

    # the admin sees both
    admin = new_page(browser)
    sign_in(admin, base, ADMIN)
    assert "of 2 runs" in runs_shown(admin)
    for rid in (alice_run, bob_run):
        admin.goto(f"{base}/?run={rid}")
        settle(admin, f"Run {rid}")
    open_settings(admin)
    admin.get_by_text("Purge old cache entries").wait_for()
    open_settings(bob)
    assert "Purge old cache entries" not in bob.locator("body").inner_text()

    # a visitor who has not signed in: the sign-in page only, whatever the link
    anon = new_page(browser)
    for path in ("/", f"/?run={alice_run}", "/settings", f"/fork?run={bob_run}",
                 f"/diff?a={alice_run}&b={bob_run}", "/runs"):
        anon.goto(base + path)
        assert_sign_in_only(anon, [alice_run, bob_run])

    # bob points his session at a server of his own, with a key of his own
    bob.get_by_label("OpenAI-compatible base URL", exact=True).fill(capture.url)
    bob.get_by_role("textbox", name="Model", exact=True).fill("sim-small")
    bob.get_by_label("Your API key for this session (optional)", exact=True).fill(BOB_KEY)
    bob.get_by_role("button", name="Apply").click()
    settle(bob, "chosen in this session")
    bob.get_by_text(capture.url).first.wait_for()  # the code block is drawn lazily
    assert BOB_KEY not in everything(bob)  # never shown again, not even in a password field
    # alice's session still has the server's settings
    open_settings(alice)
    alice.get_by_text(stack["llm_url"]).first.wait_for()
    alice_text = alice.locator("body").inner_text()
    assert capture.url not in alice_text and "Base URL (the server's)" in alice_text

    # bob's next run calls his server: with his key, never the server's
    create_demo_run(bob)
    assert capture.seen, "bob's run did not reach the base URL he chose"
    for req in capture.seen:
        raw = req["headers"] + req["body"].decode("utf-8", "replace")
        assert SERVER_KEY not in raw, f"the server's key reached {capture.url}{req['path']}"
        assert req["authorization"] == f"Bearer {BOB_KEY}"
    # and bob without a key of his own sends none
    open_settings(bob)
    bob.get_by_role("button", name="Forget my key").click()
    settle(bob, "Model provider")
    bob.get_by_role("link", name="Runs").click()
    settle(bob, "All runs")
    n_before = len(capture.seen)
    bob.get_by_text("Start a run").first.click()
    bob.get_by_text("Serve cache hits").first.click()  # execute every node: real model calls
    bob.get_by_role("button", name="Start run").click()
    settle(bob, "Fork from this step")
    later = capture.seen[n_before:]
    assert later, "bob's uncached run made no model call to his base URL"
    for req in later:
        raw = req["headers"] + req["body"].decode("utf-8", "replace")
        assert SERVER_KEY not in raw and BOB_KEY not in raw
        assert req["authorization"] in (None, "Bearer not-needed"), req["authorization"]

    # alice's runs keep going to the server's endpoint, never to bob's
    n_before = len(capture.seen)
    alice.get_by_role("link", name="Runs").click()
    settle(alice, "All runs")
    alice.get_by_text("Start a run").first.click()
    alice.get_by_text("Serve cache hits").first.click()
    alice.get_by_role("button", name="Start run").click()
    settle(alice, "Fork from this step")
    assert len(capture.seen) == n_before, "alice's run reached the base URL bob chose"
    assert len(owned(db, ALICE)) == 2

    log = stack["log"].read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert SERVER_KEY not in log and BOB_KEY not in log
