"""The documentation site (mkdocs.yml, docs/) builds in strict mode, and the README stays short.

The site is built exactly as CI builds it (`mkdocs build --strict`), so a broken link, a missing
anchor, a page left out of the nav or a missing CHANGELOG.md fails here too; a copy with one
broken link shows the strict build does fail. The docs name the version they describe and hold
no changelog prose (CHANGELOG.md does). mkdocs-material comes with the test extra (`docs`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    # cwd=root: the changelog page includes CHANGELOG.md relative to the working directory
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_site_builds_in_strict_mode(tmp_path):
    done = build(REPO, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    # the pictures the pages show are in the site, where the pages point
    assert (tmp_path / "site" / "screenshots" / "runs.png").is_file()
    assert (tmp_path / "site" / "burr-ui-fork.png").is_file()
    assert "Hostile files" in (tmp_path / "site" / "changelog" / "index.html").read_text()


def test_a_broken_link_fails_the_build(tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copytree(REPO / "docs", copy / "docs")
    for name in ("mkdocs.yml", "CHANGELOG.md"):
        shutil.copy(REPO / name, copy / name)
    with open(copy / "docs" / "cli.md", "a") as f:
        f.write("\nSee [the missing page](no-such-page.md).\n")
    done = build(copy, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stdout + done.stderr


def test_docs_name_the_version_they_describe():
    config = (REPO / "mkdocs.yml").read_text()
    assert re.search(rf"^site_name: Rewind {re.escape(VERSION)}$", config, re.M)
    assert f"Rewind {VERSION}" in (REPO / "docs" / "index.md").read_text()
    assert f"Rewind {VERSION}" in (REPO / "README.md").read_text()


def test_no_changelog_prose_in_the_docs_or_the_readme():
    pages = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
    for page in pages:
        if page.name == "changelog.md":  # includes CHANGELOG.md, whose place that prose is
            continue
        text = page.read_text()
        for phrase in ("This version", "as before", "before, each entry"):
            assert phrase not in text, f"{page.name}: changelog prose {phrase!r}"


def test_readme_is_a_five_minute_read_whose_links_resolve():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    targets = re.findall(r"\]\(((?!https?:)[^)#\s]+)", readme)
    assert targets
    missing = [t for t in targets if not (REPO / t).exists()]
    assert not missing, f"README links to missing files: {missing}"
    # what a newcomer needs before the first own run (issue 41)
    for needed in ("PYTHONPATH", "No module named 'my_agent'",
                   "python -m rewind serve-llm --port 8000",
                   "OPENAI_BASE_URL=http://127.0.0.1:8000/v1", "OPENAI_API_KEY=offline"):
        assert needed in readme, needed
