"""The predictor's measured reading for `trace_adaptive` (ours, issue 58): Beta moments of a prompt's success around
its estimate, the beta-binomial likelihood of root outcomes, and the calibration fitted to them with its ranking test.

A prompt's true success is modelled as ``u ~ Beta(kappa mu, kappa (1 - mu))`` around the recalibrated estimate
``mu = sigmoid(alpha + beta logit v)`` (Platt scaling); (alpha, beta, kappa) maximise the beta-binomial likelihood of
the root outcomes the estimates met (`fit_calibration`), and the likelihood-ratio statistic against beta = 0 says
whether the estimates rank prompts at all (`Calibration.ranks`). docs/allocation.md, "trace_adaptive".

Pure numpy; `trace_rl.allocation.adaptive` allocates with it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.validation import FloatArray, as_probability_vector

__all__ = [
    "ALPHA_GRID",
    "BETA_GRID",
    "KAPPA_GRID",
    "PRIOR_CONCENTRATION",
    "RANKING_CRITICAL",
    "Calibration",
    "beta_binomial_loglik",
    "contrastive_value",
    "expected_mixed_probability",
    "expected_power",
    "fit_calibration",
    "fit_concentration",
]

PRIOR_CONCENTRATION = 4.0
"""kappa before enough outcomes are seen: a Beta of prior sample size 4 around the estimate (unsure, not flat)."""
KAPPA_GRID = (*tuple(float(x) for x in np.geomspace(0.25, 1024.0, 49)), math.inf)
"""Candidate concentrations of the maximum-likelihood fit (log grid; inf = the estimate is the truth)."""
RANKING_CRITICAL = 2.706
"""`Calibration.ranks` threshold on the likelihood-ratio statistic for beta > 0 against beta = 0: the 5% point of
the null distribution ``1/2 chi2_0 + 1/2 chi2_1`` (beta is constrained to >= 0, a boundary; Self and Liang 1987)."""


def expected_power(a: npt.ArrayLike, b: npt.ArrayLike, m: int) -> FloatArray:
    """E[v^m] for v ~ Beta(a, b): ``prod_{j=0}^{m-1} (a + j) / (a + b + j)`` (the Beta function ratio
    B(a + m, b) / B(a, b) for integer m). ``a`` or ``b`` infinite is not allowed; use `expected_mixed_probability`
    with ``concentration=inf`` for a point mass.

    Args:
        a, b: float arrays (broadcast) > 0. m: integer >= 0.

    Returns:
        float64 array of the broadcast shape, in [0, 1].

    Raises:
        ValueError: m < 0, or a or b not finite and > 0.
    """
    aa = np.asarray(a, dtype=np.float64)
    bb = np.asarray(b, dtype=np.float64)
    if m < 0:
        raise ValueError(f"m must be >= 0, got {m}")
    if not (np.all(np.isfinite(aa)) and np.all(np.isfinite(bb)) and np.all(aa > 0) and np.all(bb > 0)):
        raise ValueError("Beta parameters a and b must be finite and > 0")
    out = np.ones(np.broadcast(aa, bb).shape, dtype=np.float64)
    for j in range(m):
        out = out * (aa + j) / (aa + bb + j)
    return out


def _beta_params(v: FloatArray, concentration: float) -> tuple[FloatArray, FloatArray]:
    return concentration * v, concentration * (1.0 - v)


def expected_mixed_probability(v: npt.ArrayLike, m: int, concentration: float) -> FloatArray:
    """E[1 - u^m - (1 - u)^m] for u ~ Beta(kappa v, kappa (1 - v)), kappa = ``concentration`` (inf: u = v, the
    paper's ``mixed_probability``); 0 for m < 2.

    Raises:
        ValueError: v outside [0, 1] or NaN, m < 0, concentration not > 0.
    """
    probs = as_probability_vector(np.atleast_1d(np.asarray(v, dtype=np.float64)).ravel(), "v")
    if not concentration > 0:
        raise ValueError(f"concentration must be > 0 (inf allowed), got {concentration}")
    if m < 0:
        raise ValueError(f"m must be >= 0, got {m}")
    if m < 2:
        return np.zeros(probs.shape, dtype=np.float64)
    if math.isinf(concentration):
        return np.asarray(1.0 - probs**m - (1.0 - probs) ** m, dtype=np.float64)
    # a point at v = 0 or 1 is decided whatever kappa is; keep the Beta proper elsewhere
    inner = np.clip(probs, 1e-12, 1 - 1e-12)
    a, b = _beta_params(inner, concentration)
    out = 1.0 - expected_power(a, b, m) - expected_power(b, a, m)
    out[(probs <= 0.0) | (probs >= 1.0)] = 0.0
    return np.clip(out, 0.0, 1.0)


def contrastive_value(
    v: npt.ArrayLike, cap: int, concentration: float, *, normalize_std: bool = True
) -> FloatArray:
    """The root value table of `trace_adaptive`: ``table[i, m]`` = expected squared-advantage mass of m root
    rollouts of prompt i under its estimator, m = 0..cap (module docstring, item 1):

    - ``normalize_std=True`` (GRPO): ``(m - 1) E[P_mix(u, m)]``, since a mixed group of m has sum A^2 = m - 1;
    - ``normalize_std=False`` (Dr. GRPO): ``(m - 1) E[u (1 - u)]``, E[u (1 - u)] = v (1 - v) kappa / (kappa + 1).

    u ~ Beta(kappa v, kappa (1 - v)) as in `expected_mixed_probability`; entries with m < 2 are 0.

    Args:
        v: float (P,) estimates in [0, 1]. cap: largest m (>= 0). concentration: kappa > 0 (inf allowed).

    Returns:
        float64 (P, cap + 1).

    Raises:
        ValueError: bad v, cap < 0 or concentration not > 0.
    """
    probs = as_probability_vector(v, "v")
    if cap < 0:
        raise ValueError(f"cap must be >= 0, got {cap}")
    if not concentration > 0:
        raise ValueError(f"concentration must be > 0 (inf allowed), got {concentration}")
    table = np.zeros((probs.shape[0], cap + 1), dtype=np.float64)
    if normalize_std:
        for m in range(2, cap + 1):
            table[:, m] = (m - 1) * expected_mixed_probability(probs, m, concentration)
        return table
    shrink = 1.0 if math.isinf(concentration) else concentration / (concentration + 1.0)
    spread = probs * (1.0 - probs) * shrink
    for m in range(2, cap + 1):
        table[:, m] = (m - 1) * spread
    return table


def beta_binomial_loglik(
    v: npt.ArrayLike, successes: npt.ArrayLike, trials: npt.ArrayLike, concentration: float
) -> float:
    """Log-likelihood of k_i successes in m_i trials when u_i ~ Beta(kappa v_i, kappa (1 - v_i)), summed over i
    (beta-binomial; kappa = inf: binomial with p = v_i). The binomial coefficients are left out (constant in
    kappa). For integer k, m: ``sum_{j<k} log(a+j) + sum_{j<m-k} log(b+j) - sum_{j<m} log(a+b+j)``.

    Raises:
        ValueError: shapes differ, k outside [0, m], or concentration not > 0.
    """
    p, k, n = _outcomes(v, successes, trials)
    if not concentration > 0:
        raise ValueError(f"concentration must be > 0 (inf allowed), got {concentration}")
    return float(_loglik_grid(p, k, n, (concentration,))[0])


def _outcomes(
    v: npt.ArrayLike, successes: npt.ArrayLike, trials: npt.ArrayLike
) -> tuple[FloatArray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(v, k, m) as arrays of one shape, v in [0, 1] and 0 <= k <= m; ValueError otherwise."""
    p = as_probability_vector(v, "v")
    k = np.asarray(successes, dtype=np.int64)
    n = np.asarray(trials, dtype=np.int64)
    if k.shape != p.shape or n.shape != p.shape:
        raise ValueError("v, successes and trials must have one shape")
    if np.any(k < 0) or np.any(k > n):
        raise ValueError("successes must lie in [0, trials]")
    return p, k, n


@dataclass(frozen=True)
class Calibration:
    """The predictor's measured reading: ``mean(v) = sigmoid(alpha + beta logit(v))`` (Platt scaling) and the
    concentration kappa of the true success around that mean. The identity (alpha 0, beta 1) with kappa = inf
    takes the estimates as the truth (the paper)."""

    alpha: float = 0.0
    beta: float = 1.0
    kappa: float = PRIOR_CONCENTRATION
    ranking_lr: float = 0.0
    """Likelihood-ratio statistic of the fit against the same fit with beta = 0 (the estimates carry no ranking):
    ``2 (max loglik - max loglik at beta = 0)``; 0 when nothing was fitted."""

    @property
    def ranks(self) -> bool:
        """Whether the outcomes show that the estimates rank prompts: ``ranking_lr >= RANKING_CRITICAL``."""
        return self.ranking_lr >= RANKING_CRITICAL

    def mean(self, v: npt.ArrayLike) -> FloatArray:
        """The calibrated success estimate of each v, float64 of v's shape, in (0, 1)."""
        p = np.clip(np.asarray(v, dtype=np.float64), 1e-6, 1 - 1e-6)
        z = self.alpha + self.beta * np.log(p / (1 - p))
        return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)


ALPHA_GRID = tuple(float(x) for x in np.linspace(-3.0, 3.0, 25))
"""Platt intercepts of `fit_calibration`."""
BETA_GRID = tuple(float(x) for x in np.linspace(0.0, 4.0, 17))
"""Platt slopes of `fit_calibration` (0: the estimates carry no ranking; 1: as given; > 1: under-confident)."""


def fit_calibration(
    v: npt.ArrayLike,
    successes: npt.ArrayLike,
    trials: npt.ArrayLike,
    *,
    alphas: tuple[float, ...] = ALPHA_GRID,
    betas: tuple[float, ...] = BETA_GRID,
    kappas: tuple[float, ...] = KAPPA_GRID,
) -> Calibration:
    """Maximum-likelihood `Calibration` of the beta-binomial outcomes: k_i successes of m_i trials with
    u_i ~ Beta(kappa mu_i, kappa (1 - mu_i)), mu_i = sigmoid(alpha + beta logit v_i), over the product grid
    (ties to the earlier grid point: smaller alpha, beta, kappa; no prompt with 2 trials: the identity with
    `PRIOR_CONCENTRATION`). A predictor that ranks but is under-confident
    gets beta > 1 and a large kappa; one that ranks nothing gets beta near 0 (every prompt at the base rate) and
    a kappa that measures how much the prompts differ. Prompts with fewer than 2 trials are left out.

    Raises:
        ValueError: as `beta_binomial_loglik`, or an empty grid.
    """
    if not (alphas and betas and kappas):
        raise ValueError("every grid must hold at least one value")
    best = (-math.inf, Calibration(0.0, 1.0, PRIOR_CONCENTRATION))
    p, k, n = _outcomes(v, successes, trials)
    keep = n >= 2
    p, k, n = p[keep], k[keep], n[keep]
    if p.size == 0:  # nothing says anything about the predictor: the prior reading
        return best[1]
    null = -math.inf  # the best fit with beta = 0: every prompt at the base rate sigmoid(alpha)
    for a in alphas:
        for b in betas:
            mu = Calibration(a, b).mean(p)
            scores = _loglik_grid(mu, k, n, kappas)
            i = int(np.argmax(scores))
            if b == 0.0:
                null = max(null, float(scores[i]))
            if scores[i] > best[0] + 1e-9:
                best = (float(scores[i]), Calibration(a, b, float(kappas[i])))
    if math.isinf(null):  # a grid without beta = 0: the statistic is taken against the constant base rate
        null = max(float(_loglik_grid(Calibration(a, 0.0).mean(p), k, n, kappas).max()) for a in alphas)
    return dataclasses.replace(best[1], ranking_lr=max(0.0, 2.0 * (best[0] - null)))


def _loglik_grid(
    mu: FloatArray, k: npt.NDArray[np.int64], n: npt.NDArray[np.int64], kappas: tuple[float, ...]
) -> FloatArray:
    """`beta_binomial_loglik` of every kappa in ``kappas`` at once (broadcast over kappa, prompt, trial): float64
    (len(kappas),)."""
    p = np.clip(mu, 1e-6, 1 - 1e-6)
    grid = np.asarray(kappas, dtype=np.float64)
    out = np.empty(grid.shape[0], dtype=np.float64)
    finite = np.isfinite(grid)
    out[~finite] = float(np.sum(k * np.log(p) + (n - k) * np.log1p(-p)))
    c = grid[finite][:, None, None]  # (K, 1, 1)
    a, b = c * p[None, :, None], c * (1.0 - p)[None, :, None]  # (K, P, 1)
    j = np.arange(int(n.max()) if n.size else 0, dtype=np.float64)[None, None, :]  # (1, 1, max m)
    terms = (
        np.where(j < k[None, :, None], np.log(a + j), 0.0)
        + np.where(j < (n - k)[None, :, None], np.log(b + j), 0.0)
        - np.where(j < n[None, :, None], np.log(c + j), 0.0)
    )
    out[finite] = terms.sum(axis=(1, 2))
    return out


def fit_concentration(
    v: npt.ArrayLike,
    successes: npt.ArrayLike,
    trials: npt.ArrayLike,
    *,
    grid: tuple[float, ...] = KAPPA_GRID,
) -> float:
    """Maximum-likelihood kappa of `beta_binomial_loglik` over ``grid`` (ties to the smaller kappa: the less
    confident reading). Prompts with fewer than 2 trials carry no information about kappa and are left out.

    Returns:
        kappa (inf when the binomial with p = v explains the outcomes best).

    Raises:
        ValueError: as `beta_binomial_loglik`, or an empty grid.
    """
    if not grid:
        raise ValueError("grid must hold at least one concentration")
    p, k, n = _outcomes(v, successes, trials)
    keep = n >= 2
    scores = _loglik_grid(p[keep], k[keep], n[keep], grid)
    best = float(scores.max())
    return float(grid[int(np.flatnonzero(scores >= best - 1e-9)[0])])
