"""The command line, called in-process (`rewind.cli.main(argv)`) against SQLite files in tmp_path;
two subprocess tests prove `python -m rewind` and the `rewind` console script start it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from rewind import Rewind, llm
from rewind.cli import main

RUN_ID = re.compile(r"^run ([0-9a-f]{16})\s+(\w+)", re.M)
SECRET = "sk-test-0123456789abcdefSECRET"


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def cli_env(tmp: Path, **extra: str) -> dict:
    """The environment of a CLI call: no provider or Rewind settings but the outbox (PYTHONPATH,
    set by conftest, is kept for the processes that get it)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REWIND_MODEL", "REWIND_PROVIDER",
                        "REWIND_DB", "REWIND_PIPELINES", "REWIND_DEBUG")}
    env["REWIND_OUTBOX"] = str(tmp / "outbox")
    env.update(extra)
    return env


@contextlib.contextmanager
def environment(env: dict):
    """os.environ is `env` inside (the model client is rebuilt on both sides)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    llm.reset_client()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        llm.reset_client()


class Cli:
    """`cli("show", run_id)` runs `rewind --db <db> show <run_id>` in this process (in `env`,
    a whole environment like `cli_env`'s, when given)."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.db = tmp / "cli.db"

    def __call__(self, *args: str, env: dict = None, db: Path = None) -> Result:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.ExitStack() as stack:
            if env is not None:
                stack.enter_context(environment(env))
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            code = main(["--db", str(db or self.db), *args])
        return Result(code, out.getvalue(), err.getvalue())

    def run_count(self, db: Path = None) -> int:
        with Rewind(str(db or self.db)) as rw:
            return rw.count_runs()


def one_error_line(p: Result) -> str:
    err = p.stderr.strip()
    assert err.startswith("rewind: error: ") and len(err.splitlines()) == 1, p.stderr
    assert "Traceback" not in err and "internal error" not in err, err
    return err


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One demo run shared by the module: (cli, run id, its result)."""
    tmp = tmp_path_factory.mktemp("cli")
    cli = Cli(tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REWIND_OUTBOX", str(tmp / "outbox"))
        p = cli("demo")
    assert p.returncode == 0, p.stderr
    m = RUN_ID.search(p.stdout)
    assert m, p.stdout
    return cli, m.group(1), p


def test_demo_completes_and_prints_run_id_and_steps(demo):
    cli, run_id, p = demo
    assert RUN_ID.search(p.stdout).group(2) == "completed"
    for node in ("plan", "research", "analyse", "critique", "revise", "compose", "verify", "publish"):
        assert re.search(rf"^\d+\s+{node}\s+executed\b", p.stdout, re.M), node
    assert "citations: valid" in p.stdout
    assert "8/8" in p.stderr and "[" in p.stderr  # the progress bar went to stderr
    assert "Traceback" not in p.stderr
    with Rewind(str(cli.db)) as rw:
        run = rw.get_run(run_id)
    assert run.status == "completed" and len(run.steps) == 8 and run.total_tokens > 0
    assert list((cli.tmp / "outbox").glob("*.md"))


def test_runs_lists_the_demo_run(demo):
    cli, run_id, _ = demo
    p = cli("runs")
    assert p.returncode == 0, p.stderr
    header = p.stdout.splitlines()[0].split()
    assert header[:3] == ["id", "pipeline", "status"]
    assert re.search(rf"^{run_id}\s+research\s+completed\s+8\s", p.stdout, re.M), p.stdout
    p = cli("runs", "--search", "with statement", "--status", "completed", "--limit", "5", "--json")
    assert p.returncode == 0
    assert run_id in [r["id"] for r in json.loads(p.stdout)]
    p = cli("runs", "--offset", "1000")
    assert p.returncode == 0 and p.stdout.strip() == "no runs"



RUN_ID_ONLY = re.compile(r"^[0-9a-f]{16}\s")


def test_runs_saved_column_is_the_saved_show_prints(tmp_path):
    """`runs` and `show` spell "saved" the same way (rewind.costs): for a fork, the cost of
    the steps it inherited counts, as on the dashboard, not only its own cache hits."""
    cli = Cli(tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REWIND_OUTBOX", str(tmp_path / "outbox"))
        run_id = RUN_ID.search(cli("demo").stdout).group(1)
    with Rewind(str(cli.db)) as rw:
        fork = rw.fork(run_id, at="critique", params={"temperature": 0.1})
        run = rw.get_run(run_id)
        want = {run_id: rw.get_run(run_id).saved, fork.id: rw.get_run(fork.id).saved}
    assert want[fork.id] > 0 and run.total_tokens > 0
    p = cli("runs")
    assert p.returncode == 0, p.stderr
    header = p.stdout.splitlines()[0].split()
    at = header.index("saved")
    rows = [line.split() for line in p.stdout.splitlines()[1:] if RUN_ID_ONLY.match(line)]
    got = {row[0]: int(row[at].replace(",", "")) for row in rows}
    assert got == want
    shown = cli("show", fork.id).stdout
    assert f"{want[fork.id]} saved" in shown, shown

def test_show_prints_the_steps_and_json(demo):
    cli, run_id, _ = demo
    p = cli("show", run_id)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"run {run_id}  completed")
    assert re.search(r"^4\s+critique\s+executed\s+\d+", p.stdout, re.M)
    p = cli("show", run_id, "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["id"] == run_id and [s["node"] for s in data["steps"]][0] == "plan"
    assert data["steps"][6]["outputs"]["verification"]["valid"] is True
    p = cli("show", run_id, "--outputs")
    assert p.returncode == 0 and "-- report" in p.stdout and "[doc:" in p.stdout


def test_fork_with_bad_edit_json_exits_2_and_writes_nothing(demo):
    cli, run_id, _ = demo
    before = cli.run_count()
    p = cli("fork", run_id, "--at", "critique", "--edit", "analysis={not json")
    assert p.returncode == 2
    err = one_error_line(p)
    assert "--edit" in err and "analysis" in err and "invalid JSON" in err
    p = cli("fork", run_id, "--at", "critique", "--param", "temperature")  # no '='
    assert p.returncode == 2 and "--param" in p.stderr
    p = cli("fork", run_id, "--at", "critique", "--edit", 'hits="x"')  # critique does not read it
    assert p.returncode == 2 and "does not read 'hits'" in p.stderr
    assert cli.run_count() == before


def test_fork_with_a_param_and_diff(demo):
    cli, run_id, _ = demo
    before = cli.run_count()
    outbox_before = sorted(os.listdir(cli.tmp / "outbox"))
    p = cli("fork", run_id, "--at", "critique", "--param", "temperature=0.9")
    assert p.returncode == 0, p.stderr
    m = RUN_ID.search(p.stdout)
    assert m and m.group(2) == "completed", p.stdout
    fork_id = m.group(1)
    assert f"fork of {run_id} at critique" in p.stdout
    assert re.search(r"^1\s+plan\s+inherited", p.stdout, re.M)
    assert re.search(r"^4\s+critique\s+executed", p.stdout, re.M)
    assert re.search(r"^8\s+publish\s+dry-run", p.stdout, re.M)
    assert cli.run_count() == before + 1
    assert sorted(os.listdir(cli.tmp / "outbox")) == outbox_before
    with Rewind(str(cli.db)) as rw:
        fork = rw.get_run(fork_id)
        assert fork.parent_id == run_id and fork.step("critique").params["temperature"] == 0.9
        expected = rw.diff(run_id, fork_id).first_divergence

    p = cli("diff", run_id, fork_id)
    assert p.returncode == 0, p.stderr
    assert f"first divergence: {expected or 'none'}" in p.stdout
    assert re.search(r"^plan\s+executed\s+inherited\s+\w+\s+\w+\s+yes", p.stdout, re.M)


def test_diff_prints_the_first_divergence(demo):
    cli, run_id, _ = demo
    p = cli("fork", run_id, "--at", "verify", "--edit",
            'report="A report citing [doc:with] and [doc:nowhere]."', "-q")
    assert p.returncode == 0, p.stderr
    fork_id = RUN_ID.search(p.stdout).group(1)
    p = cli("diff", run_id, fork_id, "--changes")
    assert p.returncode == 0, p.stderr
    assert "first divergence: verify" in p.stdout
    assert re.search(r"^verify\s+executed\s+executed\s+\w+\s+\w+\s+NO", p.stdout, re.M)
    assert "nowhere" in p.stdout  # the field diff of the verification


def test_unknown_run_is_a_clear_error(demo):
    cli, _, _ = demo
    for args in (("show", "nosuchrun"), ("fork", "nosuchrun", "--at", "critique")):
        p = cli(*args)
        assert p.returncode == 2, args
        assert "'nosuchrun'" in one_error_line(p), p.stderr
    p = cli("fork", demo[1], "--at", "nosuchnode")
    assert p.returncode == 2 and "no node 'nosuchnode'" in p.stderr


def test_run_command_with_state_and_bad_state(demo):
    cli, _, _ = demo
    p = cli("run", "--pipeline", "rewind.pipelines.research:pipeline", "--state",
            json.dumps({"question": "Generators and the yield expression"}), "-q")
    assert p.returncode == 0, p.stderr
    assert RUN_ID.search(p.stdout).group(2) == "completed"
    p = cli("run", "--pipeline", "research", "--state", '{"question": ')
    assert p.returncode == 2 and "--state" in p.stderr and "invalid JSON" in p.stderr
    p = cli("run", "--pipeline", "no_such_module:thing", "--state", "{}")
    assert p.returncode == 2 and "no_such_module" in p.stderr


def _bad_inputs(tmp: Path, run_id: str) -> list:
    """(argv, text the one error line must contain) for hostile input to each kind of flag."""
    binary = tmp / "binary.json"
    binary.write_bytes(bytes(range(256)))
    deep = "[" * 10_000 + "]" * 10_000
    digits = "9" * 5000
    return [
        (["run", "--pipeline", "research", "--state", deep], "--state"),
        (["run", "--pipeline", "research", "--state", '{"question": %s}' % digits], "--state"),
        (["run", "--pipeline", "research", "--state", f"@{binary}"], "not UTF-8"),
        (["run", "--pipeline", "research", "--state", f"@{tmp / 'missing.json'}"], "cannot read"),
        (["run", "--pipeline", "research", "--state", '{"question": NaN}'], "--state"),
        (["run", "--pipeline", "research", "--state", '{"question": 1e999}'], "--state"),
        (["run", "--pipeline", "research", "--state", "[1, 2]"], "expected a JSON object"),
        (["fork", run_id, "--at", "critique", "--edit", f"analysis={deep}"], "--edit analysis"),
        (["fork", run_id, "--at", "critique", "--param", f"temperature={digits}"], "--param temperature"),
        (["fork", run_id, "--at", "critique", "--param", "a=1", "--param", "a=2"], "more than once"),
        (["fork", run_id, "--at", "critique", "--occurrence", "0"], "--occurrence"),
        (["runs", "--offset", str(10**30)], "--offset"),
        (["runs", "--limit", digits], "--limit"),
        (["runs", "--limit", "-1"], "--limit"),
        (["runs", "--status", "bogus"], "--status"),
        (["gc", "--older-than-days", "nan"], "--older-than-days"),
        (["gc", "--older-than-days", "inf"], "--older-than-days"),
        (["gc", "--older-than-days", "-1"], "--older-than-days"),
        (["audit", run_id, "--repeats", "0"], "--repeats"),
        (["diff", run_id, run_id, "--noise-samples", "1e3"], "--noise-samples"),
        (["serve-llm", "--port", "70000"], "--port"),
        (["import", str(binary)], "not UTF-8"),
        (["demo", "--question", "  "], "--question"),
        (["nosuchcommand"], "invalid choice"),
    ]


def test_bad_input_exits_2_with_one_line_naming_the_flag_and_writes_nothing(demo, tmp_path):
    cli, run_id, _ = demo
    before = cli.run_count()
    for argv, expected in _bad_inputs(tmp_path, run_id):
        p = cli(*argv)
        assert p.returncode == 2, (argv[:4], p.stdout[-300:], p.stderr)
        assert expected in one_error_line(p), (argv[:4], p.stderr)
    assert cli.run_count() == before


def test_user_pipelines_from_env_are_registered(demo, tmp_path, monkeypatch):
    cli, _, _ = demo
    (tmp_path / "cli_user_pipes.py").write_text(
        "from burr.core.graph import GraphBuilder\n"
        "import rewind\n"
        "@rewind.action(reads=['x'], writes=['y'])\n"
        "def double(state):\n"
        "    return state.update(y=state['x'] * 2)\n"
        "pipeline = rewind.Pipeline('doubler', GraphBuilder().with_actions(double=double).build(), 'double')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("REWIND_PIPELINES", "cli_user_pipes:pipeline")
    p = cli("pipelines")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^doubler\s", p.stdout, re.M) and re.search(r"^research\s", p.stdout, re.M)
    p = cli("run", "--pipeline", "doubler", "--state", '{"x": 21}')
    assert p.returncode == 0, p.stderr
    run_id = RUN_ID.search(p.stdout).group(1)
    with Rewind(str(cli.db)) as rw:
        assert rw.get_run(run_id).step("double").outputs == {"y": 42}


def test_failed_run_exits_1_and_never_prints_the_key(tmp_path, monkeypatch):
    cli = Cli(tmp_path)
    for k, v in (("OPENAI_API_KEY", SECRET), ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
                 ("REWIND_LLM_MAX_RETRIES", "0"), ("REWIND_LLM_TIMEOUT", "5")):
        monkeypatch.setenv(k, v)
    p = cli("demo")
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert RUN_ID.search(p.stdout).group(2) == "failed"
    assert re.search(r"^1\s+plan\s+failed", p.stdout, re.M)
    assert "ProviderError" in p.stdout or "connect" in p.stdout.lower()  # the driver words it either way
    assert SECRET not in p.stdout + p.stderr
    assert "Traceback" not in p.stderr


def test_audit_gc_export_import(demo, tmp_path):
    cli, run_id, _ = demo
    p = cli("audit", run_id, "--repeats", "1", "-q")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^critique\s+\S+\s+(yes|NO)\s+\d", p.stdout, re.M), p.stdout
    p = cli("gc", "--older-than-days", "365", "--dry-run")
    assert p.returncode == 0, p.stderr
    assert "dry run" in p.stdout
    p = cli("export", run_id)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    export = tmp_path / "run.json"
    export.write_text(json.dumps(doc))
    other = tmp_path / "other.db"
    p = cli("import", str(export), db=other)
    assert p.returncode == 0, p.stderr
    assert run_id in p.stdout
    p = cli("show", run_id, db=other)
    assert p.returncode == 0 and f"run {run_id}  completed" in p.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    p = cli("import", str(bad), db=other)
    assert p.returncode == 2 and "invalid JSON" in p.stderr


# --- the two ways to start it, in real processes ------------------------------------------------

def clean_env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "REWIND_"))}  # PYTHONPATH (conftest) is kept
    env["REWIND_OUTBOX"] = str(tmp / "outbox")
    return env


def console_script() -> str:
    """The `rewind` script `pip install -e .` put beside this Python (or on PATH)."""
    here = Path(sysconfig.get_path("scripts")) / "rewind"
    found = str(here) if here.exists() else shutil.which("rewind")
    assert found, "no `rewind` console script: run `pip install -e '.[test]'` (scripts/test.sh does)"
    return found


def test_python_dash_m_rewind_runs_the_cli(tmp_path):
    db = str(tmp_path / "m.db")
    p = subprocess.run([sys.executable, "-m", "rewind", "--db", db, "runs"], cwd=tmp_path,
                       env=clean_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout.strip(), p.stderr) == (0, "no runs", "")
    p = subprocess.run([sys.executable, "-m", "rewind", "--db", db, "show", "nosuchrun"],
                       cwd=tmp_path, env=clean_env(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("rewind: error: ") and "'nosuchrun'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_the_rewind_console_script_runs_this_checkout(tmp_path):
    script = console_script()
    p = subprocess.run([script, "--help"], cwd=tmp_path, env=clean_env(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("usage: rewind "), (p.stdout, p.stderr)
    code = "import rewind, sys; sys.stdout.write(rewind.__file__)"
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=clean_env(tmp_path),
                       capture_output=True, text=True, timeout=120)
    here = Path(__file__).resolve().parents[1] / "rewind" / "__init__.py"
    assert Path(p.stdout).resolve() == here, "a child process imported another checkout's rewind"
