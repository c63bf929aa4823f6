"""Exact prefix expansion (`allocate_prefixes`): replays per anchor maximising the expected flipped endings.

P_flip(q, k) = 1 - q^k has increments q^k (1-q) that decrease in k (concave), so with equal costs the greedy on
increments is exact; it is found with a threshold search in log space (`_greedy_flip`; small problems sort the
increments directly). With unequal integer costs the problem is a bounded knapsack, solved by the exact dynamic
program `knapsack_dp`. Proofs in docs/allocation.md; tested in tests/property/test_allocation_exact.py.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.knapsack import knapsack_dp
from trace_rl.allocation.validation import (
    FloatArray,
    IntArray,
    as_caps,
    as_costs,
    as_int,
    as_probability_vector,
)

__all__ = ["allocate_prefixes"]


_DIRECT_LIMIT = (
    4_096  # below this many candidate increments, sorting them directly beats the threshold search
)


def _greedy_flip(q: FloatArray, budget: int, caps: IntArray) -> IntArray:
    """Top-`budget` increments q^k (1-q) over anchors, k < cap_j; ties: smaller k, then lower index."""
    inner = (q > 0.0) & (q < 1.0)
    # Increments with a positive value: all k < cap for 0 < q < 1; only k = 0 for q = 0; none for q = 1.
    n_pos = np.where(inner, caps, np.where(q == 0.0, np.minimum(caps, 1), 0))
    if int(n_pos.sum()) <= budget:
        k = n_pos.copy()
        return _fill_evenly(k, caps, budget - int(n_pos.sum()))
    width = min(budget, int(n_pos.max()))
    if q.shape[0] * width <= _DIRECT_LIMIT:
        # Small problem: sort the increments themselves (k-major flattening: ties go to smaller k, then index).
        ks = np.arange(width)
        inc = np.power(q[None, :], ks[:, None]) * (1.0 - q)[None, :]  # (width, J)
        inc = np.where(ks[:, None] < n_pos[None, :], inc, -1.0).ravel()
        top = np.argsort(-inc, kind="stable")[:budget]
        return np.bincount(top % q.shape[0], minlength=q.shape[0]).astype(np.int64)
    # log-increment of anchor j at k: a_j + k * b_j (b_j < 0); q = 0 has a single increment of value 1 (log 0).
    with np.errstate(divide="ignore"):
        a = np.where(inner, np.log1p(-q), 0.0)
        b = np.where(inner, np.log(np.where(inner, q, 0.5)), -np.inf)

    def counts(theta: float) -> IntArray:
        """#{k < n_pos_j : a_j + k b_j > theta} per anchor."""
        with np.errstate(invalid="ignore", divide="ignore"):
            c = np.ceil((theta - a) / b)
        c = np.where(inner, c, np.where(q == 0.0, float(theta < 0.0), 0.0))
        c = np.where(np.isnan(c), 0.0, c)
        return np.clip(c, 0, n_pos).astype(np.int64)

    finite_last = np.where(n_pos > 0, a + np.maximum(n_pos - 1, 0) * np.where(inner, b, 0.0), np.inf)
    lo = float(np.min(finite_last)) - 1.0  # counts(lo) = sum(n_pos) > budget
    hi = float(np.max(np.where(n_pos > 0, a, -np.inf)))  # counts(hi) = 0 <= budget
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if int(counts(mid).sum()) <= budget:
            hi = mid
        else:
            lo = mid
    k = counts(hi)
    # Exact top-up: the remaining units are the best next increments (the band (lo, hi] holds the ties).
    remaining = budget - int(k.sum())
    while remaining > 0:
        open_ = np.flatnonzero(k < n_pos)
        nxt = a[open_] + k[open_] * np.where(inner[open_], b[open_], 0.0)
        take = open_[np.lexsort((open_, k[open_], -nxt))[:remaining]]
        k[take] += 1
        remaining -= take.size
    return k


def _fill_evenly(k: IntArray, caps: IntArray, extra: int) -> IntArray:
    """Spend `extra` zero-value units, raising the smallest counts first (ties: lower index)."""
    if extra <= 0:
        return k
    room = int((caps - k).sum())
    extra = min(extra, room)
    lo, hi = int(k.min()), int(caps.max())
    while lo < hi:  # largest level t with sum(clip(t - k, 0, caps - k)) <= extra
        t = (lo + hi + 1) // 2
        if int(np.clip(t - k, 0, caps - k).sum()) <= extra:
            lo = t
        else:
            hi = t - 1
    out = np.maximum(k, np.minimum(lo, caps))
    left = extra - int((out - k).sum())
    if left > 0:
        eligible = np.flatnonzero((out == lo) & (out < caps))[:left]
        out[eligible] += 1
    return out


def allocate_prefixes(
    q: npt.ArrayLike,
    budget: int,
    *,
    cost: npt.ArrayLike | None = None,
    max_per_prefix: npt.ArrayLike | None = None,
) -> IntArray:
    """Exact prefix expansion: replays per anchor maximising the expected number of flipped endings.

    Solves (TRACE, prefix expansion)::

        max_k  sum_j P_flip(q_j, k_j),   P_flip(q, k) = 1 - q^k
        s.t.   sum_j cost_j * k_j <= budget,   0 <= k_j <= max_per_prefix_j.

    With equal costs c the budget is spent completely whenever the caps allow (sum k == budget // c; replays
    of zero value, e.g. q = 1, are spread evenly); the solution is the greedy on the concave increments
    q^k (1-q), exact, found by a threshold search in O(J log(1/eps)). With unequal integer costs (token-aware
    accounting) the exact bounded-knapsack dynamic program `knapsack_dp` is used, O(J * budget * max k).

    Args:
        q: repeat probability of each anchor, shape (J,), values in [0, 1] (see `repeat_probability`).
        budget: replay budget in cost units (the paper's N * m_i with unit costs), >= 0.
        cost: integer cost of one replay from each anchor, shape (J,) or scalar, each >= 1 (default 1).
        max_per_prefix: cap on replays per anchor, scalar or shape (J,), >= 0 (default: no cap).

    Returns:
        int64 array k of shape (J,).

    Raises:
        ValueError: q is not a 1-D array of probabilities; budget, costs or caps are not non-negative whole
            numbers (costs must be >= 1) or have the wrong shape.
    """
    probs = as_probability_vector(q, "q")
    total = as_int(budget, "budget")
    j = probs.shape[0]
    costs = as_costs(cost, j)
    if j == 0 or total == 0:
        return np.zeros(j, dtype=np.int64)
    if np.all(costs == costs[0]):
        units = total // int(costs[0])
        caps = as_caps(max_per_prefix, j, units)
        return _greedy_flip(probs, units, caps)
    caps = np.minimum(as_caps(max_per_prefix, j, total), total // costs)
    width = int(caps.max())
    ks = np.arange(width + 1)
    table = 1.0 - np.power(probs[:, None], ks[None, :])
    table = np.where(ks[None, :] <= caps[:, None], table, -np.inf)
    return knapsack_dp(table, total, cost=costs, exact=False)
