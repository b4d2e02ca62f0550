"""Commands that keep a store: gc, export, import, and `blobs migrate` (where large values live)."""

from __future__ import annotations

import json

from .inputs import json_object, read_text
from .output import json_default, table
from .parser import number_in
from .handle import add_run_argument, open_rewind, run_id

EXIT_OK = 0


def cmd_gc(args, out) -> int:
    with open_rewind(args) as rw:
        result = rw.gc(args.older_than_days, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    if isinstance(result, dict):
        rows = [(k, v) for k, v in result.items() if not isinstance(v, (dict, list))]
        print(f"gc ({'dry run' if args.dry_run else 'done'}), older than "
              f"{args.older_than_days:g} days: {verb}", file=out)
        print(table(("what", "count"), rows, right=(1,)), file=out)
    else:
        print(f"gc: {verb} {result}", file=out)
    return EXIT_OK


def cmd_export(args, out) -> int:
    with open_rewind(args) as rw:
        doc = rw.export_run(run_id(rw, args.run))
    out.write(json.dumps(doc, ensure_ascii=False, default=json_default))
    out.write("\n")
    return EXIT_OK


def cmd_import(args, out) -> int:
    where = f"import {args.file}"
    doc = json_object(read_text(args.file, where), where,
                      f"pass a file written by `{args.prog} export`")
    with open_rewind(args) as rw:
        ids = list(rw.import_run(doc) or [])
    print(f"imported {len(ids)} run(s): {', '.join(map(str, ids)) or '-'}", file=out)
    return EXIT_OK


def cmd_blobs_migrate(args, out) -> int:
    from ..maintenance.relocate import migrate_blobs
    from ..store.objects import is_inline, open_objects

    if not is_inline(args.to) or not args.to.strip():  # refused before any database is opened
        open_objects(args.to, "--to")
    with open_rewind(args) as rw:
        result = migrate_blobs(rw, args.to)
    print(f"blobs migrate: moved {result['moved']} value(s), {result['bytes']} bytes, to "
          f"{result['to']}; {result['kept']} already where they belong", file=out)
    return EXIT_OK


def add_commands(add) -> None:
    sp = add("gc", cmd_gc, "purge old cache entries, runs and orphaned blobs")
    sp.add_argument("--older-than-days", type=number_in(0, 1e6), required=True, metavar="N",
                    help="remove what is older than N days (cache entries, runs by policy, "
                         "then blobs nothing refers to)")
    sp.add_argument("--dry-run", action="store_true", help="count, remove nothing")

    sp = add("export", cmd_export, "write a run with its lineage as JSON to stdout")
    add_run_argument(sp)

    sp = add("import", cmd_import, "load a run exported with `export`")
    sp.add_argument("file", metavar="FILE", help="a JSON file from `export` ('-' for stdin)")

    sp = add("blobs", cmd_blobs_migrate, "where large values live: the database or an object store")
    actions = sp.add_subparsers(dest="blobs_action", metavar="ACTION", parser_class=type(sp))
    actions.required = True
    mp = actions.add_parser("migrate", help="move stored values to an object store or back inline",
                            description="move stored values to an object store (values over "
                                        "REWIND_BLOB_INLINE_MAX) or back into the database")
    mp.set_defaults(func=cmd_blobs_migrate)
    mp.add_argument("--to", required=True, metavar="URL",
                    help="s3://bucket/prefix[?endpoint=http://host:port], file:///absolute/folder, "
                         "or inline (every value back into the database)")
