"""Commands that start, list and show runs: demo, run, runs, show, resume, pipelines."""

from __future__ import annotations

import sys
from typing import Any, Callable

from ..errors import InvalidRequest, RewindError
from ..models import RUN_STATUSES
from .inputs import parse_state
from .output import (
    cut, dumps, fmt_ms, fmt_ts, one_line, print_outputs, print_run_details,
    progress_for, run_to_json, shown, table,
)
from .handle import EXIT_OK, add_run_argument, finish_run, open_rewind, resolve_pipeline, run_id
from .parser import int_in, text_up_to

STATUSES = RUN_STATUSES  # one list, rewind.RunStatus: a new status is filterable everywhere
MAX_ROWS = 10**9


def _demo_hint(prog: str) -> Callable[[Any], list]:
    def hint(run: Any) -> list:
        lines = []
        receipt = verification = None
        if run.status == "completed":
            try:
                receipt = run.step("publish").outputs.get("receipt")
                verification = run.step("verify").outputs.get("verification")
            except Exception:  # a purged blob: the hint is optional
                pass
        if verification:
            state = "valid" if verification.get("valid") else "INVALID"
            lines.append(f"\ncitations: {state} ({verification.get('citations', 0)} cited, "
                         f"bad: {', '.join(verification.get('bad_citations') or []) or 'none'})")
        if receipt:
            lines.append(f"report: {receipt.get('path')}")
        lines.append(f"\nnext: {prog} fork {run.id} --at critique --param temperature=0.9")
        return lines

    return hint


def cmd_demo(args, out) -> int:
    from ..pipelines.research import pipeline

    question = args.question if args.question is not None else pipeline.sample_state["question"]
    if not question.strip():
        raise InvalidRequest("--question: must not be empty", field="--question")
    with open_rewind(args) as rw:
        progress = progress_for(rw, pipeline, not args.quiet)
        with shown(progress):
            run = rw.run(pipeline, {"question": question}, on_step=progress)
        return finish_run(run, out, _demo_hint(args.prog))


def cmd_run(args, out) -> int:
    state = parse_state(args.state)  # before the store opens: bad input writes nothing
    with open_rewind(args) as rw:
        pipeline = resolve_pipeline(rw, args.pipeline)
        if state is None:
            state = dict(pipeline.sample_state)
        progress = progress_for(rw, pipeline, not args.quiet)
        with shown(progress):
            run = rw.run(pipeline, state, use_cache=not args.no_cache, on_step=progress)
        return finish_run(run, out)


def _saved(rw, row_run) -> int:
    """A listed run's saved tokens (rewind.costs), or its row's own cache savings when its
    steps cannot be read (a damaged run is still listed)."""
    try:
        return rw.get_run(row_run.id).saved
    except RewindError:
        return row_run.tokens_saved


def cmd_runs(args, out) -> int:
    with open_rewind(args) as rw:
        runs = rw.list_runs(pipeline=args.pipeline, status=args.status, search=args.search,
                            limit=args.limit, offset=args.offset, forks_only=args.forks)
        # "saved" as rewind.costs defines it (what `show` prints): a fork's inherited steps
        # count, and their costs are in its steps, not its row
        saved = {} if args.json else {r.id: _saved(rw, r) for r in runs if r.parent_id}
    if args.json:
        print(dumps([run_to_json(r) for r in runs]), file=out)
        return EXIT_OK
    if not runs:
        print("no runs", file=out)
        return EXIT_OK
    rows = []
    for r in runs:
        fork = f"{r.parent_id}@{r.fork_node}" if r.parent_id else ""
        rows.append((r.id, r.pipeline, r.status, r.step_count, r.total_tokens,
                     saved.get(r.id, r.tokens_saved),
                     fmt_ms(r.latency_ms), fmt_ts(r.created_at), fork, cut(r.summary, 40)))
    print(table(("id", "pipeline", "status", "steps", "tokens", "saved", "latency", "created",
                 "fork of", "summary"), rows, right=(3, 4, 5, 6)), file=out)
    return EXIT_OK


def cmd_show(args, out) -> int:
    with open_rewind(args) as rw:
        run = rw.get_run(run_id(rw, args.run))
        if args.json:
            print(dumps(run_to_json(run)), file=out)
            return EXIT_OK
        print_run_details(run, out)
        if args.outputs:
            print_outputs(run, out, limit=0 if args.full else 1200)
    return EXIT_OK


def cmd_resume(args, out) -> int:
    with open_rewind(args) as rw:
        run = rw.get_run(run_id(rw, args.run))
        progress = progress_for(rw, run.pipeline, not args.quiet, fallback=len(run.steps) or 1)
        with shown(progress):
            resumed = rw.resume(run.id, on_step=progress)
        return finish_run(resumed, out)


def cmd_pipelines(args, out) -> int:
    with open_rewind(args) as rw:
        registry = rw.pipelines()
        broken = dict(rw.pipeline_errors)
    # the listing still answers, so exit 0; but a typo in REWIND_PIPELINES must not pass unseen
    for entry, why in broken.items():
        print(f"rewind: warning: REWIND_PIPELINES entry {entry!r} was not loaded: {one_line(why)}",
              file=sys.stderr)
    rows = [(name, p.entrypoint, " → ".join(p.actions), cut(p.description, 50))
            for name, p in sorted(registry.items())]
    print(table(("name", "entrypoint", "nodes", "description"), rows), file=out)
    return EXIT_OK


def add_commands(add) -> None:
    sp = add("demo", cmd_demo, "run the offline research demo pipeline", quiet=True)
    sp.add_argument("--question", default=None, help="what to research (default: a sample)")

    sp = add("run", cmd_run, "run a pipeline from its entrypoint", quiet=True)
    sp.add_argument("--pipeline", required=True, metavar="MOD:ATTR",
                    help="package.module:attribute of a rewind.Pipeline, or a registered name")
    sp.add_argument("--state", default=None, metavar="JSON",
                    help="initial state as a JSON object, or @file.json (default: the pipeline's sample)")
    sp.add_argument("--no-cache", action="store_true", help="execute every node (still recorded)")

    sp = add("runs", cmd_runs, "list runs, newest first")
    sp.add_argument("--pipeline", default=None, metavar="NAME",
                    help="only the runs of this pipeline (its name, as `pipelines` lists it)")
    sp.add_argument("--status", default=None, choices=STATUSES,
                    help="only the runs of this status")
    sp.add_argument("--search", default=None, metavar="TEXT", type=text_up_to(10_000),
                    help="only the runs whose id, summary or pipeline name contains TEXT")
    sp.add_argument("--limit", type=int_in(0, MAX_ROWS), default=20, metavar="N",
                    help="at most N runs (default 20)")
    sp.add_argument("--offset", type=int_in(0, MAX_ROWS), default=0, metavar="N",
                    help="skip the N newest (paging)")
    sp.add_argument("--forks", action="store_true", help="only forks")
    sp.add_argument("--json", action="store_true", help="the runs as a JSON list")

    sp = add("show", cmd_show, "show a run and its steps")
    add_run_argument(sp)
    sp.add_argument("--json", action="store_true", help="the whole run, with values, as JSON")
    sp.add_argument("--outputs", action="store_true", help="print each step's outputs")
    sp.add_argument("--full", action="store_true", help="with --outputs: do not truncate")

    sp = add("resume", cmd_resume,
             "continue a halted, interrupted or failed run in place (a halted run: the next turn)",
             quiet=True)
    add_run_argument(sp)

    add("pipelines", cmd_pipelines, "list registered pipelines")
