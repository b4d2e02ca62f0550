"""Pipelines that ship with Rewind.

`rewind.pipelines.research.pipeline` is the demo: a research assistant over Python's own
language reference (plan → research → analyse → critique → revise → compose → verify →
publish), fully offline. Importing it registers it for every `Rewind` handle in the process.
"""

from __future__ import annotations

BUILTIN_SPECS = ("rewind.pipelines.research:pipeline",)

__all__ = ["BUILTIN_SPECS", "builtin_pipelines", "research_pipeline"]


def research_pipeline():
    """The demo research pipeline (imported on first use, registered process-wide)."""
    from .research import pipeline

    return pipeline


def builtin_pipelines() -> list:
    """Every pipeline that ships with Rewind, registered process-wide."""
    return [research_pipeline()]
