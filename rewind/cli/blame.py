"""`rewind blame`: at which step was a failed run's failure locked in? Re-rolls the run from its
steps (forks that re-sample), with a progress bar, and prints a table of success rates.

    rewind blame RUN --outcome verdict='"pass"' [--samples 16] [--strategy bisect|each]
    rewind blame RUN --outcome ok!=false --resample all --param temperature=0.9 --budget 50000
    rewind blame RUN --outcome my_checks:passed          # a function of the final state

`--outcome` is when a run succeeded: `FIELD=JSON` (the field equals the value), `FIELD!=JSON`
(it does not), or `module:function` (called with the final state, a dict). Exit 0 with the
table; 2 for bad input (a run that passes the outcome included), refused before any trial.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

from ..analysis.blame import field_outcome
from ..errors import InvalidRequest
from .handle import add_run_argument, open_rewind, run_id
from .inputs import load_json, parse_assignments
from .output import Progress, dumps, shown, table
from .parser import int_in

EXIT_OK = 0


def parse_outcome(text: str) -> Callable[[dict], bool]:
    """`FIELD=JSON`, `FIELD!=JSON` or `module:function` -> a function of the final state."""
    name, sep, raw = text.partition("=")
    if sep and name.strip() and not (":" in name and not name.endswith("!")):
        negate = name.endswith("!")
        field = name[:-1].strip() if negate else name.strip()
        value = load_json(raw, f"--outcome {field}",
                          f"a string must be quoted: --outcome {field}='\"{raw[:30]}\"'")
        return field_outcome(field, value, negate)
    module, colon, attr = text.partition(":")
    if not colon or not module or not attr:
        raise InvalidRequest(f"--outcome {text[:80]!r}: expected FIELD=JSON, FIELD!=JSON or "
                             "module:function", field="--outcome")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # a module of the project the command runs in
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise InvalidRequest(f"--outcome {text}: {type(e).__name__}: {e}", field="--outcome") from None
    if not callable(fn):
        raise InvalidRequest(f"--outcome {text} is a {type(fn).__name__}, not a function",
                             field="--outcome")
    return fn


def parse_resample(text: Any) -> Any:
    if text is None or text == "all":
        return text
    nodes = [n.strip() for n in text.split(",") if n.strip()]
    if not nodes:
        raise InvalidRequest("--resample: expected all or node names separated by commas",
                             field="--resample")
    return nodes


def _rate(row: Any) -> str:
    if not row.trials:
        return "-"
    return f"{row.successes}/{row.trials} = {row.success_rate:.0%}"


def _print_report(report: Any, out: Any, prog: str) -> None:
    rows = [[row.index + 1, row.node + (f" #{row.occurrence}" if row.occurrence > 1 else ""),
             _rate(row), f"{row.low:.0%}–{row.high:.0%}" if row.trials else "-",
             row.verdict if row.resampled else "not re-sampled"] for row in report.steps]
    print(table(["step", "node", "success when re-rolled", "95% interval", "verdict"], rows), file=out)
    print("", file=out)
    print(report.summary, file=out)
    print(f"trials: {len(report.trial_runs)} ({report.strategy}, {report.samples} samples a step); "
          f"tokens: {report.tokens:,} (each step tried would cost about "
          f"{report.tokens_each_estimate:,})" + ("; the token budget ran out" if report.budget_exhausted
                                                 else ""), file=out)
    if report.trial_runs:
        print(f"\nnext: {prog} diff {report.run_id} {report.trial_runs[-1]}", file=out)


def cmd_blame(args: Any, out: Any) -> int:
    # every flag is parsed before the store is opened: bad input writes nothing
    outcome = parse_outcome(args.outcome)
    resample = parse_resample(args.resample)
    params = parse_assignments("--param", args.param)
    with open_rewind(args) as rw:
        rid = run_id(rw, args.run)
        progress = None if args.quiet or args.json else Progress()
        with shown(progress):
            report = rw.blame(rid, outcome, samples=args.samples, strategy=args.strategy,
                              resample=resample, params=params, budget_tokens=args.budget,
                              on_progress=progress.callback() if progress is not None else None)
    if args.json:
        print(dumps(report), file=out)
    else:
        _print_report(report, out, args.prog)
    return EXIT_OK


def add_commands(add) -> None:
    sp = add("blame", cmd_blame, "find the step that decided a failed run, by re-rolling it "
             "from its steps", quiet=True)
    add_run_argument(sp, help="the failed run to blame: an id, or any unique prefix of one")
    sp.add_argument("--outcome", required=True, metavar="FIELD=JSON|FIELD!=JSON|mod:fn",
                    help="when a run succeeded: a field equal (=) or not equal (!=) to a JSON "
                         "value in the final state, or a function of the final state")
    sp.add_argument("--samples", type=int_in(1, 1000), default=8, metavar="K",
                    help="trials at each step tried (default 8; 16 tells rates apart better)")
    sp.add_argument("--strategy", choices=("bisect", "each"), default="bisect",
                    help="bisect: search for the boundary with fewer trials (default); each: "
                         "try every step")
    sp.add_argument("--resample", metavar="all|NODE,...",
                    help="the nodes a trial re-samples (default: those that called a model)")
    sp.add_argument("--param", action="append", metavar="NAME=JSON",
                    help="a parameter of the re-sampled nodes for the trials, e.g. "
                         "temperature=0.9 (repeatable)")
    sp.add_argument("--budget", type=int_in(0, 10**12), default=None, metavar="TOKENS",
                    help="stop before a trial that would spend more tokens than this in all")
    sp.add_argument("--json", action="store_true", help="the report as JSON")
