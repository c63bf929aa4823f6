"""Confidence intervals for the lab's claims: `trace_rl.metrics.intervals` (the project's one implementation)."""

from __future__ import annotations

from trace_rl.metrics.intervals import Interval, mean_ci, t_quantile_975

__all__ = ["Interval", "mean_ci", "t_quantile_975"]
