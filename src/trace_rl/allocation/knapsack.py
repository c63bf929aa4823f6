"""`knapsack_dp`: exact separable integer allocation by dynamic program, the reference solver.

Used for Knapsack-RL-style weighted root values, for prefix expansion with unequal replay costs
(`allocate_prefixes`), and as the ground truth the faster exact solvers are tested against.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.validation import IntArray, as_costs, as_int

__all__ = ["knapsack_dp"]


def knapsack_dp(
    values: npt.ArrayLike,
    budget: int,
    *,
    cost: npt.ArrayLike | None = None,
    exact: bool = True,
) -> IntArray:
    """Exact separable integer allocation by dynamic program (the reference solver).

    Solves  max_k sum_i values[i, k_i]  s.t.  sum_i cost_i * k_i == budget (``exact``) or <= budget, with
    k_i in {0..K}; entries of ``values`` equal to -inf forbid that count (e.g. m = 1 under the 0-or->=2 rule).
    O(P * budget * K) time, O(P * budget) memory. Used for Knapsack-RL-style weighted root values, unequal
    replay costs, and as the ground truth in tests.

    Args:
        values: float array of shape (P, K + 1); values[i, k] is the value of giving k units to item i.
        budget: total cost to spend, >= 0.
        cost: integer cost per unit of each item (>= 1), shape (P,) or scalar (default 1); the shared check
            (`trace_rl.allocation.validation.as_costs`) refuses fractions, bools and other shapes.
        exact: require the cost to equal the budget (True) or only not exceed it (False).

    Returns:
        int64 array k of shape (P,).

    Raises:
        ValueError: malformed input, or (``exact``) no allocation spends exactly the budget.
    """
    table = np.asarray(values, dtype=np.float64)
    if table.ndim != 2 or table.shape[1] < 1:
        raise ValueError(f"values must have shape (P, K + 1); got {table.shape}")
    if np.isnan(table).any():
        raise ValueError("values contains NaN")
    total = as_int(budget, "budget")
    p, width = table.shape
    costs = as_costs(cost, p)
    neg = -np.inf
    best = np.full(total + 1, neg)
    best[0] = 0.0
    choice = np.zeros((p, total + 1), dtype=np.int64)
    for i in range(p):
        new = np.full(total + 1, neg)
        pick = np.zeros(total + 1, dtype=np.int64)
        for kk in range(width):
            shift = kk * int(costs[i])
            if shift > total:
                break
            if table[i, kk] == neg:
                continue
            cand = np.full(total + 1, neg)
            cand[shift:] = best[: total + 1 - shift] + table[i, kk]
            better = cand > new
            new = np.where(better, cand, new)
            pick = np.where(better, kk, pick)
        best, choice[i] = new, pick
    end = total if exact else int(np.argmax(best))
    if not exact:
        # prefer the largest spend among equal optima
        top = best.max()
        end = int(np.flatnonzero(best >= top - 1e-12 * max(1.0, abs(top)))[-1])
    if best[end] == neg:
        raise ValueError(f"no allocation spends exactly a budget of {total} under the given constraints")
    out = np.zeros(p, dtype=np.int64)
    b = end
    for i in range(p - 1, -1, -1):
        out[i] = choice[i, b]
        b -= int(out[i] * costs[i])
    return out
