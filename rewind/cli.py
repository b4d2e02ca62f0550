"""`python -m rewind`: a thin command line over the `Rewind` API.

    python -m rewind demo [--question Q]
    python -m rewind run --pipeline mod:attr --state JSON
    python -m rewind runs [--pipeline P] [--status S] [--search T] [--limit N]
    python -m rewind show RUN [--json] [--outputs]
    python -m rewind fork RUN --at NODE [--occurrence N] [--edit field=JSON ...]
                          [--param name=JSON ...] [--allow-side-effects]
    python -m rewind diff A B [--noise-samples K] [--changes]
    python -m rewind audit RUN --repeats K
    python -m rewind gc --older-than-days N [--dry-run]
    python -m rewind export RUN > run.json
    python -m rewind import run.json
    python -m rewind serve-llm [--host 127.0.0.1] [--port 8000]

Global: `--db URL` (default: `REWIND_DB`, else ./rewind.db). `REWIND_PIPELINES="pkg.mod:attr,..."`
registers more pipelines; the research demo is always registered.

Exit codes: 0 success; 1 a run that failed (or an operation that could not be carried out);
2 bad input (unknown run, node or field, bad JSON in a flag, bad arguments). Errors are one line
on stderr; a traceback only with `REWIND_DEBUG=1`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import logging
import os
import sys
from typing import Any, Callable, Optional, Sequence

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

PROG = "python -m rewind"


class CliError(Exception):
    """A problem with the command line itself: reported as one line, exit code 2 by default."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------
# Parsing flag values


def parse_assignment(flag: str, text: str) -> tuple:
    """`name=JSON` → (name, value); a CliError naming the flag and the problem otherwise."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise CliError(f"{flag} {text!r}: expected name=JSON, e.g. {flag} temperature=0.9 "
                       f"or {flag} field='\"some text\"'")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        hint = ""
        if raw and raw[:1] not in "\"[{-0123456789" and raw not in ("true", "false", "null"):
            hint = f"; a string must be quoted: {flag} {name}='\"{raw}\"'"
        raise CliError(f"{flag} {name}: invalid JSON {raw!r} ({e.msg} at column {e.colno}){hint}") from None
    return name, value


def parse_assignments(flag: str, items: Optional[Sequence[str]]) -> dict:
    out: dict = {}
    for text in items or []:
        name, value = parse_assignment(flag, text)
        if name in out:
            raise CliError(f"{flag} {name}: given more than once")
        out[name] = value
    return out


def _read_file(path: str, where: str) -> str:
    """The text of a file (`-`: standard input); a CliError naming `where` otherwise."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CliError(f"{where}: cannot read the file ({e.strerror or e})") from None


def _json_object(text: str, where: str, hint: str) -> dict:
    """Parse a JSON object; a CliError naming `where`, the problem and `hint` otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"{where}: invalid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                       f"{hint}") from None
    if not isinstance(value, dict):
        raise CliError(f"{where}: expected a JSON object, got {type(value).__name__}; {hint}")
    return value


def parse_state(text: Optional[str]) -> Optional[dict]:
    if text is None:
        return None
    if text.startswith("@"):
        text = _read_file(text[1:], f"--state {text}")
    return _json_object(text, "--state", "pass an object like --state '{\"question\": \"...\"}'")


# ---------------------------------------------------------------------------------------------
# Output helpers


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _short(h: Optional[str], n: int = 10) -> str:
    return h[:n] if h else "-"


def _cut(text: Any, width: int) -> str:
    s = _one_line("" if text is None else text)
    return s if len(s) <= width else s[: max(width - 1, 0)] + "…"


def _ms(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.1f} s"
    return f"{value:.0f} ms" if value >= 1 else f"{value:.1f} ms"


def _when(ts: Optional[float]) -> str:
    if not ts:
        return "-"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """An aligned plain-text table; columns listed in `right` are right-aligned (numbers)."""
    cells = [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(widths[i]) if i in right else v.ljust(widths[i]) for i, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode("ascii")
    return repr(value)


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False, default=_json_default)


class Progress:
    """A tiny text progress bar on stderr; one line per update when stderr is not a tty.

    Feed it `Step`s (it is an `on_step` callback) or call `update(done, total, label)` (the
    `on_progress` callbacks of audit and the noise band).
    """

    WIDTH = 24

    def __init__(self, total: int = 1, stream: Any = None):
        self.total = max(int(total), 1)
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.shown = False

    def __call__(self, step: Any) -> None:
        tokens = f"{step.tokens} tok" if step.tokens else ""
        self.update(step.index + 1, self.total, f"{step.node:<12} {step.status:<9} {tokens}")

    def update(self, done: int, total: int, label: str = "") -> None:
        total = max(int(total or 1), int(done), 1)
        filled = round(self.WIDTH * done / total)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        text = f"[{bar}] {done}/{total}  {label}".rstrip()
        if self.tty:
            self.stream.write("\r\x1b[2K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


# ---------------------------------------------------------------------------------------------
# Rendering runs


STEP_HEADERS = ("#", "node", "status", "tokens", "saved", "latency", "output", "reason")


def steps_table(run: Any, reason_width: int = 70) -> str:
    rows = []
    for s in run.steps:
        node = s.node if s.occurrence == 1 else f"{s.node}#{s.occurrence}"
        reason = s.error if s.status == "failed" and s.error else s.reason
        rows.append((s.index + 1, node, s.status, s.tokens, s.tokens_saved or "",
                     _ms(s.latency_ms), _short(s.output_hash), _cut(reason, reason_width)))
    return table(STEP_HEADERS, rows, right=(0, 3, 4, 5))


def run_headline(run: Any) -> str:
    kind = f"fork of {run.parent_id} at {run.fork_node}" if run.parent_id else f"run of {run.pipeline}"
    return (f"run {run.id}  {run.status}  ({kind}; {len(run.steps)} steps, "
            f"{run.total_tokens} tokens spent, {run.tokens_saved} saved, {_ms(run.latency_ms)})")


def print_run(run: Any, out: Any) -> None:
    print(run_headline(run), file=out)
    if run.error:
        print(f"error: {_one_line(run.error)}", file=out)
    print("", file=out)
    print(steps_table(run), file=out)


def _value_text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else dumps(value)
    if limit and len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters; --full shows all)"
    return text


def run_to_json(run: Any) -> dict:
    d = {
        "id": run.id, "pipeline": run.pipeline, "status": run.status, "parent_id": run.parent_id,
        "fork_node": run.fork_node, "fork_occurrence": run.fork_occurrence,
        "total_tokens": run.total_tokens, "tokens_saved": run.tokens_saved,
        "latency_ms": run.latency_ms, "created_at": run.created_at, "finished_at": run.finished_at,
        "summary": run.summary, "error": run.error, "edit": run.edit, "params": run.params,
        "allow_side_effects": run.allow_side_effects,
    }
    steps = []
    for s in run.steps:
        try:
            steps.append(s.to_dict(values=True))
        except Exception as e:  # a purged blob: show the step without its values
            item = s.to_dict(values=False)
            item["values_error"] = str(e)
            steps.append(item)
    d["steps"] = steps
    return d


# ---------------------------------------------------------------------------------------------
# Commands


def _open(args: argparse.Namespace):
    from .api import Rewind

    return Rewind(args.db)


def _register_builtins() -> None:
    from .pipelines import builtin_pipelines

    builtin_pipelines()  # importing registers them process-wide


def _resolve_pipeline(rw: Any, spec: str):
    from .engine import load_pipeline_spec
    from .errors import InvalidRequest

    if ":" in spec:
        found = load_pipeline_spec(spec)
        if len(found) != 1:
            raise InvalidRequest(f"--pipeline {spec!r} names {len(found)} pipelines; name one")
        return found[0]
    return rw.pipeline(spec)


def _finish_run(run: Any, out: Any, hint: Optional[Callable[[Any], list]] = None) -> int:
    print_run(run, out)
    if hint is not None:
        for line in hint(run):
            print(line, file=out)
    return EXIT_OK if run.status == "completed" else EXIT_FAILED


@contextlib.contextmanager
def shown(progress):
    """Close a progress display however the work ends."""
    try:
        yield progress
    finally:
        if progress:
            progress.close()


def _progress_for(pipeline: Any, enabled: bool) -> Optional[Progress]:
    if not enabled:
        return None
    return Progress(len(getattr(pipeline, "actions", {}) or {}) or 1)


def cmd_demo(args, out) -> int:
    from .pipelines.research import pipeline

    question = args.question if args.question is not None else pipeline.sample_state["question"]
    if not question.strip():
        raise CliError("--question: must not be empty")
    with _open(args) as rw:
        progress = _progress_for(pipeline, not args.quiet)
        with shown(progress):
            run = rw.run(pipeline, {"question": question}, on_step=progress)

        def hint(run):
            lines = []
            try:
                receipt = run.step("publish").outputs.get("receipt") if run.status == "completed" else None
                verification = run.step("verify").outputs.get("verification") if run.status == "completed" else None
            except Exception:  # a purged blob: the hint is optional
                receipt = verification = None
            if verification:
                state = "valid" if verification.get("valid") else "INVALID"
                lines.append(f"\ncitations: {state} ({verification.get('citations', 0)} cited, "
                             f"bad: {', '.join(verification.get('bad_citations') or []) or 'none'})")
            if receipt:
                lines.append(f"report: {receipt.get('path')}")
            lines.append(f"\nnext: {PROG} fork {run.id} --at critique --param temperature=0.9")
            return lines

        return _finish_run(run, out, hint)


def cmd_run(args, out) -> int:
    state = parse_state(args.state)
    with _open(args) as rw:
        pipeline = _resolve_pipeline(rw, args.pipeline)
        if state is None:
            state = dict(pipeline.sample_state)
        progress = _progress_for(pipeline, not args.quiet)
        with shown(progress):
            run = rw.run(pipeline, state, use_cache=not args.no_cache, on_step=progress)
        return _finish_run(run, out)


def cmd_runs(args, out) -> int:
    with _open(args) as rw:
        runs = rw.list_runs(pipeline=args.pipeline, status=args.status, search=args.search,
                            limit=args.limit, forks_only=args.forks)
    if args.json:
        print(dumps([run_to_json(r) for r in runs]), file=out)
        return EXIT_OK
    if not runs:
        print("no runs", file=out)
        return EXIT_OK
    rows = []
    for r in runs:
        fork = f"{r.parent_id}@{r.fork_node}" if r.parent_id else ""
        rows.append((r.id, r.pipeline, r.status, r.step_count, r.total_tokens, r.tokens_saved,
                     _ms(r.latency_ms), _when(r.created_at), fork, _cut(r.summary, 40)))
    print(table(("id", "pipeline", "status", "steps", "tokens", "saved", "latency", "created",
                 "fork of", "summary"), rows, right=(3, 4, 5, 6)), file=out)
    return EXIT_OK


def cmd_show(args, out) -> int:
    with _open(args) as rw:
        run = rw.get_run(args.run)
        if args.json:
            print(dumps(run_to_json(run)), file=out)
            return EXIT_OK
        print(run_headline(run), file=out)
        print(f"pipeline: {run.pipeline}   created: {_when(run.created_at)}", file=out)
        if run.summary:
            print(f"summary:  {_cut(run.summary, 100)}", file=out)
        if run.parent_id:
            print(f"parent:   {run.parent_id} (forked at {run.fork_node}"
                  f"{'#' + str(run.fork_occurrence) if (run.fork_occurrence or 1) > 1 else ''})", file=out)
        if run.edit:
            print(f"edit:     {_cut(json.dumps(run.edit, default=repr), 100)}", file=out)
        if run.params:
            print(f"params:   {_cut(json.dumps(run.params, default=repr), 100)}", file=out)
        if run.error:
            print(f"error:    {_one_line(run.error)}", file=out)
        print("", file=out)
        print(steps_table(run), file=out)
        if args.outputs:
            limit = 0 if args.full else 1200
            for s in run.steps:
                print(f"\n== {s.node}#{s.occurrence} ({s.status})", file=out)
                try:
                    outputs = s.outputs
                except Exception as e:
                    print(f"   (values unavailable: {_one_line(e)})", file=out)
                    continue
                for k, v in outputs.items():
                    print(f"-- {k}", file=out)
                    print(_value_text(v, limit), file=out)
    return EXIT_OK


def cmd_fork(args, out) -> int:
    # Parse every flag before touching the store: bad input writes nothing.
    edit = parse_assignments("--edit", args.edit)
    params = parse_assignments("--param", args.param)
    if args.occurrence < 1:
        raise CliError(f"--occurrence: must be 1 or more, not {args.occurrence}")
    with _open(args) as rw:
        parent = rw.get_run(args.run)
        progress = None
        if not args.quiet:
            try:
                progress = _progress_for(rw.pipeline(parent.pipeline), True)
            except Exception:
                progress = Progress(len(parent.steps) or 1)
        with shown(progress):
            run = rw.fork(parent.id, at=args.at, edit=edit, params=params,
                          allow_side_effects=args.allow_side_effects,
                          occurrence=args.occurrence, on_step=progress)
        return _finish_run(run, out, lambda r: [f"\nnext: {PROG} diff {parent.id} {r.id}"])


def _count_progress(enabled: bool) -> Optional[Progress]:
    return Progress() if enabled else None


def _callback(progress: Optional[Progress]) -> Optional[Callable]:
    if progress is None:
        return None
    return lambda done, total, node="": progress.update(done, total, str(node))


def cmd_diff(args, out) -> int:
    if args.noise_samples < 0:
        raise CliError(f"--noise-samples: must be 0 or more, not {args.noise_samples}")
    with _open(args) as rw:
        kwargs: dict = {"noise_samples": args.noise_samples}
        progress = _count_progress(bool(args.noise_samples) and not args.quiet)
        if progress is not None:
            kwargs["on_progress"] = _callback(progress)
        with shown(progress):
            d = rw.diff(args.a, args.b, **kwargs)
    if args.json:
        print(dumps(dataclasses.asdict(d)), file=out)
        return EXIT_OK
    print(f"A: {d.a}   B: {d.b}", file=out)
    print(f"first divergence: {d.first_divergence or 'none'}", file=out)
    print(f"verdict: {d.verdict}", file=out)
    print(f"tokens: A {d.tokens_a}, B {d.tokens_b} (B saved {d.tokens_saved_b})", file=out)
    print("", file=out)
    with_noise = any(getattr(r, "noise", None) for r in d.rows)
    headers = ["node", "A status", "B status", "A output", "B output", "same", "A tok", "B tok"]
    if with_noise:
        headers.append("noise")
    rows = []
    for r in d.rows:
        same = "n/a" if r.identical is None else ("yes" if r.identical else "NO")
        node = r.node if r.occurrence == 1 else f"{r.node}#{r.occurrence}"
        row = [node, r.a_status or "-", r.b_status or "-", _short(r.a_hash), _short(r.b_hash),
               same, r.a_tokens, r.b_tokens]
        if with_noise:
            row.append(r.noise or "")
        rows.append(row)
    print(table(headers, rows, right=(6, 7)), file=out)
    diverged = [r for r in d.rows if r.identical is False]
    if diverged:
        first = diverged[0]
        reason = first.b_reason or first.a_reason
        if reason:
            print(f"\nwhy {first.node} differs: {_one_line(reason)}", file=out)
    if args.changes:
        for r in diverged:
            if not (r.text_diffs or r.field_diffs):
                continue
            print(f"\n== {r.node}#{r.occurrence}", file=out)
            for field, text in r.text_diffs.items():
                print(text, file=out)
            for field, changes in r.field_diffs.items():
                for c in changes[:50]:
                    print(f"  {c.get('path')}: {c.get('change')}  "
                          f"{_cut(json.dumps(c.get('a'), default=repr), 60)} → "
                          f"{_cut(json.dumps(c.get('b'), default=repr), 60)}", file=out)
    elif diverged:
        print("(--changes shows what changed in each diverged step)", file=out)
    return EXIT_OK


def cmd_audit(args, out) -> int:
    if args.repeats < 1:
        raise CliError(f"--repeats: must be 1 or more, not {args.repeats}")
    with _open(args) as rw:
        progress = _count_progress(not args.quiet)
        with shown(progress):
            report = rw.audit(args.run, repeats=args.repeats, on_progress=_callback(progress))
    if args.json:
        print(dumps(dataclasses.asdict(report)), file=out)
        return EXIT_OK
    print(f"audit of run {report.run_id}: {report.repeats} repeats per step", file=out)
    rows = []
    for r in report.rows:
        stable = "n/a" if r.stable is None else ("yes" if r.stable else "NO")
        node = r.node if r.occurrence == 1 else f"{r.node}#{r.occurrence}"
        rows.append((node, getattr(r, "status", ""), stable, r.distinct_outputs,
                     _cut(", ".join(map(str, r.unstable_fields or [])), 50)))
    print(table(("node", "status", "stable", "distinct", "unstable fields"), rows, right=(3,)), file=out)
    unstable = report.unstable_nodes
    print(f"\nunstable: {', '.join(unstable) if unstable else 'none'}", file=out)
    return EXIT_OK


def cmd_gc(args, out) -> int:
    if args.older_than_days < 0:
        raise CliError(f"--older-than-days: must be 0 or more, not {args.older_than_days}")
    with _open(args) as rw:
        result = rw.gc(args.older_than_days, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    if isinstance(result, dict):
        rows = [(k, v) for k, v in result.items() if not isinstance(v, (dict, list))]
        print(f"gc ({'dry run' if args.dry_run else 'done'}), older than {args.older_than_days:g} days: {verb}", file=out)
        print(table(("what", "count"), rows, right=(1,)), file=out)
    else:
        print(f"gc: {verb} {result}", file=out)
    return EXIT_OK


def cmd_export(args, out) -> int:
    with _open(args) as rw:
        doc = rw.export_run(args.run)
    out.write(json.dumps(doc, ensure_ascii=False, default=_json_default))
    out.write("\n")
    return EXIT_OK


def cmd_import(args, out) -> int:
    where = f"import {args.file}"
    doc = _json_object(_read_file(args.file, where), where,
                       f"pass a file written by `{PROG} export`")
    with _open(args) as rw:
        ids = rw.import_run(doc)
    ids = list(ids or [])
    print(f"imported {len(ids)} run(s): {', '.join(map(str, ids)) or '-'}", file=out)
    return EXIT_OK


def cmd_resume(args, out) -> int:
    with _open(args) as rw:
        run = rw.get_run(args.run)
        progress = None
        if not args.quiet:
            try:
                progress = _progress_for(rw.pipeline(run.pipeline), True)
            except Exception:
                progress = None
        with shown(progress):
            resumed = rw.resume(run.id, on_step=progress)
        return _finish_run(resumed, out)


def cmd_pipelines(args, out) -> int:
    with _open(args) as rw:
        registry = rw.pipelines()
    rows = [(name, p.entrypoint, " → ".join(p.actions), _cut(p.description, 50))
            for name, p in sorted(registry.items())]
    print(table(("name", "entrypoint", "nodes", "description"), rows), file=out)
    return EXIT_OK


def cmd_serve_llm(args, out) -> int:
    from . import llm_server

    try:
        llm_server.serve(args.host, args.port, latency_ms=args.latency_ms, verbose=args.verbose)
    except OSError as e:
        raise CliError(f"serve-llm: cannot listen on {args.host}:{args.port} ({e.strerror or e})",
                       code=EXIT_FAILED) from None
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# Parser


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own code for usage errors)
        self.print_usage(sys.stderr)
        sys.stderr.write(f"rewind: error: {message}\n")
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Rewind: fork a finished LLM pipeline run at any node, change one input, "
                    "replay only what it reaches, and diff the trajectories.",
    )
    p.add_argument("--db", default=None, metavar="URL",
                   help="store: a path, sqlite:///path or postgresql://… "
                        "(default: $REWIND_DB, else ./rewind.db)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def add(name: str, fn: Callable, help: str, **kw) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help, **kw)
        sp.set_defaults(func=fn)
        return sp

    sp = add("demo", cmd_demo, "run the offline research demo pipeline")
    sp.add_argument("--question", default=None, help="what to research (default: a sample)")
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    sp = add("run", cmd_run, "run a pipeline from its entrypoint")
    sp.add_argument("--pipeline", required=True, metavar="MOD:ATTR",
                    help="package.module:attribute of a rewind.Pipeline, or a registered name")
    sp.add_argument("--state", default=None, metavar="JSON",
                    help="initial state as a JSON object, or @file.json (default: the pipeline's sample)")
    sp.add_argument("--no-cache", action="store_true", help="execute every node (still recorded)")
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    sp = add("runs", cmd_runs, "list runs, newest first")
    sp.add_argument("--pipeline", default=None)
    sp.add_argument("--status", default=None, choices=("running", "completed", "failed", "interrupted"))
    sp.add_argument("--search", default=None, metavar="TEXT")
    sp.add_argument("--limit", type=int, default=20, metavar="N")
    sp.add_argument("--forks", action="store_true", help="only forks")
    sp.add_argument("--json", action="store_true")

    sp = add("show", cmd_show, "show a run and its steps")
    sp.add_argument("run", metavar="RUN")
    sp.add_argument("--json", action="store_true", help="the whole run, with values, as JSON")
    sp.add_argument("--outputs", action="store_true", help="print each step's outputs")
    sp.add_argument("--full", action="store_true", help="with --outputs: do not truncate")

    sp = add("fork", cmd_fork, "fork a run at a node, change one thing, replay")
    sp.add_argument("run", metavar="RUN")
    sp.add_argument("--at", required=True, metavar="NODE")
    sp.add_argument("--occurrence", type=int, default=1, metavar="N",
                    help="fork at the N-th visit of NODE (loops)")
    sp.add_argument("--edit", action="append", metavar="FIELD=JSON",
                    help="set a state field the node reads (repeatable)")
    sp.add_argument("--param", action="append", metavar="NAME=JSON",
                    help="set one of the node's parameters (repeatable)")
    sp.add_argument("--allow-side-effects", action="store_true",
                    help="perform side effects again instead of dry-running them")
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    sp = add("diff", cmd_diff, "compare two runs step by step")
    sp.add_argument("a", metavar="A")
    sp.add_argument("b", metavar="B")
    sp.add_argument("--noise-samples", type=int, default=0, metavar="K",
                    help="re-sample re-executed nodes K times to tell a change from jitter")
    sp.add_argument("--changes", action="store_true", help="print what changed in each diverged step")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("-q", "--quiet", action="store_true")

    sp = add("audit", cmd_audit, "re-execute every step to find nondeterministic nodes")
    sp.add_argument("run", metavar="RUN")
    sp.add_argument("--repeats", type=int, default=3, metavar="K")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("-q", "--quiet", action="store_true")

    sp = add("gc", cmd_gc, "purge old cache entries, runs and orphaned blobs")
    sp.add_argument("--older-than-days", type=float, required=True, metavar="N")
    sp.add_argument("--dry-run", action="store_true", help="count, remove nothing")

    sp = add("export", cmd_export, "write a run with its lineage as JSON to stdout")
    sp.add_argument("run", metavar="RUN")

    sp = add("import", cmd_import, "load a run exported with `export`")
    sp.add_argument("file", metavar="FILE", help="a JSON file from `export` ('-' for stdin)")

    sp = add("resume", cmd_resume, "continue an interrupted or failed run")
    sp.add_argument("run", metavar="RUN")
    sp.add_argument("-q", "--quiet", action="store_true")

    add("pipelines", cmd_pipelines, "list registered pipelines")

    sp = add("serve-llm", cmd_serve_llm, "serve the offline model simulator over HTTP")
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=8000)
    sp.add_argument("--latency-ms", type=float, default=None)
    sp.add_argument("--verbose", action="store_true")
    return p


def _exit_code_for(error: BaseException) -> int:
    from .errors import ForkError, InvalidRequest, NotFound, UndeclaredRead, UnhashableValue

    if isinstance(error, (NotFound, InvalidRequest, UnhashableValue, ForkError, UndeclaredRead)):
        return EXIT_BAD_INPUT
    return EXIT_FAILED


def _report(message: str) -> None:
    sys.stderr.write(f"rewind: error: {_one_line(message)}\n")
    sys.stderr.flush()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI; returns the exit code (`__main__` passes it to sys.exit)."""
    logging.getLogger("burr").setLevel(logging.CRITICAL)  # a failed node is reported by Rewind
    logging.basicConfig(level=logging.WARNING, format="rewind: %(levelname)s: %(message)s")
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    from .errors import RewindError

    debug = os.environ.get("REWIND_DEBUG", "").strip() not in ("", "0", "false")
    out = sys.stdout
    try:
        _register_builtins()
        return int(args.func(args, out) or EXIT_OK)
    except CliError as e:
        _report(str(e))
        return e.code
    except RewindError as e:
        if debug:
            raise
        _report(str(e))
        return _exit_code_for(e)
    except ImportError as e:
        if debug:
            raise
        _report(f"{e} (is that part of Rewind installed yet?)")
        return EXIT_FAILED
    except KeyboardInterrupt:
        sys.stderr.write("\nrewind: interrupted\n")
        return 130
    except OSError as e:
        if debug or isinstance(e, BrokenPipeError):
            if isinstance(e, BrokenPipeError):
                return _broken_pipe()
            raise
        _report(f"{type(e).__name__}: {e}")
        return EXIT_FAILED
    except Exception as e:  # a bug: one line by default, the traceback with REWIND_DEBUG=1
        if debug:
            raise
        _report(f"internal error: {type(e).__name__}: {e} (set REWIND_DEBUG=1 for the traceback)")
        return EXIT_FAILED


def _broken_pipe() -> int:
    # stdout went away (| head): stop quietly, and keep Python from complaining at exit
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_OK
