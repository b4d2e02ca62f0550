"""`rewind import-burr ~/.burr`: the folder of Burr's tracker itself, not a project in it.

Seen in the first ten minutes (issue 41, part 5): with one project under `~/.burr`, import-burr
said "holds no Burr app" instead of using it. Burr's tracker lays runs out as
`<storage>/<project>/<app_id>/{graph.json,log.jsonl,metadata.json}`: with one project under the
folder it is used (and stderr says so); with several the command exits 2 naming them.
"""

from __future__ import annotations

import contextlib
import io
import os

from test_integrations_burr_import import essays_pipeline, record_with_burr

from rewind import Rewind
from rewind.cli import main
from rewind.integrations.burr_import import import_burr

PIPELINE = "test_integrations_burr_import:essays_pipeline"


def cli(db: str, *argv: str) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--db", db, *argv])
    return code, out.getvalue(), err.getvalue()


def run_count(db: str) -> int:
    with Rewind(db) as rw:
        return rw.count_runs()


def test_the_only_project_under_the_folder_is_used(store_url, tmp_path):
    storage = str(tmp_path / "burr")
    app_id = record_with_burr(storage, "essays", "bees and wasps")
    os.makedirs(os.path.join(storage, ".cache"))  # hidden: never a project
    code, out, err = cli(store_url, "import-burr", storage, "--pipeline", PIPELINE)
    assert code == 0, err
    assert f"{app_id} -> run " in out and "imported 1 Burr app(s)" in out
    assert f"using project 'essays', the only Burr project in {storage}" in err
    assert run_count(store_url) == 1


def test_several_projects_exit_2_naming_them(store_url, tmp_path):
    storage = str(tmp_path / "burr")
    for project in ("essays", "drafts", "tests"):
        record_with_burr(storage, project, f"topic of {project}")
    os.makedirs(os.path.join(storage, "empty-folder"))  # no app in it: not a project
    code, out, err = cli(store_url, "import-burr", storage, "--pipeline", PIPELINE)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0] == (f"rewind: error: {storage} holds 3 Burr projects: drafts, essays, tests; "
                        f"pass one of them (--project P, or {storage}/P as the folder)")
    assert run_count(store_url) == 0
    code, out, err = cli(store_url, "import-burr", storage, "--project", "drafts",
                         "--pipeline", PIPELINE)
    assert code == 0 and "imported 1 Burr app(s)" in out, err


def test_the_api_reports_the_project_it_used(tmp_path):
    storage = str(tmp_path / "burr")
    record_with_burr(storage, "essays", "bees")
    with Rewind(str(tmp_path / "rewind.db")) as rw:
        rw.register(essays_pipeline())
        report = import_burr(rw, storage, "essays")
        assert report.project == "essays" and len(report.runs) == 1
        assert import_burr(rw, f"{storage}/essays", "essays").project is None


def test_a_folder_with_neither_apps_nor_projects_still_says_so(tmp_path):
    storage = tmp_path / "burr"
    (storage / "notes").mkdir(parents=True)
    (storage / "notes" / "readme.txt").write_text("hi")
    code, out, err = cli(str(tmp_path / "rewind.db"), "import-burr", str(storage),
                         "--pipeline", PIPELINE)
    assert code == 2 and "holds no Burr app" in err and len(err.strip().splitlines()) == 1



def test_an_initial_state_for_a_folder_of_several_apps_is_refused(store_url, tmp_path):
    # one state for apps that started from different ones would be recorded as contradictory
    # writes of the first node (a stranger's "ants" run summarised as "bees"): refused
    storage = str(tmp_path / "burr")
    record_with_burr(storage, "essays", "bees")
    ants = record_with_burr(storage, "essays", "ants")
    code, out, err = cli(store_url, "import-burr", os.path.join(storage, "essays"), "--pipeline",
                         PIPELINE, "--initial-state", '{"topic": "bees"}')
    assert code == 2 and "holds 2 Burr apps; an initial state belongs to one app" in err, err
    assert run_count(store_url) == 0
    code, out, err = cli(store_url, "import-burr", os.path.join(storage, "essays", ants),
                         "--pipeline", PIPELINE, "--initial-state", '{"topic": "ants"}')
    assert code == 0 and run_count(store_url) == 1, err
