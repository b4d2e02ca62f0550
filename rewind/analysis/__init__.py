"""Comparing and judging runs: the trajectory diff, the determinism audit, the noise band."""

from .audit import audit_run
from .diff import diff_runs
from .noise import apply_noise_band

__all__ = ["audit_run", "diff_runs", "apply_noise_band"]
