"""`rewind batch`: one change replayed across many stored runs, with a progress bar and a table.

    rewind batch --at critique --pipeline research --param temperature=0.7 --limit 100
    rewind batch --at judge --runs ID1,ID2 --edit score=3 --executor ray --workers 4
    rewind batch --at critique --pipeline research --plan      # what it would do; forks nothing

Exit 0 with the table (rows that failed or were skipped are in it, with their reason); 2 for bad
input, refused before anything is forked.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequest
from .inputs import add_change_flags, parse_changes
from .output import Progress, cut, dumps, shown, table
from .parser import int_in
from .handle import open_rewind, run_id

EXIT_OK = 0
MAX_RUN_IDS = 100_000


def parse_run_ids(text: Any) -> Any:
    if text is None:
        return None
    ids = [part.strip() for part in str(text).split(",") if part.strip()]
    if not ids:
        raise InvalidRequest("--runs: expected run ids separated by commas, e.g. --runs ID1,ID2",
                             field="--runs")
    if len(ids) > MAX_RUN_IDS:
        raise InvalidRequest(f"--runs: at most {MAX_RUN_IDS:,} ids; use --pipeline with --limit",
                             field="--runs")
    return ids


def _print_plan(plan: Any, out: Any) -> None:
    print(f"plan: fork {plan.runs} runs at {plan.at}: {len(plan.reaching)} reach it, "
          f"{len(plan.skipped)} would be skipped", file=out)
    print(f"nodes that may re-run: {' → '.join(plan.nodes) or 'none'}", file=out)
    print(f"tokens: at most {plan.estimated_tokens:,} (the steps from {plan.at} on); a full "
          f"re-run of these runs cost {plan.full_rerun_tokens:,}", file=out)
    for run_id, why in list(plan.skipped.items())[:20]:
        print(f"  skip {run_id}: {cut(why, 90)}", file=out)


def _print_report(report: Any, out: Any, prog: str) -> None:
    noise = bool(report.noise_samples)
    headers = ["run", "fork", "outcome", "first divergence", "tokens", "saved"]
    headers += ["verdict"] if noise else []
    headers += ["reason"]
    rows = []
    for r in report.rows:
        row = [r.run_id, r.fork_id or "-", r.outcome, r.first_divergence or "-", r.tokens_spent,
               r.tokens_saved]
        row += [r.verdict or "-"] if noise else []
        rows.append(row + [cut(r.reason, 60)])
    print(table(headers, rows, right=(4, 5)), file=out)
    print("", file=out)
    c = report.counts
    print(f"outcomes: {c['changed']} changed, {c['same']} same, {c['failed']} failed, "
          f"{c['skipped']} skipped (of {len(report.rows)})", file=out)
    # "0 changed" reads as "no effect" unless it says which fields were judged
    compared = list(dict.fromkeys(f for r in report.rows for f in (r.outcome_fields or [])))
    if compared:
        print(f"outcome fields compared: {', '.join(compared)} (--outcome FIELD to judge another)",
              file=out)
    print(f"tokens: {report.tokens_spent:,} spent, {report.tokens_saved:,} saved "
          f"({report.executor}, {report.workers} workers, {report.elapsed_s:.2f} s)", file=out)
    if noise:
        v = report.verdict_counts
        print(f"noise ({report.noise_samples} samples): {v['beyond noise']} beyond, "
              f"{v['within noise']} within", file=out)
    first = next((r for r in report.rows if r.outcome == "changed"), None)
    if first is not None:
        print(f"\nnext: {prog} diff {first.run_id} {first.fork_id}", file=out)


def cmd_batch(args: Any, out: Any) -> int:
    # every flag is parsed before the store is opened: bad input writes nothing
    edit, params = parse_changes(args)
    runs = parse_run_ids(args.runs)
    if runs is None and args.pipeline is None:
        raise InvalidRequest("name the source runs: --pipeline P or --runs ID,...", field="--runs")
    status = None if args.status == "any" else args.status
    from ..batch import batch_fork, plan_batch

    with open_rewind(args) as rw:
        if runs is not None:  # ids or unique prefixes of them, each resolved once
            runs = [run_id(rw, r) for r in runs]
        if args.plan:
            _print_plan(plan_batch(rw, args.at, runs=runs, pipeline=args.pipeline, status=status,
                                   limit=args.limit, edit=edit, params=params,
                                   outcome=args.outcome), out)
            return EXIT_OK
        progress = None if args.quiet or args.json else Progress()

        def on_progress(done: int, total: int, row: Any) -> None:
            progress.update(done, total, f"{row.run_id} {row.outcome}")

        with shown(progress):
            report = batch_fork(
                rw, args.at, runs=runs, pipeline=args.pipeline, status=status, limit=args.limit,
                edit=edit, params=params, outcome=args.outcome, noise_samples=args.noise_samples,
                executor=args.executor, workers=args.workers, address=args.address,
                on_progress=on_progress if progress is not None else None,
            )
    if args.json:
        print(dumps(report.to_dict()), file=out)
    else:
        _print_report(report, out, args.prog)
    return EXIT_OK


def add_commands(add) -> None:
    sp = add("batch", cmd_batch, "replay one change across many stored runs: which outcomes flip",
             quiet=True)
    sp.add_argument("--at", required=True, metavar="NODE", help="the node to fork every run at")
    sp.add_argument("--pipeline", metavar="P",
                    help="the runs of this pipeline (a registered name or package.module:attr)")
    sp.add_argument("--runs", metavar="ID,...",
                    help="these runs instead (comma-separated ids, or unique prefixes of ids)")
    sp.add_argument("--status", default="completed",
                    choices=("completed", "failed", "halted", "interrupted", "any"),
                    help="with --pipeline: runs of this status (default: completed)")
    sp.add_argument("--limit", type=int_in(1, 1_000_000), default=None, metavar="N",
                    help="at most N runs, newest first")
    add_change_flags(sp)
    sp.add_argument("--outcome", metavar="FIELD",
                    help="the state field that is a run's result (default: the writes of the "
                         "last node that is not a side effect, since a side effect is dry-run in "
                         "a fork; in the demo, verify's `verification`)")
    sp.add_argument("--noise-samples", type=int_in(0, 200), default=0, metavar="K",
                    help="re-sample re-executed nodes K times: within or beyond noise")
    sp.add_argument("--executor", choices=("local", "ray"), default="local",
                    help="local: a process pool on this machine (default); ray: a Ray cluster")
    sp.add_argument("--workers", type=int_in(1, 256), default=None, metavar="K",
                    help="worker processes (default: the CPU count)")
    sp.add_argument("--address", metavar="URL", help="with --executor ray: an existing cluster")
    sp.add_argument("--plan", action="store_true", help="print the fork plan only; fork nothing")
    sp.add_argument("--json", action="store_true", help="the batch report as JSON")
