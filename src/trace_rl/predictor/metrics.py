"""Pure numpy metrics of a success predictor: error, rank correlation, calibration, error by prefix depth.

Conventions: ``pred`` are predicted success probabilities, ``target`` the observed success rates (for a tree
node, the mean reward of the leaves below it, the paper's bottom-up target), both in [0, 1] and of shape (n,).
Optional ``weights`` (n,) are non-negative with a positive sum (for example the number of leaves under each
node). Every function raises ValueError with a plain message on malformed input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _vector(x: npt.ArrayLike, name: str) -> FloatArray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-d array; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinity")
    return arr


def _probabilities(x: npt.ArrayLike, name: str) -> FloatArray:
    arr = _vector(x, name)
    if ((arr < 0.0) | (arr > 1.0)).any():
        raise ValueError(f"{name} must lie in [0, 1]; got {arr[(arr < 0.0) | (arr > 1.0)][0]!r}")
    return arr


def _pair(pred: npt.ArrayLike, target: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    p = _probabilities(pred, "pred")
    t = _probabilities(target, "target")
    if p.shape != t.shape:
        raise ValueError(f"pred and target must have the same length; got {p.shape[0]} and {t.shape[0]}")
    return p, t


def _weights(weights: npt.ArrayLike | None, n: int) -> FloatArray:
    if weights is None:
        return np.ones(n, dtype=np.float64)
    w = _vector(weights, "weights")
    if w.shape[0] != n:
        raise ValueError(f"weights must have length {n}; got {w.shape[0]}")
    if (w < 0.0).any():
        raise ValueError("weights must be non-negative")
    if n and not w.sum() > 0.0:
        raise ValueError("weights must have a positive sum")
    return w


def mse(pred: npt.ArrayLike, target: npt.ArrayLike, weights: npt.ArrayLike | None = None) -> float:
    """Weighted mean squared error  sum_i w_i (p_i - t_i)^2 / sum_i w_i  (the predictor's training loss).

    Returns NaN for empty input. Raises ValueError on malformed input.
    """
    p, t = _pair(pred, target)
    w = _weights(weights, p.shape[0])
    if p.shape[0] == 0:
        return float("nan")
    return float(np.sum(w * (p - t) ** 2) / np.sum(w))


def rankdata(x: npt.ArrayLike) -> FloatArray:
    """Ranks 1..n of a 1-d array, ties sharing their average rank (scipy.stats.rankdata 'average')."""
    a = _vector(x, "x")
    n = a.shape[0]
    order = np.argsort(a, kind="mergesort")
    sorted_a = a[order]
    # Boundaries of runs of equal values in sorted order.
    new_run = np.concatenate([[True], sorted_a[1:] != sorted_a[:-1]]) if n else np.zeros(0, dtype=bool)
    run_id = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    ends = np.concatenate([starts[1:], [n]]) if n else starts
    avg_rank = (starts + ends + 1) / 2.0  # mean of ranks start+1 .. end
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = avg_rank[run_id]
    return ranks


def spearman(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Spearman rank correlation: the Pearson correlation of the average ranks of ``x`` and ``y``.

    Returns NaN when fewer than 2 values are given or either input is constant (the correlation is undefined).
    Raises ValueError when the inputs are not finite 1-d arrays of equal length.
    """
    a = _vector(x, "x")
    b = _vector(y, "y")
    if a.shape != b.shape:
        raise ValueError(f"x and y must have the same length; got {a.shape[0]} and {b.shape[0]}")
    if a.shape[0] < 2:
        return float("nan")
    ra = rankdata(a) - (a.shape[0] + 1) / 2.0
    rb = rankdata(b) - (b.shape[0] + 1) / 2.0
    denom = float(np.sqrt(np.sum(ra * ra) * np.sum(rb * rb)))
    if denom == 0.0:
        return float("nan")
    return float(np.clip(np.sum(ra * rb) / denom, -1.0, 1.0))


def brier_score(pred: npt.ArrayLike, target: npt.ArrayLike, weights: npt.ArrayLike | None = None) -> float:
    """Brier score of predictions against the binary outcomes summarised by success rates.

    A node whose n leaves have success rate t contributes the mean over its leaves of (p - r_j)^2, which is
    exactly  (p - t)^2 + t (1 - t)  (squared error plus the irreducible outcome variance). With t in {0, 1} this
    is the textbook Brier score (p - r)^2. Pass the leaf counts as ``weights`` to weigh every leaf equally.

    Returns NaN for empty input. Raises ValueError on malformed input.
    """
    p, t = _pair(pred, target)
    w = _weights(weights, p.shape[0])
    if p.shape[0] == 0:
        return float("nan")
    return float(np.sum(w * ((p - t) ** 2 + t * (1.0 - t))) / np.sum(w))


@dataclass(frozen=True)
class ReliabilityBins:
    """Reliability diagram data over equal-width bins of the prediction.

    Attributes:
        edges: float64 (B + 1,) bin edges 0 = e_0 < ... < e_B = 1; bin b holds e_b <= p < e_{b+1} (the last bin
            also holds p = 1).
        count: int64 (B,) number of predictions in each bin.
        weight: float64 (B,) total weight in each bin.
        mean_pred: float64 (B,) weighted mean prediction per bin (NaN for an empty bin).
        mean_target: float64 (B,) weighted mean target per bin (NaN for an empty bin).
    """

    edges: FloatArray
    count: IntArray
    weight: FloatArray
    mean_pred: FloatArray
    mean_target: FloatArray


def reliability_bins(
    pred: npt.ArrayLike, target: npt.ArrayLike, n_bins: int = 10, weights: npt.ArrayLike | None = None
) -> ReliabilityBins:
    """Bin predictions into ``n_bins`` equal-width bins and average prediction and target in each.

    Raises:
        ValueError: malformed input or ``n_bins < 1``.
    """
    p, t = _pair(pred, target)
    w = _weights(weights, p.shape[0])
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer; got {n_bins!r}")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    count = np.bincount(idx, minlength=n_bins).astype(np.int64)
    weight = np.bincount(idx, weights=w, minlength=n_bins).astype(np.float64)
    sum_p = np.bincount(idx, weights=w * p, minlength=n_bins)
    sum_t = np.bincount(idx, weights=w * t, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.where(weight > 0, sum_p / np.where(weight > 0, weight, 1.0), np.nan)
        mean_t = np.where(weight > 0, sum_t / np.where(weight > 0, weight, 1.0), np.nan)
    return ReliabilityBins(edges=edges, count=count, weight=weight, mean_pred=mean_p, mean_target=mean_t)


def expected_calibration_error(
    pred: npt.ArrayLike, target: npt.ArrayLike, n_bins: int = 10, weights: npt.ArrayLike | None = None
) -> float:
    """Expected calibration error  ECE = sum_b (W_b / W) |mean_pred_b - mean_target_b|  over equal-width bins.

    Returns NaN for empty input. Raises ValueError on malformed input.
    """
    bins = reliability_bins(pred, target, n_bins=n_bins, weights=weights)
    total = float(bins.weight.sum())
    if total == 0.0:
        return float("nan")
    full = bins.weight > 0
    gap = np.abs(bins.mean_pred[full] - bins.mean_target[full])
    return float(np.sum(bins.weight[full] * gap) / total)


@dataclass(frozen=True)
class DepthError:
    """Predictor error among the nodes of one prefix depth (0 = prompt level).

    Attributes: count (nodes), mse (weighted), spearman (NaN when undefined), mean_pred, mean_target.
    """

    count: int
    mse: float
    spearman: float
    mean_pred: float
    mean_target: float


def error_by_depth(
    pred: npt.ArrayLike,
    target: npt.ArrayLike,
    depth: npt.ArrayLike,
    weights: npt.ArrayLike | None = None,
) -> dict[int, DepthError]:
    """MSE and Spearman correlation of the predictor at each prefix depth (the paper's error-by-turn plot).

    Args:
        pred, target: (n,) predictions and success-rate targets in [0, 1].
        depth: (n,) non-negative integer depths (0 = prompt, t = after turn t).
        weights: optional (n,) non-negative weights.

    Returns:
        {depth: DepthError} for every depth present, in increasing depth order.

    Raises:
        ValueError: malformed input, or depths that are negative or not whole numbers.
    """
    p, t = _pair(pred, target)
    w = _weights(weights, p.shape[0])
    d_raw = np.asarray(depth)
    if d_raw.shape != p.shape:
        raise ValueError(f"depth must have length {p.shape[0]}; got shape {d_raw.shape}")
    d_float = d_raw.astype(np.float64)
    if not np.all(np.isfinite(d_float)) or not np.all(d_float == np.round(d_float)) or (d_float < 0).any():
        raise ValueError("depth must hold non-negative whole numbers")
    d = d_float.astype(np.int64)
    out: dict[int, DepthError] = {}
    for level in np.unique(d):
        sel = d == level
        ws = w[sel]
        if not ws.sum() > 0:
            continue
        out[int(level)] = DepthError(
            count=int(sel.sum()),
            mse=mse(p[sel], t[sel], ws),
            spearman=spearman(p[sel], t[sel]),
            mean_pred=float(np.sum(ws * p[sel]) / ws.sum()),
            mean_target=float(np.sum(ws * t[sel]) / ws.sum()),
        )
    return out


def predictor_report(
    pred: npt.ArrayLike,
    target: npt.ArrayLike,
    depth: npt.ArrayLike,
    weights: npt.ArrayLike | None = None,
    n_bins: int = 10,
    prefix: str = "predictor/",
) -> dict[str, float]:
    """Flat dict of predictor metrics for a logger.

    Keys (after ``prefix``): ``mse``, ``spearman``, ``brier``, ``ece`` over all nodes; ``mse_prompt`` and
    ``spearman_prompt`` at depth 0; ``mse_prefix`` and ``spearman_prefix`` over depths >= 1;
    ``mse_depth_<d>``, ``spearman_depth_<d>`` and ``count_depth_<d>`` per depth; ``count``. Undefined values
    (no nodes, constant inputs) are NaN.
    """
    p, t = _pair(pred, target)
    w = _weights(weights, p.shape[0])
    d = np.asarray(depth)
    by_depth = error_by_depth(p, t, d, w)
    nan = float("nan")
    out: dict[str, float] = {
        "count": float(p.shape[0]),
        "mse": mse(p, t, w),
        "spearman": spearman(p, t),
        "brier": brier_score(p, t, w),
        "ece": expected_calibration_error(p, t, n_bins, w) if p.shape[0] else nan,
    }
    prompt = by_depth.get(0)
    out["mse_prompt"] = prompt.mse if prompt else nan
    out["spearman_prompt"] = prompt.spearman if prompt else nan
    deep = d.astype(np.int64) > 0
    out["mse_prefix"] = mse(p[deep], t[deep], w[deep]) if deep.any() and w[deep].sum() > 0 else nan
    out["spearman_prefix"] = spearman(p[deep], t[deep])
    for level, err in by_depth.items():
        out[f"mse_depth_{level}"] = err.mse
        out[f"spearman_depth_{level}"] = err.spearman
        out[f"count_depth_{level}"] = float(err.count)
    return {prefix + k: v for k, v in out.items()}
