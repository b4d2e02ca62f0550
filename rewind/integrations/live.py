"""Writing runs to Burr's UI and to OpenTelemetry while they record.

`Rewind(url, burr_tracking=DIR, burr_project=P, otel=True|ENDPOINT)` (or the environment:
`REWIND_BURR_TRACKING=DIR`, `REWIND_BURR_PROJECT=P`, `REWIND_OTEL=1` with
`OTEL_EXPORTER_OTLP_ENDPOINT`) holds a `LiveSinks`. The handle passes every run, fork and resume
through it: `wrap(rw, on_step)` is the per-step callback handed to the engine (each committed
step goes to every sink, then to the caller's own callback), and `finished(rw, run)` is called
with the finished run. A sink that fails logs a warning; it never fails the run.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Optional

logger = logging.getLogger("rewind")


def _on(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


class LiveSinks:
    def __init__(self, sinks: Optional[list] = None):
        self.sinks = list(sinks or [])

    @classmethod
    def from_options(cls, burr_tracking: Optional[str] = None, burr_project: Optional[str] = None,
                     otel: Any = None, env: Optional[dict] = None) -> "LiveSinks":
        """The sinks the options (else the environment) ask for; none costs nothing."""
        env = os.environ if env is None else env
        sinks: list = []
        directory = burr_tracking or env.get("REWIND_BURR_TRACKING")
        if directory:
            from .burr_tracking import DEFAULT_PROJECT, BurrTracking

            sinks.append(BurrTracking(directory, burr_project or env.get("REWIND_BURR_PROJECT")
                                      or DEFAULT_PROJECT))
        if otel is None:
            otel = _on(env.get("REWIND_OTEL"))
        if otel:
            from .otel import OtelExporter

            sinks.append(OtelExporter(otel if isinstance(otel, str) else None))
        return cls(sinks)

    def __bool__(self) -> bool:
        return bool(self.sinks)

    def wrap(self, rw: Any, on_step: Optional[Callable] = None) -> Optional[Callable]:
        """The on_step callback to give the engine: the sinks first, then the caller's."""
        if not self.sinks:
            return on_step

        def each_step(step: Any) -> None:
            for sink in self.sinks:
                try:
                    sink.on_step(rw, step)
                except Exception as e:  # a viewer's copy must never break the run
                    logger.warning("%s could not record step %s of run %s: %s",
                                   type(sink).__name__, step.node, step.run_id, e)
            if on_step is not None:
                on_step(step)

        return each_step

    def finished(self, rw: Any, run: Any) -> Any:
        """Tell every sink the run finished; returns the run."""
        for sink in self.sinks:
            try:
                sink.on_run_finished(rw, run)
            except Exception as e:
                logger.warning("%s could not record run %s: %s", type(sink).__name__, run.id, e)
        return run

    def close(self) -> None:
        for sink in self.sinks:
            shutdown = getattr(sink, "shutdown", None)
            if shutdown is not None:
                try:
                    shutdown()
                except Exception:  # closing a handle must not raise over a telemetry hiccup
                    logger.debug("sink shutdown failed", exc_info=True)
