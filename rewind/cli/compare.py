"""Commands that change a run and compare runs: fork, diff, audit."""

from __future__ import annotations

import dataclasses
import json

from ..errors import InvalidRequest, RewindError
from .inputs import add_change_flags, parse_changes
from .output import (
    Progress, cut, dumps, node_label, one_line, progress_for, shown, short_hash, table,
)
from .parser import int_in
from .handle import add_run_argument, finish_run, open_rewind, run_id

EXIT_OK = 0


def cmd_fork(args, out) -> int:
    # Parse every flag before touching the store: bad input writes nothing.
    edit, params = parse_changes(args)
    with open_rewind(args) as rw:
        parent = rw.get_run(run_id(rw, args.run))
        if args.plan:
            return _print_plan(rw.plan_fork(parent.id, at=args.at, edit=edit, params=params,
                                            occurrence=args.occurrence,
                                            allow_side_effects=args.allow_side_effects), out)
        rw.store.require_writable("fork a run")  # before the plan: a read-only store says so first
        if not args.yes:  # what the dashboard's checkbox asks, asked here as --yes
            try:
                plan = rw.plan_fork(parent.id, at=args.at, edit=edit, params=params,
                                    occurrence=args.occurrence, allow_side_effects=args.allow_side_effects)
            except RewindError as e:  # a bad setting is said; any other refusal is the fork's to say
                if getattr(e, "field", None) in ("REWIND_CONFIRM_TOKENS", "REWIND_PRICES"):
                    raise
                plan = None
            if plan is not None and plan.needs_confirmation:
                raise InvalidRequest("this fork needs a confirmation (" + "; ".join(plan.confirm_reasons)
                                     + "): run it again with --yes, or see it first with --plan")
        progress = progress_for(rw, parent.pipeline, not args.quiet, fallback=len(parent.steps) or 1)
        with shown(progress):
            run = rw.fork(parent.id, at=args.at, edit=edit, params=params,
                          allow_side_effects=args.allow_side_effects,
                          occurrence=args.occurrence, on_step=progress)
        return finish_run(run, out, lambda r: [f"\nnext: {args.prog} diff {parent.id} {r.id}"])


def _print_plan(plan, out) -> int:
    """A fork's plan: what re-runs and why, what stays cached, what it should cost."""
    rows = [[node_label(r.node, r.occurrence), r.verdict, r.est_tokens, r.reason] for r in plan.rows]
    print(table(["node", "plan", "est tok", "why"], rows, right=(2,)), file=out)
    dollars = "unknown (a model has no price)" if plan.est_dollars is None else f"${plan.est_dollars:.4f}"
    print(f"\nestimate: at most {plan.est_tokens:,} tokens, {dollars}", file=out)
    for why in plan.confirm_reasons:
        print(f"needs confirmation: {why}", file=out)
    return EXIT_OK


def _print_changes(diverged: list, out) -> None:
    for r in diverged:
        if not (r.text_diffs or r.field_diffs):
            continue
        print(f"\n== {r.node}#{r.occurrence}", file=out)
        for text in r.text_diffs.values():
            print(text, file=out)
        for changes in r.field_diffs.values():
            for c in changes[:50]:
                print(f"  {c.get('path')}: {c.get('change')}  "
                      f"{cut(json.dumps(c.get('a'), default=repr), 60)} → "
                      f"{cut(json.dumps(c.get('b'), default=repr), 60)}", file=out)


def cmd_diff(args, out) -> int:
    with open_rewind(args) as rw:
        progress = Progress() if args.noise_samples and not args.quiet else None
        kwargs: dict = {"noise_samples": args.noise_samples}
        if progress is not None:
            kwargs["on_progress"] = progress.callback()
        with shown(progress):
            d = rw.diff(run_id(rw, args.a), run_id(rw, args.b), **kwargs)
    if args.json:
        print(dumps(dataclasses.asdict(d)), file=out)
        return EXIT_OK
    print(f"A: {d.a}   B: {d.b}", file=out)
    print(f"first divergence: {d.first_divergence or 'none'}", file=out)
    print(f"verdict: {d.verdict}", file=out)
    print(f"tokens spent: A {d.tokens_a}, B {d.tokens_b}; trajectory cost: A {d.cost_a}, "
          f"B {d.cost_b} (change {d.cost_delta:+d} on the nodes whose inputs changed)", file=out)
    print("", file=out)
    with_noise = any(getattr(r, "noise", None) for r in d.rows)
    headers = ["node", "A status", "B status", "A output", "B output", "same", "A tok", "B tok"]
    headers += ["noise"] if with_noise else []
    rows = []
    for r in d.rows:
        same = "n/a" if r.identical is None else ("yes" if r.identical else "NO")
        row = [node_label(r.node, r.occurrence), r.a_status or "-", r.b_status or "-",
               short_hash(r.a_hash), short_hash(r.b_hash), same, r.a_tokens, r.b_tokens]
        rows.append(row + ([r.noise or ""] if with_noise else []))
    print(table(headers, rows, right=(6, 7)), file=out)
    diverged = [r for r in d.rows if r.identical is False]
    if diverged:
        reason = diverged[0].b_reason or diverged[0].a_reason
        if reason:
            print(f"\nwhy {diverged[0].node} differs: {one_line(reason)}", file=out)
        if args.changes:
            _print_changes(diverged, out)
        else:
            print("(--changes shows what changed in each diverged step)", file=out)
    return EXIT_OK


def cmd_audit(args, out) -> int:
    with open_rewind(args) as rw:
        progress = None if args.quiet else Progress()
        with shown(progress):
            report = rw.audit(run_id(rw, args.run), repeats=args.repeats,
                              on_progress=progress.callback() if progress else None)
    if args.json:
        print(dumps(dataclasses.asdict(report)), file=out)
        return EXIT_OK
    print(f"audit of run {report.run_id}: {report.repeats} repeats per step", file=out)
    rows = []
    for r in report.rows:
        stable = "n/a" if r.stable is None else ("yes" if r.stable else "NO")
        rows.append((node_label(r.node, r.occurrence), getattr(r, "status", ""), stable,
                     r.distinct_outputs, cut(", ".join(map(str, r.unstable_fields or [])), 50)))
    print(table(("node", "status", "stable", "distinct", "unstable fields"), rows, right=(3,)), file=out)
    unstable = report.unstable_nodes
    print(f"\nunstable: {', '.join(unstable) if unstable else 'none'}", file=out)
    return EXIT_OK


def add_commands(add) -> None:
    sp = add("fork", cmd_fork, "fork a run at a node, change one thing, replay", quiet=True)
    add_run_argument(sp, help="the run to fork: a run id, or any unique prefix of one (at "
                              "least 4 characters)")
    sp.add_argument("--at", required=True, metavar="NODE",
                    help="the node to fork at: it and what it reaches re-run with the change, "
                         "the steps before it are inherited (see `show RUN` for the nodes)")
    sp.add_argument("--occurrence", type=int_in(1, 10**6), default=1, metavar="N",
                    help="fork at the N-th visit of NODE (loops)")
    add_change_flags(sp)
    sp.add_argument("--allow-side-effects", action="store_true",
                    help="perform side effects again instead of dry-running them")
    sp.add_argument("--plan", action="store_true",
                    help="only show what would re-run, stay cached or be skipped, and the cost")
    sp.add_argument("--yes", action="store_true",
                    help="run a fork whose plan needs a confirmation (a large edit, an estimate "
                         "over REWIND_CONFIRM_TOKENS)")

    sp = add("diff", cmd_diff, "compare two runs step by step", quiet=True)
    add_run_argument(sp, "a", "A", help="the first run (e.g. the parent): an id or a unique "
                                        "prefix of one")
    add_run_argument(sp, "b", "B", help="the second run (e.g. the fork): an id or a unique "
                                        "prefix of one")
    sp.add_argument("--noise-samples", type=int_in(0, 1000), default=0, metavar="K",
                    help="re-sample re-executed nodes K times to tell a change from jitter")
    sp.add_argument("--changes", action="store_true", help="print what changed in each diverged step")
    sp.add_argument("--json", action="store_true", help="the whole diff as JSON")

    sp = add("audit", cmd_audit, "re-execute every step to find nondeterministic nodes", quiet=True)
    add_run_argument(sp)
    sp.add_argument("--repeats", type=int_in(1, 1000), default=3, metavar="K",
                    help="re-execute each step K times (default 3)")
    sp.add_argument("--json", action="store_true", help="the audit report as JSON")
