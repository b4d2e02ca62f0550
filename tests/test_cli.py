"""`python -m rewind`, run in subprocesses against real SQLite files in tmp_path."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rewind import Rewind

REPO = Path(__file__).resolve().parents[1]
RUN_ID = re.compile(r"^run ([0-9a-f]{16})\s+(\w+)", re.M)
SECRET = "sk-test-0123456789abcdefSECRET"


def cli_env(tmp: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REWIND_MODEL", "REWIND_PROVIDER",
                        "REWIND_DB", "REWIND_PIPELINES", "REWIND_DEBUG")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["REWIND_OUTBOX"] = str(tmp / "outbox")
    env["REWIND_CORPUS_DB"] = str(tmp / "corpus.db")
    env.update(extra)
    return env


class Cli:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.db = tmp / "cli.db"

    def __call__(self, *args: str, env: dict = None, db: Path = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "rewind", "--db", str(db or self.db), *args],
            cwd=str(self.tmp), env=env or cli_env(self.tmp), capture_output=True, text=True,
            timeout=120,
        )

    def run_count(self, db: Path = None) -> int:
        with Rewind(str(db or self.db)) as rw:
            return rw.count_runs()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One demo run shared by the module: (cli, run id, completed process)."""
    tmp = tmp_path_factory.mktemp("cli")
    cli = Cli(tmp)
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
    err = p.stderr.strip()
    assert "--edit" in err and "analysis" in err and "invalid JSON" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
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
        assert p.stderr.startswith("rewind: error: ") and "'nosuchrun'" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
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


def test_user_pipelines_from_env_are_registered(demo, tmp_path):
    cli, _, _ = demo
    (tmp_path / "mypipes.py").write_text(
        "from burr.core.graph import GraphBuilder\n"
        "import rewind\n"
        "@rewind.action(reads=['x'], writes=['y'])\n"
        "def double(state):\n"
        "    return state.update(y=state['x'] * 2)\n"
        "pipeline = rewind.Pipeline('doubler', GraphBuilder().with_actions(double=double).build(), 'double')\n"
    )
    env = cli_env(cli.tmp, REWIND_PIPELINES="mypipes:pipeline")
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    p = cli("pipelines", env=env)
    assert p.returncode == 0, p.stderr
    assert re.search(r"^doubler\s", p.stdout, re.M) and re.search(r"^research\s", p.stdout, re.M)
    p = cli("run", "--pipeline", "doubler", "--state", '{"x": 21}', env=env)
    assert p.returncode == 0, p.stderr
    run_id = RUN_ID.search(p.stdout).group(1)
    with Rewind(str(cli.db)) as rw:
        assert rw.get_run(run_id).step("double").outputs == {"y": 42}


def test_failed_run_exits_1_and_never_prints_the_key(tmp_path):
    cli = Cli(tmp_path)
    env = cli_env(tmp_path, OPENAI_API_KEY=SECRET, OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                  REWIND_LLM_MAX_RETRIES="0", REWIND_LLM_TIMEOUT="5")
    p = cli("demo", env=env)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert RUN_ID.search(p.stdout).group(2) == "failed"
    assert re.search(r"^1\s+plan\s+failed", p.stdout, re.M)
    assert "ProviderError" in p.stdout or "connect" in p.stdout
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
