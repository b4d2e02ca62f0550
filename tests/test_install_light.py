"""The launch command's install (`pip install -r requirements.txt`) is the runtime only.

Read from requirements.txt and pyproject.toml, no network: the dashboard and the CLI need
Rewind's own dependencies, and a newcomer's first command must not pull the test stack (pytest,
Playwright, Ray, the OIDC test provider, the model clients the capture is tested with, Burr's
tracking server). The tests install their extras themselves (scripts/test.sh).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS = PROJECT["optional-dependencies"]

# What only the tests need: the test stack, and the model SDKs the capture is tested with (the
# clients extra; its generic helpers such as requests or jinja2 may well be runtime needs later).
TEST_ONLY = {"pytest", "playwright", "ray", "oidc-provider-mock",
             "anthropic", "google-genai", "litellm", "langchain-openai"}
TEST_EXTRAS = {"test", "clients", "burr-ui"}


def local_install_lines(path: Path) -> list[str]:
    """The requirement lines of a requirements file, comments and blanks dropped."""
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line:
            lines.append(line)
    return lines


def extras_of_checkout(line: str) -> set[str]:
    """`-e .`, `.`, `-e .[a,b]` -> {a, b}; anything else is not an install of this checkout."""
    m = re.fullmatch(r"(?:-e\s+|--editable\s+)?\.(?:\[([\w,\s-]*)\])?", line)
    assert m, f"requirements line {line!r} is not an install of this checkout (`-e .`)"
    return {canonicalize_name(e) for e in (m.group(1) or "").split(",") if e.strip()}


def pulled(extras: set[str], seen: set[str] | None = None) -> list[Requirement]:
    """Every requirement Rewind's own dependencies plus `extras` name, self-references resolved
    (the extras reached are added to `seen`)."""
    seen = set() if seen is None else seen
    reqs, todo = [Requirement(r) for r in PROJECT["dependencies"]], set(extras)
    by_name = {canonicalize_name(k): v for k, v in EXTRAS.items()}
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for r in by_name[extra]:
            req = Requirement(r)
            if canonicalize_name(req.name) == canonicalize_name(PROJECT["name"]):
                todo |= {canonicalize_name(e) for e in req.extras}
            else:
                reqs.append(req)
    return reqs


def test_packages_that_are_test_only():
    # The guard itself: the test extra does pull each of these, so the check below can fail.
    reached: set[str] = set()
    names = {canonicalize_name(r.name) for r in pulled({"test"}, reached)}
    assert TEST_ONLY <= names
    assert TEST_EXTRAS <= reached
    assert any(r.name == "apache-burr" and "tracking-server" in r.extras for r in pulled({"test"}))


def test_requirements_txt_installs_the_runtime_and_no_test_package():
    lines = local_install_lines(REPO / "requirements.txt")
    assert lines, "requirements.txt installs nothing"
    extras, reached = set().union(*(extras_of_checkout(line) for line in lines)), set()
    reqs = pulled(extras, reached)
    names = {canonicalize_name(r.name) for r in reqs}
    assert not names & TEST_ONLY, f"requirements.txt pulls test packages: {sorted(names & TEST_ONLY)}"
    assert not reached & TEST_EXTRAS, f"requirements.txt pulls test extras: {sorted(reached)}"
    assert not [r for r in reqs if "tracking-server" in r.extras], \
        "requirements.txt pulls Burr's tracking server (apache-burr[tracking-server])"
    # The dashboard and the CLI need what pyproject's dependencies name: all of it is installed.
    assert {canonicalize_name(Requirement(r).name) for r in PROJECT["dependencies"]} <= names


def test_runtime_dependencies_themselves_hold_no_test_package():
    names = {canonicalize_name(Requirement(r).name) for r in PROJECT["dependencies"]}
    assert not names & TEST_ONLY


def test_optional_extras_file_pulls_no_test_package():
    lines = local_install_lines(REPO / "requirements-extras.txt")
    extras, reached = set().union(*(extras_of_checkout(line) for line in lines)), set()
    names = {canonicalize_name(r.name) for r in pulled(extras, reached)}
    assert not names & TEST_ONLY and not reached & TEST_EXTRAS


def test_the_test_command_installs_the_test_extras_itself():
    script = (REPO / "scripts" / "test.sh").read_text()
    m = re.search(r"pip install (?:-q )?-e '\.\[([\w,-]+)\]'", script)
    assert m and "test" in m.group(1).split(","), "scripts/test.sh must install the test extra"
