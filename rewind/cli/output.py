"""What the CLI prints: aligned tables, JSON, a run and its steps, and a progress bar on stderr.

Durations, timestamps and hashes go through `rewind.fmt` (pure functions, no streamlit), so
the terminal and the dashboard spell `1234 ms` the same way (`1.23 s`).
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Optional

from ..fmt import cut, fmt_ms, fmt_ts, json_default, node_label, one_line, short_hash, table  # noqa: F401  (re-exported for the commands)


# Control characters a run's data may hold (a model's output, an input): written raw they drive
# the user's terminal (ESC]0;...BEL sets its title, ESC[2J clears it, CR overwrites a line). They
# are shown as \uXXXX, which is also how JSON spells them, so JSON output still parses the same.
_CONTROLS = {c: f"\\u{c:04x}" for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)] if c not in (0x09, 0x0A)}


def terminal_safe(text: str) -> str:
    """`text` with every control character but tab and newline spelled as \\uXXXX."""
    return text.translate(_CONTROLS)


class TerminalSafe:
    """A text stream that writes what it is given through `terminal_safe`."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(terminal_safe(text))

    def __getattr__(self, name: str) -> Any:  # flush, isatty, encoding, fileno
        return getattr(self._stream, name)


def dumps(value: Any, indent: Optional[int] = 2) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False, default=json_default)


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
        self.stream.write("\r\x1b[2K" + text if self.tty else text + "\n")
        self.stream.flush()
        self.shown = True

    def callback(self):
        """An `on_progress(done, total, node)` callback feeding this bar."""
        return lambda done, total, node="": self.update(done, total, str(node))

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


@contextlib.contextmanager
def shown(progress: Optional[Progress]):
    """Close a progress display however the work ends."""
    try:
        yield progress
    finally:
        if progress:
            progress.close()


def progress_for(rw: Any, pipeline: Any, enabled: bool, fallback: int = 1) -> Optional[Progress]:
    """A bar sized to the pipeline's nodes (a name is looked up; unknown: `fallback` steps)."""
    if not enabled:
        return None
    if isinstance(pipeline, str):
        try:
            pipeline = rw.pipeline(pipeline)
        except Exception:  # an unregistered pipeline: the bar is only a guess then
            return Progress(fallback)
    return Progress(len(getattr(pipeline, "actions", {}) or {}) or fallback)


# --- runs --------------------------------------------------------------------------------------

STEP_HEADERS = ("#", "node", "status", "tokens", "saved", "latency", "output", "reason")


def steps_table(run: Any, reason_width: int = 70) -> str:
    rows = []
    for s in run.steps:
        reason = s.error if s.status == "failed" and s.error else s.reason
        rows.append((s.index + 1, node_label(s.node, s.occurrence), s.status, s.tokens,
                     s.tokens_saved or "", fmt_ms(s.latency_ms), short_hash(s.output_hash),
                     cut(reason, reason_width)))
    return table(STEP_HEADERS, rows, right=(0, 3, 4, 5))


def run_headline(run: Any) -> str:
    kind = f"fork of {run.parent_id} at {run.fork_node}" if run.parent_id else f"run of {run.pipeline}"
    return (f"run {run.id}  {run.status}  ({kind}; {len(run.steps)} steps, "
            f"{run.total_tokens} tokens spent, {run.saved if run.steps else run.tokens_saved} saved, "
            f"{fmt_ms(run.latency_ms)})")  # saved: what cached and inherited steps spared (costs)


def print_run(run: Any, out: Any) -> None:
    print(run_headline(run), file=out)
    if run.error:
        print(f"error: {one_line(run.error)}", file=out)
    print("", file=out)
    print(steps_table(run), file=out)


def print_run_details(run: Any, out: Any) -> None:
    """`show`: the headline, where the run came from, its steps."""
    print(run_headline(run), file=out)
    print(f"pipeline: {run.pipeline}   created: {fmt_ts(run.created_at)}", file=out)
    if run.summary:
        print(f"summary:  {cut(run.summary, 100)}", file=out)
    if run.parent_id:
        print(f"parent:   {run.parent_id} (forked at "
              f"{node_label(run.fork_node, run.fork_occurrence)})", file=out)
    for label, value in (("edit", run.edit), ("params", run.params)):
        if value:
            print(f"{label + ':':<9} {cut(json.dumps(value, default=repr), 100)}", file=out)
    if run.error:
        print(f"error:    {one_line(run.error)}", file=out)
    print("", file=out)
    print(steps_table(run), file=out)


def print_outputs(run: Any, out: Any, limit: int) -> None:
    """Each step's output values; `limit` characters each (0: all)."""
    for s in run.steps:
        print(f"\n== {s.node}#{s.occurrence} ({s.status})", file=out)
        try:
            outputs = s.outputs
        except Exception as e:  # a purged blob: say so and go on with the next step
            print(f"   (values unavailable: {one_line(e)})", file=out)
            continue
        for k, v in outputs.items():
            print(f"-- {k}", file=out)
            text = v if isinstance(v, str) else dumps(v)
            if limit and len(text) > limit:
                text = text[:limit] + f"\n… ({len(text) - limit} more characters; --full shows all)"
            print(text, file=out)


RUN_FIELDS = ("id", "pipeline", "status", "parent_id", "fork_node", "fork_occurrence",
              "total_tokens", "tokens_saved", "latency_ms", "created_at", "finished_at", "summary",
              "error", "edit", "params", "allow_side_effects")


def run_to_json(run: Any) -> dict:
    d = {name: getattr(run, name) for name in RUN_FIELDS}
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
