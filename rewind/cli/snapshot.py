"""Commands that turn runs into regression tests: snapshot, replay.

    rewind snapshot RUN --to tests/rewind/NAME.json [--repeats K] [--pipeline mod:attr] [--force]
    rewind replay tests/rewind/NAME.json [--record none|new|all]

`snapshot` writes the run as a reviewable snapshot file (see `rewind.testing`); `replay` runs
it against the current code offline, as the pytest plugin does, and prints the report: exit 0
when it replays clean (or was re-recorded), 1 when it diverged.
"""

from __future__ import annotations

from .output import Progress, shown
from .parser import int_in
from .handle import add_run_argument, open_rewind, resolve_pipeline, run_id

EXIT_OK, EXIT_DIVERGED = 0, 1
MAX_REPEATS = 1000


def plugin_installed() -> bool:
    """Whether pytest finds Rewind's plugin by itself (its `pytest11` entry point)."""
    from importlib.metadata import entry_points

    return any(e.value == "rewind.testing.plugin" for e in entry_points(group="pytest11"))


def cmd_snapshot(args, out) -> int:
    from ..testing import snapshot
    from ..testing.format import destination

    destination(args.to, "--to", force=args.force)  # before the audit's work, not after it
    with open_rewind(args) as rw:
        if args.pipeline:  # where the pipeline lives also registers it for this command
            rw.register(resolve_pipeline(rw, args.pipeline))
        run = rw.get_run(run_id(rw, args.run))  # an unknown run is refused before anything is sampled
        progress = None if args.quiet or not args.repeats else Progress()
        with shown(progress):
            path = snapshot(rw, run.id, args.to, repeats=args.repeats,
                            pipeline_spec=args.pipeline, force=args.force,
                            on_progress=progress.callback() if progress else None)
    print(f"snapshot of run {run.id} ({len(run.steps)} steps) written to {path}", file=out)
    # installed, pytest loads the plugin by its entry point, and `-p` would load it twice
    flag = "" if plugin_installed() else " -p rewind.testing.plugin"
    print(f"replay it: pytest {path}{flag}   (or `{args.prog} replay {path}`)", file=out)
    return EXIT_OK


def cmd_replay(args, out) -> int:
    from ..testing import replay, write_rerecorded

    result = replay(args.path, record=args.record)
    written = write_rerecorded(result) if args.record != "none" and result.ok else None
    print(result.report(), file=out)
    if written is not None:
        from ..testing.report import summary

        print(summary(result, written), file=out)
    return EXIT_OK if result.ok else EXIT_DIVERGED


def add_commands(add) -> None:
    sp = add("snapshot", cmd_snapshot,
             "write a run as a snapshot file that pytest replays as a regression test", quiet=True)
    add_run_argument(sp)
    sp.add_argument("--to", required=True, metavar="PATH", help="the snapshot file to write (a symlink is followed; a directory, "
                         "FIFO or device is refused)")
    sp.add_argument("--repeats", type=int_in(0, MAX_REPEATS), default=3, metavar="K",
                    help="re-execute each step K times to find nondeterministic nodes (default 3; "
                         "0: no audit)")
    sp.add_argument("--pipeline", default=None, metavar="MOD:ATTR",
                    help="the pipeline as package.module:attribute (registers it, and is written "
                         "into the snapshot; default: found by itself)")
    sp.add_argument("--force", action="store_true",
                    help="overwrite an existing file that is not a Rewind snapshot (a snapshot, "
                         "recognised by its \"format\": \"rewind-snapshot\", is rewritten "
                         "without it)")
    sp = add("replay", cmd_replay, "replay a snapshot file against the current code, offline")
    sp.add_argument("path", metavar="PATH", help="the snapshot file (written by `snapshot`)")
    sp.add_argument("--record", choices=("none", "new", "all"), default="none",
                    help="none: a call the snapshot lacks fails; new: record it through the "
                         "configured model; all: re-record every call (new, all rewrite the file)")
