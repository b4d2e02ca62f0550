"""Commands that meet other tools: export-burr, import-burr, export-otel.

Every file they read (`--initial-state @file`, the tracker's files) goes through
`rewind.paths`' one reader; export-burr writes over an app folder Rewind did not write only
with `--force`."""

from __future__ import annotations

import os
import sys

from ..errors import InvalidRequest
from ..paths import nearest_existing, unwritable_reason
from .inputs import json_object, read_text
from .output import terminal_safe
from .handle import add_run_argument, open_rewind, resolve_pipeline, run_id

EXIT_OK = 0


def check_dir(path: str, flag: str) -> None:
    """Refuse a directory to write into that is a file, or lies under one, before any work."""
    here = nearest_existing(path)
    if os.path.isdir(here):
        why = unwritable_reason(path)
        if why:
            raise InvalidRequest(f"{flag} {path} cannot be written: {why}", field=flag)
        return
    if here == os.path.abspath(path):
        raise InvalidRequest(f"{flag} {path} exists and is not a directory; give a directory "
                             "to write into (it is created if missing)", field=flag)
    raise InvalidRequest(f"{flag} {path} cannot be created: {here} is not a directory",
                         field=flag)


def cmd_export_burr(args, out) -> int:
    from ..integrations.burr_tracking import export_burr

    check_dir(args.dir, "--dir")
    with open_rewind(args) as rw:
        paths = export_burr(rw, run_id(rw, args.run), args.dir, project=args.project,
                            lineage=not args.no_lineage, force=args.force)
    for p in paths:
        print(p, file=out)
    print(f"wrote {len(paths)} Burr app(s); view them with `burr_path={args.dir} burr --no-open`"
          " (Burr's UI, apache-burr[tracking-server])", file=out)
    return EXIT_OK


def cmd_import_burr(args, out) -> int:
    from ..integrations.burr_import import import_burr

    initial = None
    if args.initial_state is not None:
        text = args.initial_state
        if text.startswith("@"):
            text = read_text(text[1:], "--initial-state")
        initial = json_object(text, "--initial-state", "give a JSON object or @file.json")
    with open_rewind(args) as rw:
        pipeline = resolve_pipeline(rw, args.pipeline)
        rw.register(pipeline)
        report = import_burr(rw, args.dir, pipeline, project=args.project, initial_state=initial)
    if report.project is not None:  # DIR was Burr's storage folder (~/.burr): say which project
        print(terminal_safe(f"rewind: using project {report.project!r}, the only Burr project "
                            f"in {os.path.expanduser(args.dir)}"), file=sys.stderr)
    print(report, file=out)
    return EXIT_OK


def cmd_export_otel(args, out) -> int:
    from ..integrations.otel import export_otel

    with open_rewind(args) as rw:
        sent = export_otel(rw, run_id(rw, args.run), endpoint=args.endpoint,
                           capture_content=True if args.capture_content else None,
                           lineage=args.lineage)
    print(f"sent {sent} span(s) over OTLP/HTTP", file=out)
    return EXIT_OK


def add_commands(add) -> None:
    sp = add("export-burr", cmd_export_burr,
             "write a run (and its ancestors) in Burr's tracker layout, for Burr's UI")
    add_run_argument(sp)
    sp.add_argument("--dir", required=True, metavar="DIR", help="Burr's storage dir, e.g. ~/.burr")
    sp.add_argument("--project", default="rewind", metavar="P", help="Burr project (default: rewind)")
    sp.add_argument("--no-lineage", action="store_true", help="only this run, not its ancestors")
    sp.add_argument("--force", action="store_true",
                    help="overwrite app folders Rewind did not write (an app folder export-burr "
                         "wrote carries rewind.json naming its run, and is rewritten without it)")

    sp = add("import-burr", cmd_import_burr,
             "turn runs recorded by Burr's local tracker into Rewind runs you can fork")
    sp.add_argument("dir", metavar="DIR",
                    help="~/.burr/<project>, one app's directory, or ~/.burr itself (its only "
                         "project is used; with several, name one with --project)")
    sp.add_argument("--pipeline", required=True, metavar="MOD:ATTR",
                    help="the Rewind pipeline of the Burr graph the runs used")
    sp.add_argument("--project", default=None, metavar="P", help="with DIR = ~/.burr: the project")
    sp.add_argument("--initial-state", default=None, metavar="JSON",
                    help="the state the runs started from (Burr's tracker does not keep it)")

    sp = add("export-otel", cmd_export_otel,
             "send a run's spans over OTLP/HTTP (GenAI semantic conventions)")
    add_run_argument(sp)
    sp.add_argument("--endpoint", default=None, metavar="URL",
                    help="OTLP/HTTP base URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT, else "
                         "http://localhost:4318)")
    sp.add_argument("--capture-content", action="store_true",
                    help="include prompts, responses and edits (off by default)")
    sp.add_argument("--lineage", action="store_true", help="also send the run's ancestors")
