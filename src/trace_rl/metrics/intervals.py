"""The one 95 % confidence interval of a mean every part of trace-rl uses (numpy only).

    mean_ci(values)      -> Interval(mean, low, high, n)   mean +- t_{0.975, n-1} s / sqrt(n)
    t_quantile_975(df)   -> the two-sided 95 % quantile of Student's t (standard table; 1.96 beyond df 30)
    stratified_bootstrap_ci(values, strata)
                         -> Interval(mean, low, high, n)   percentile interval of the mean, resampling within
                                                           each stratum (rliable's StratifiedBootstrap)

`trace_rl.metrics.summary.t_interval` (the report's (mean, half-width) over seeds, which skips missing values)
and `trace_rl.lab.stats` (the lab's claims) are views of these, not copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30 (standard tables); 1.96 beyond.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (normal 1.96 for df > 30).

    Raises:
        ValueError: df < 1.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1; got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% confidence interval [low, high] over n independent values."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def above_zero(self) -> bool:
        return self.low > 0.0

    @property
    def half_width(self) -> float:
        """high - mean (0 for a single value)."""
        return self.high - self.mean

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "ci_low": self.low, "ci_high": self.high, "n": float(self.n)}

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def mean_ci(values: npt.ArrayLike, *, normal: bool = False) -> Interval:
    """Mean and 95% CI: mean +- t_{0.975, n-1} * s / sqrt(n) (s: sample std, ddof 1); `normal` uses 1.96.

    With n = 1 (or zero spread) the interval collapses to the mean.

    Raises:
        ValueError: no values, or a NaN among them.
    """
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("mean_ci needs at least one value")
    if np.isnan(x).any():
        raise ValueError("mean_ci got NaN values")
    m = float(x.mean())
    if x.size == 1:
        return Interval(m, m, m, 1)
    q = 1.96 if normal else t_quantile_975(x.size - 1)
    half = q * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Interval(m, m - half, m + half, int(x.size))


def stratified_bootstrap_ci(
    values: npt.ArrayLike,
    strata: npt.ArrayLike | None = None,
    *,
    reps: int = 10_000,
    seed: int = 0,
) -> Interval:
    """Mean and its 95% percentile-bootstrap interval, resampling with replacement within each stratum.

    The stratified bootstrap of rliable (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice",
    ``StratifiedBootstrap``): each of ``reps`` replicates draws, inside every stratum, as many values as that
    stratum holds (with replacement) and takes the mean over all of them; the interval is the 2.5th and 97.5th
    percentile of the replicate means. Strata are, e.g., environments: values of different strata are never
    exchanged, so a replicate keeps each environment's share. With one stratum (``strata`` None) it is the
    ordinary bootstrap over the values (e.g. per-seed paired differences). It does not widen for few values as
    the t-interval does: with 5-6 seeds it tends to be narrower, so read it next to `mean_ci`, not instead.

    Args:
        values: (n,) finite numbers (e.g. per-seed differences against the baseline).
        strata: (n,) labels (any hashable values), or None for one stratum.
        reps: bootstrap replicates (>= 1); seed: the generator's seed (the interval is deterministic).

    Raises:
        ValueError: no values, a NaN among them, strata of another length, or reps < 1.
    """
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("stratified_bootstrap_ci needs at least one value")
    if np.isnan(x).any():
        raise ValueError("stratified_bootstrap_ci got NaN values")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    labels = np.zeros(x.size, dtype=np.int64) if strata is None else np.asarray(strata).reshape(-1)
    if labels.size != x.size:
        raise ValueError(f"strata has {labels.size} labels for {x.size} values")
    m = float(x.mean())
    if x.size == 1:
        return Interval(m, m, m, 1)
    rng = np.random.default_rng(seed)
    sums = np.zeros(reps)
    for label in np.unique(labels):
        group = x[labels == label]
        picks = rng.integers(group.size, size=(reps, group.size))
        sums += group[picks].sum(axis=1)
    means = sums / x.size
    low, high = np.percentile(means, [2.5, 97.5])
    return Interval(m, float(low), float(high), int(x.size))
