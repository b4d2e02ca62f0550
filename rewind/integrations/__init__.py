"""Meeting users where their runs already are: Burr's UI, Burr-tracked runs, OpenTelemetry.

    burr_tracking  Rewind runs and forks written in Burr's tracker layout (Burr's UI shows them)
    burr_import    runs recorded by plain Burr's LocalTrackingClient turned into Rewind runs
    otel           spans per run, step, model call and tool call over OTLP/HTTP (GenAI conventions)
    live           the per-step and per-run callbacks `Rewind(..., burr_tracking=, otel=)` calls

Each needs an optional extra (`pip install 'rewind[burr-ui]'`, `'rewind[otel]'`); nothing here is
imported by `rewind` itself until asked for.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "export_burr": "burr_tracking", "BurrTracking": "burr_tracking",
    "import_burr": "burr_import", "ImportReport": "burr_import",
    "export_otel": "otel", "OtelExporter": "otel",
    "LiveSinks": "live",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rewind.integrations' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
