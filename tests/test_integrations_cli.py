"""The integration commands in-process: export-burr, import-burr, export-otel.

(The harness registers rewind.cli.integrations the way rewind.cli.commands registers its
command modules.)"""

from __future__ import annotations

import asyncio
import io

import pytest
import shapes
from burr.tracking.server.backend import LocalBackend
from test_integrations_burr_import import CALLS, record_with_burr
from test_integrations_otel import Receiver

import rewind
from rewind import Rewind
from rewind.cli import integrations
from rewind.cli import parser as cli_parser


def cli(*argv: str) -> tuple:
    p = cli_parser.Parser(prog="rewind")
    p.add_argument("--db", default=None)
    sub = p.add_subparsers(dest="command", parser_class=cli_parser.Parser)

    def add(name, fn, help, quiet=False):
        sp = sub.add_parser(name, help=help)
        sp.set_defaults(func=fn, prog="rewind")
        return sp

    integrations.add_commands(add)
    args = p.parse_args(list(argv))
    out = io.StringIO()
    return args.func(args, out), out.getvalue()


@pytest.fixture
def db(store_url):
    return store_url


def test_export_burr_command(db, tmp_path):
    pipeline = rewind.register_pipeline(shapes.linear())
    with Rewind(db) as rw:
        run = rw.run(pipeline, {"topic": "bees"})
        fork = rw.fork(run.id, at="stats")
    code, text = cli("--db", db, "export-burr", fork.id, "--dir", str(tmp_path), "--project", "cli")
    assert code == 0 and "wrote 2 Burr app(s)" in text
    apps, total = asyncio.run(LocalBackend(str(tmp_path)).list_apps(None, "cli", None, 100, 0))
    assert total == 2
    assert {a.app_id: a.parent_pointer and a.parent_pointer.app_id for a in apps}[fork.id] == run.id


def test_import_burr_command_then_fork(db, tmp_path):
    storage = str(tmp_path / "burr")
    app_id = record_with_burr(storage, "essays", "bees and wasps")
    code, text = cli("--db", db, "import-burr", f"{storage}/essays",
                     "--pipeline", "test_integrations_burr_import:essays_pipeline")
    assert code == 0 and app_id in text and "not kept by Burr's tracker" in text
    run_id = text.split(f"{app_id} -> run ")[1].split()[0]
    with Rewind(db) as rw:
        from test_integrations_burr_import import essays_pipeline

        rw.register(essays_pipeline())
        CALLS.clear()
        fork = rw.fork(run_id, at="outline")
        assert CALLS == [] and fork.total_tokens == 0


def test_export_otel_command(db):
    receiver = Receiver()
    try:
        pipeline = rewind.register_pipeline(shapes.linear())
        with Rewind(db) as rw:
            run = rw.run(pipeline, {"topic": "bees"})
        code, text = cli("--db", db, "export-otel", run.id, "--endpoint", receiver.url)
        assert code == 0 and "sent 6 span(s)" in text
        assert sorted(s.name for s in receiver.spans)[0] == "draft"
    finally:
        receiver.close()
