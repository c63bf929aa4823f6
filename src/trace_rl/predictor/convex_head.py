"""The convex predictor's numerical fits: the binomial logistic head on counts, its linear scores, and the
beta-binomial prior strength kappa of the history posterior (numpy and scipy only; see docs/predictor.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
#: Grid of Beta prior strengths searched when fitting kappa (log-spaced, 0.1 .. 1000).
KAPPA_GRID = np.logspace(-1, 3, 41)


def fit_prior_strength(
    prior: npt.ArrayLike, successes: npt.ArrayLike, trials: npt.ArrayLike, grid: npt.ArrayLike = KAPPA_GRID
) -> float:
    """Maximum beta-binomial likelihood prior strength kappa over a grid.

    ``log L(kappa) = sum_i log B(s_i + kappa p_i, n_i - s_i + kappa (1 - p_i)) - log B(kappa p_i, kappa (1 - p_i))``
    (the binomial coefficient does not depend on kappa). Only texts with n_i >= 2 carry information about kappa
    (one Bernoulli trial identifies the mean only); fractional counts (averaged targets) are allowed.

    Returns:
        The grid value with the largest likelihood (the largest grid value when no text has n >= 2).
    """
    from scipy.special import betaln

    p = np.clip(np.asarray(prior, dtype=np.float64), 1e-4, 1 - 1e-4)
    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    keep = n >= 2
    kappas = np.asarray(grid, dtype=np.float64)
    if not keep.any():
        return float(kappas[-1])
    p, s, n = p[keep], s[keep], n[keep]
    a = kappas[:, None] * p[None, :]
    b = kappas[:, None] * (1 - p[None, :])
    ll = (betaln(s[None, :] + a, (n - s)[None, :] + b) - betaln(a, b)).sum(axis=1)
    return float(kappas[int(np.argmax(ll))])


def fit_binomial_logistic(
    x: Any,
    successes: FloatArray,
    trials: FloatArray,
    c: float,
    *,
    init: tuple[FloatArray, float] | None = None,
    max_iter: int = 200,
) -> tuple[FloatArray, float]:
    """L2-regularised binomial logistic regression on counts (convex; scipy L-BFGS-B, one row per text).

    Minimises  c * sum_i [n_i log(1 + e^{z_i}) - s_i z_i] + ||beta||^2 / 2,  z = x beta + b0 (intercept not
    penalised): the objective of scikit-learn's ``LogisticRegression(C=c)`` on rows duplicated as s_i
    successes and n_i - s_i failures, at half the cost (no duplicated rows).

    Three things keep a refit cheap without changing its optimum (docs/benchmarks.md: 3.2x less CPU for
    ``ngram+minilm``): a column without a stored entry has gradient ``beta_j`` only, so its exact optimum is 0 and
    L-BFGS-B runs on the other columns (hashed n-gram counts use a few thousand of their 16,384 columns); ``x`` may
    come as column blocks, each multiplied in its own format (sparse n-gram counts, a dense embedding: a dense block
    stored as sparse costs about 10x per product); and the search runs in centred, Jacobi-scaled coordinates (an
    exact change of variables, see the code), where a capped number of iterations lands about 10x closer to the
    optimum.

    Args:
        x: (N, F) features: a scipy sparse matrix, a dense array, or a tuple of such blocks (N, F_k) side by side
            (F = sum F_k, columns in block order). successes, trials: (N,) weighted counts, 0 <= s <= n.
        c: inverse regularisation strength (> 0). init: (beta (F,), b0) to start from (warm start).

    Returns:
        (beta float64 (F,), b0); 0 in every column without a stored entry.
    """
    from scipy import sparse
    from scipy.optimize import minimize

    blocks: list[Any] = []  # (global column ids, x restricted to them, its transpose, row-major)
    offset = 0
    for block in x if isinstance(x, tuple) else (x,):
        if sparse.issparse(block):
            xb = sparse.csr_matrix(block, dtype=np.float64)
            cols = np.flatnonzero(xb.getnnz(axis=0))
            xa = xb[:, cols]
            xat = xa.T.tocsr()
        else:
            arr = np.asarray(block, dtype=np.float64)
            cols = np.flatnonzero(np.any(arr != 0, axis=0))
            xa = np.ascontiguousarray(arr[:, cols])
            xat = np.ascontiguousarray(xa.T)
        blocks.append((offset + cols, xa, xat))
        offset += block.shape[1]
    active = np.concatenate([b[0] for b in blocks])
    bounds = np.cumsum([0] + [len(b[0]) for b in blocks])
    n_total = max(float(np.sum(trials)), 1e-12)
    # the same objective divided by c * sum(n) (same optimum, gradients of order 1: the scaling scikit-learn uses)
    scale = 1.0 / n_total
    ridge = scale / c
    # An exact change of variables that L-BFGS-B converges in far fewer iterations on (a dense embedding's columns
    # are correlated with the intercept and scaled unlike n-gram counts): columns centred at their trial-weighted
    # mean mu (x beta + b0 = (x - mu) beta + b0', b0' = b0 + mu . beta; the intercept is not penalised, so the
    # optimum is unchanged), and beta = d * gamma with d the inverse square root of the Hessian's diagonal at
    # p = 1/2 (Jacobi; the penalty stays ||beta||^2 / 2, so the optimum in beta is unchanged too).
    mu = np.concatenate([np.asarray(xat @ trials).ravel() / n_total for _, _, xat in blocks])
    sq = np.concatenate(
        [
            np.asarray((xat.multiply(xat) if sparse.issparse(xat) else xat * xat) @ trials).ravel()
            for _, _, xat in blocks
        ]
    )
    d = 1.0 / np.sqrt(0.25 * scale * np.maximum(sq - n_total * mu**2, 0.0) + ridge)
    if init is None:
        start = np.zeros(len(active) + 1)
    else:
        beta0 = init[0][active]
        start = np.r_[beta0 / d, init[1] + float(mu @ beta0)]

    def objective(theta: FloatArray) -> tuple[float, FloatArray]:
        beta, b0 = d * theta[:-1], theta[-1] - float(mu @ (d * theta[:-1]))
        z = np.full(len(trials), b0)
        for (_, xa, _), lo, hi in zip(blocks, bounds[:-1], bounds[1:], strict=True):
            z += np.asarray(xa @ beta[lo:hi]).ravel()
        loss = float(np.sum(trials * np.logaddexp(0.0, z) - successes * z))
        resid = trials / (1.0 + np.exp(-z)) - successes  # d loss / d z
        total = float(resid.sum())
        grad = np.empty_like(theta)
        for (_, _, xat), lo, hi in zip(blocks, bounds[:-1], bounds[1:], strict=True):
            grad[lo:hi] = np.asarray(xat @ resid).ravel()
        grad[:-1] = d * (scale * (grad[:-1] - mu * total) + ridge * beta)
        grad[-1] = scale * total
        return scale * loss + 0.5 * ridge * float(beta @ beta), grad

    result = minimize(
        objective, start, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "gtol": 1e-4}
    )
    theta = np.asarray(result.x, dtype=np.float64)
    beta = np.zeros(offset)
    beta[active] = d * theta[:-1]
    return beta, float(theta[-1] - beta[active] @ mu)


def linear_scores(x: Any, beta: FloatArray) -> FloatArray:
    """``x @ beta`` for features as :func:`fit_binomial_logistic` takes them (a matrix or a tuple of column
    blocks), float64 (N,).

    Raises:
        ValueError: the blocks' columns do not add up to ``len(beta)``.
    """
    blocks = x if isinstance(x, tuple) else (x,)
    width = sum(block.shape[1] for block in blocks)
    if not blocks or width != len(beta):
        raise ValueError(f"features have {width} columns, beta has {len(beta)}")
    out = np.zeros(blocks[0].shape[0])
    lo = 0
    for block in blocks:
        out += np.asarray(block @ beta[lo : lo + block.shape[1]], dtype=np.float64).ravel()
        lo += block.shape[1]
    return out
