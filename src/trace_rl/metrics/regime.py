"""Which regime a task is in, read from the warm start's RL-pool probe before any comparison is paid for (issue 58).

TRACE's selection pays where many groups would be unanimous and the predictor can tell which (the demo: most
prompts decided, prompt-level Spearman 0.65, TRACE +0.020 over GRPO); it cost accuracy where groups are mostly
mixed already and the predictor hardly ranks (`agentic`: Spearman 0.21, every selecting method behind GRPO).
Both numbers can be measured on the probe the warm start already runs (P prompts x n samples,
``probe_outcomes.json``):

- `unanimous_share(rewards, g)`: the expected share of groups of g rollouts whose rewards all agree, estimated
  without bias from each prompt's n >= g samples (drawing g of them without replacement:
  ``[C(k, g) + C(n - k, g)] / C(n, g)`` for k successes of n);
- the predictor's out-of-fold ranking and its concentration (`trace_rl.allocation.adaptive.fit_concentration`),
  computed by ``trace-rl regime`` (`trace_rl.cli.regime`), which trains the predictor on the other folds.

Pure numpy; binary rewards (a reward >= 1/2 counts as a success).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import numpy as np

__all__ = ["SELECTION_SPEARMAN", "SELECTION_UNANIMOUS", "regime_verdict", "unanimous_share"]

SELECTION_UNANIMOUS = 0.5
"""Unanimous share of groups of the preset's size above which selection has groups to save (demo: most)."""
SELECTION_SPEARMAN = 0.4
"""Out-of-fold prompt-level Spearman above which the predictor ranks well enough to select (demo 0.65, agentic
0.21)."""


def unanimous_share(rewards: Sequence[Sequence[float]], g: int) -> float:
    """Expected share of groups of ``g`` rollouts that are unanimous (all succeed or all fail), averaged over the
    prompts that have at least ``g`` samples; unbiased for each prompt (hypergeometric draw of g of its n samples).

    Args:
        rewards: per prompt, its probe rewards (n_i values).
        g: group size >= 2.

    Returns:
        the share in [0, 1]; NaN when no prompt has g samples.

    Raises:
        ValueError: g < 2.
    """
    if g < 2:
        raise ValueError(f"a group has at least 2 rollouts, got g={g}")
    shares = []
    for r in rewards:
        n = len(r)
        if n < g:
            continue
        k = int(np.sum(np.asarray(r, dtype=np.float64) >= 0.5))
        shares.append((comb(k, g) + comb(n - k, g)) / comb(n, g))
    return float(np.mean(shares)) if shares else float("nan")


def regime_verdict(unanimous: float, spearman: float) -> str:
    """One line naming the regime from the probe's unanimous share (at the run's group size) and the predictor's
    out-of-fold Spearman, with the thresholds `SELECTION_UNANIMOUS` and `SELECTION_SPEARMAN` (set from the two
    measured presets: a rule of thumb, not a guarantee)."""
    many = unanimous >= SELECTION_UNANIMOUS
    ranks = spearman >= SELECTION_SPEARMAN
    if many and ranks:
        return (
            "selection regime (like the demo): many groups would be unanimous and the predictor ranks them; "
            "trace and trace_adaptive have groups to save"
        )
    if not many and not ranks:
        return (
            "GRPO regime (like agentic): most groups are mixed already and the predictor hardly ranks prompts; "
            "selection changes the data more than the signal: prefer grpo with larger groups or trace_adaptive"
        )
    if many:
        return (
            "groups to save but a weak ranking: selection has little to act on; trace_adaptive flattens toward "
            "uniform allocation, trace would select on noise"
        )
    return (
        "a predictor that ranks but few unanimous groups: selection has little to save; gains will be small"
    )
