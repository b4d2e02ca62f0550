"""`rewind mcp`, driven by the official MCP SDK's own client: over stdio (a real `python -m rewind
... mcp` subprocess) and over streamable HTTP (a subprocess serving 127.0.0.1), on SQLite and
PostgreSQL. The runs are recorded first with the research demo on the offline simulator.

What a coding agent relies on: the tools are listed with descriptions and output schemas; runs,
trajectories and step values read back (a large value in pages that join up to the whole); a run
is a resource; writes are refused unless --allow-writes and say how to enable them; a fork dry-runs
its side effects and diffs against its parent; another owner's run reads as not found; bad input
is one line (the CLI's) and never a traceback; no key-shaped secret is ever in a result.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from rewind import Rewind
from rewind.cli import main
from rewind.pipelines.research import PUBLISH_LOG, pipeline

TOOLS = {"list_pipelines", "list_runs", "get_run", "get_step", "plan_fork", "fork", "diff", "blame"}
SECRET = "sk-test-0123456789abcdefSECRET"
KEY_SHAPED = re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_\-*.]{6,}")
BIG = "with statement " * 3000  # a question of 45,000 characters: get_step pages it
TIMEOUT = 120


def record(url: str, owner: str = None, question: str = None) -> str:
    with Rewind(url, owner=owner) as rw:
        run = rw.run(pipeline, {"question": question or pipeline.sample_state["question"]})
        assert run.status == "completed", run.error
        return run.id


def server_env(tmp: Path) -> dict:
    # the SDK hands the server a minimal environment (HOME, PATH...): give it the checkout and
    # the test's outbox, nothing else
    return {"PYTHONPATH": os.environ["PYTHONPATH"], "REWIND_OUTBOX": str(tmp / "outbox")}


def stdio(url: str, tmp: Path, *flags: str) -> Client:
    """The SDK's client on `python -m rewind --db URL mcp FLAGS` over stdio (the server's stderr
    goes to a file: pytest's captured stderr has no file descriptor)."""
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "rewind", "--db", url, "mcp", *flags],
                                   env=server_env(tmp), cwd=str(tmp))
    errlog = open(tmp / "stdio-server.err", "a")  # closed with the test's tmp dir
    return Client(stdio_client(params, errlog=errlog), read_timeout_seconds=TIMEOUT, cache=None)


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content)


def ok(result) -> dict:
    assert not result.is_error, text_of(result)
    assert text_of(result).strip()  # a text rendering beside the structured content
    return result.structured_content


def refused(result) -> str:
    assert result.is_error
    text = text_of(result)
    assert "\n" not in text.strip() and "Traceback" not in text, text
    return text


def cli_error(url: str, *argv: str, capsys) -> str:
    capsys.readouterr()
    assert main(["--db", url, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rewind: error: ")
    return err[len("rewind: error: "):]


def publish_count(tmp: Path) -> int:
    log = tmp / "outbox" / PUBLISH_LOG
    return len(log.read_text().splitlines()) if log.exists() else 0


class Seen:
    """Every result text a test saw, to check for secrets at the end."""

    def __init__(self):
        self.texts: list = []

    def __call__(self, result):
        self.texts.append(text_of(result))
        if getattr(result, "structured_content", None) is not None:
            self.texts.append(json.dumps(result.structured_content))
        return result


def test_stdio_lists_tools_reads_runs_pages_values_and_refuses_writes(store_url, tmp_path, capsys):
    plain = record(store_url)
    big = record(store_url, question=f"{BIG} (key {SECRET})")
    runs_before = publish_count(tmp_path)
    seen = Seen()

    async def scenario():
        async with stdio(store_url, tmp_path) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == TOOLS
            for t in listed.tools:
                assert len(t.description) > 40 and t.output_schema, t.name
                assert t.input_schema["type"] == "object"

            runs = ok(seen(await client.call_tool("list_runs", {"limit": 1})))
            assert [r["id"] for r in runs["runs"]] == [big] and runs["next_after"] == big
            rest = ok(seen(await client.call_tool("list_runs", {"after": runs["next_after"]})))
            assert [r["id"] for r in rest["runs"]] == [plain] and rest["next_after"] is None
            both = ok(seen(await client.call_tool("list_runs", {"limit": 2})))
            assert [r["id"] for r in both["runs"]] == [big, plain] and both["next_after"] is None

            run = ok(seen(await client.call_tool("get_run", {"run": plain[:6]})))
            assert run["id"] == plain and run["status"] == "completed"
            assert [s["node"] for s in run["steps"]] == list(pipeline.actions)
            assert all(s["status"] == "executed" and s["reason"] for s in run["steps"])
            assert run["steps"][0]["model_calls"] == 1 and run["steps"][0]["tokens"] > 0

            step = ok(seen(await client.call_tool("get_step", {"run": plain, "node": "compose"})))
            names = {v["name"] for v in step["values"]}
            assert {"outputs.report", "calls[0]"} <= names and not step["note"]
            report = next(v for v in step["values"] if v["name"] == "outputs.report")
            with Rewind(store_url) as rw:
                whole = rw.get_run(plain).step("compose").outputs["report"]
            assert json.loads(report["text"]) == whole and not report["truncated"]

            # a 45,000-character input comes in pages of 20,000 that join up to the whole
            first = ok(seen(await client.call_tool("get_step", {"run": big, "node": "plan"})))
            question = next(v for v in first["values"] if v["name"] == "inputs.question")
            assert question["truncated"] and question["next_offset"] == 20_000
            assert "offset=20000" in first["note"] and "inputs.question" in first["note"]
            pages, offset = [question["text"]], question["next_offset"]
            while offset is not None:
                more = ok(seen(await client.call_tool("get_step", {
                    "run": big, "node": "plan", "field": "inputs.question", "offset": offset})))
                (value,) = more["values"]
                pages.append(value["text"])
                offset = value["next_offset"]
            assert len(pages) == 3
            assert json.loads("".join(pages)) == f"{BIG} (key [redacted])"
            past = refused(seen(await client.call_tool("get_step", {
                "run": big, "node": "plan", "field": "inputs.question", "offset": 10**18})))
            assert "past the end of inputs.question" in past

            resource = await client.read_resource(f"rewind://runs/{plain}")
            assert json.loads(resource.contents[0].text) == run

            before = await client.call_tool("list_runs", {})
            why = refused(seen(await client.call_tool("fork", {
                "run": plain, "at": "critique", "params": {"temperature": 0.9}})))
            assert "read-only" in why and "--allow-writes" in why
            why = refused(seen(await client.call_tool("blame", {
                "run": plain, "field": "receipt", "equals": None, "not_equals": 1})))
            assert "--allow-writes" in why
            after = await client.call_tool("list_runs", {})
            assert after.structured_content == before.structured_content

            # bad input: the CLI's one line, as a tool error
            missing = refused(seen(await client.call_tool("get_run", {"run": "zzzz"})))
            bad_node = refused(seen(await client.call_tool("plan_fork", {
                "run": plain, "at": "nope"})))
            refused(seen(await client.call_tool("list_runs", {"limit": "many"})))
            refused(seen(await client.call_tool("get_step", {"run": plain})))
            refused(seen(await client.call_tool("get_step", {
                "run": plain, "node": "plan", "field": "outputs.nothing"})))
            refused(seen(await client.call_tool("get_step", {
                "run": plain, "node": "plan", "occurrence": 2})))
            return missing, bad_node

    missing, bad_node = anyio.run(scenario)
    assert missing == cli_error(store_url, "show", "zzzz", capsys=capsys)
    assert bad_node == cli_error(store_url, "fork", plain, "--at", "nope", "--plan", capsys=capsys)
    assert publish_count(tmp_path) == runs_before
    secrets = [m for t in seen.texts for m in KEY_SHAPED.findall(t)]
    assert not secrets and not any("SECRET" in t for t in seen.texts)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def http_server(url: str, tmp: Path, *flags: str):
    """`rewind mcp --http` in a subprocess; yields its endpoint once its port accepts."""
    port = free_port()
    env = {**os.environ, **server_env(tmp)}
    err = open(tmp / "http-server.err", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "rewind", "--db", url, "mcp", "--http",
                             "--port", str(port), *flags], env=env, cwd=str(tmp),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:  # ready when the port accepts; a server that died says why
            assert proc.poll() is None, f"server exited: {(tmp / 'http-server.err').read_text()}"
            assert time.monotonic() < deadline, "server did not listen"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err.close()
    assert f"http://127.0.0.1:{port}/mcp" in (tmp / "http-server.err").read_text()


def test_http_forks_with_side_effects_dry_run_and_diffs_when_writes_are_allowed(store_url, tmp_path):
    parent = record(store_url)
    published = publish_count(tmp_path)
    assert published == 1

    async def scenario(endpoint):
        async with Client(endpoint, read_timeout_seconds=TIMEOUT, cache=None) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            run = ok(await client.call_tool("get_run", {"run": parent}))
            assert run["id"] == parent and len(run["steps"]) == len(pipeline.actions)
            resource = await client.read_resource(f"rewind://runs/{parent}")
            assert json.loads(resource.contents[0].text) == run
            plan = ok(await client.call_tool("plan_fork", {
                "run": parent[:8], "at": "critique", "params": {"temperature": 0.9, "seed": 7}}))
            verdicts = {r["node"]: r["verdict"] for r in plan["rows"]}
            assert verdicts["plan"] == "inherited" and verdicts["critique"] == "re-run"
            assert verdicts["publish"] == "dry-run" and not plan["needs_confirmation"]

            forked = ok(await client.call_tool("fork", {
                "run": parent[:8], "at": "critique", "params": {"temperature": 0.9, "seed": 7}}))
            child = forked["run"]
            assert forked["parent_id"] == parent and forked["side_effects"] == "dry-run"
            assert child["parent_id"] == parent and child["fork_node"] == "critique"
            statuses = {s["node"]: s["status"] for s in child["steps"]}
            assert statuses["plan"] == "inherited" and statuses["critique"] == "executed"
            assert statuses["publish"] == "dry-run"

            d = ok(await client.call_tool("diff", {"a": parent, "b": child["id"]}))
            assert d["a"] == parent and d["b"] == child["id"]
            assert d["first_divergence"] == "critique"
            rows = {r["node"]: r for r in d["rows"]}
            assert rows["plan"]["identical"] is True and rows["critique"]["identical"] is False
            assert rows["critique"]["text_changes"]["critique"].startswith("--- A/critique")
            text = text_of(await client.call_tool("diff", {"a": parent, "b": child["id"]}))
            assert "first divergence: critique" in text and "+++ B/critique" in text

            wrong = refused(await client.call_tool("fork", {"run": parent, "at": "nope"}))
            assert "no node 'nope'" in wrong

            # blame: success is `field` equal to a JSON value; the demo run never wrote "x"
            report = ok(await client.call_tool("blame", {
                "run": parent, "field": "receipt", "equals": "x", "samples": 1}))
            assert report["run_id"] == parent and report["trial_runs"] and report["summary"]
            assert [s["node"] for s in report["steps"]] == list(pipeline.actions)
            assert "exactly one of equals or not_equals" in refused(await client.call_tool(
                "blame", {"run": parent, "field": "receipt"}))
            return child["id"]

    with http_server(store_url, tmp_path, "--allow-writes") as endpoint:
        child = anyio.run(scenario, endpoint)
    assert publish_count(tmp_path) == published  # the fork's publish was a dry run
    with Rewind(store_url) as rw:
        assert rw.get_run(child).parent_id == parent


def test_another_owners_run_reads_as_not_found(store_url, tmp_path):
    mine = record(store_url, owner="alice@example.com")
    theirs = record(store_url, owner="bob@example.com")

    async def scenario():
        async with stdio(store_url, tmp_path, "--owner", "Alice@Example.com") as client:
            listed = ok(await client.call_tool("list_runs", {}))
            assert [r["id"] for r in listed["runs"]] == [mine]
            assert ok(await client.call_tool("get_run", {"run": mine}))["id"] == mine
            for call in (("get_run", {"run": theirs}), ("get_step", {"run": theirs, "node": "plan"}),
                         ("diff", {"a": mine, "b": theirs})):
                assert f"no run {theirs!r}" in refused(await client.call_tool(*call))
            with pytest.raises(MCPError, match="no run"):
                await client.read_resource(f"rewind://runs/{theirs}")

    anyio.run(scenario)


def test_bad_flags_are_one_line_and_exit_2(tmp_path, capsys):
    db = str(tmp_path / "r.db")
    assert "--port is for --http" in cli_error(db, "mcp", "--port", "9000", capsys=capsys)
    assert "expected an email" in cli_error(db, "mcp", "--owner", "nobody", capsys=capsys)
    assert not (tmp_path / "r.db").exists()  # refused before the store opened


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["--db", str(tmp_path / "r.db"), "mcp", "--http", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in err


def test_without_the_sdk_it_says_what_to_install(tmp_path):
    # `mcp` made unimportable in a real process: the command exits 2 with one line
    code = ("import sys; sys.modules['mcp'] = None; from rewind.cli import main; "
            f"sys.exit(main(['--db', {str(tmp_path / 'r.db')!r}, 'mcp']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT,
                       stdin=subprocess.DEVNULL, cwd=str(tmp_path))
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "pip install 'rewind[mcp]'" in p.stderr
    assert not (tmp_path / "r.db").exists()
    # and the package imports without the SDK
    p = subprocess.run([sys.executable, "-c", "import sys; sys.modules['mcp'] = None; "
                        "import rewind, rewind.cli, rewind.mcp; print('ok')"],
                       capture_output=True, text=True, timeout=TIMEOUT, cwd=str(tmp_path))
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
