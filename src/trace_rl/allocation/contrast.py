"""Exact replays per anchor for the contrast objective (`allocate_contrast`; docs/allocation.md, ours).

A mixed tree reduces to `allocate_prefixes` over the sibling anchors; a unanimous tree is solved by an exact
Pareto dynamic program over anchors and spend (`_contrast_pareto`), pruned with a greedy's value as the floor.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.objectives import contrast_value
from trace_rl.allocation.prefixes import allocate_prefixes
from trace_rl.allocation.validation import (
    FloatArray,
    IntArray,
    as_caps,
    as_costs,
    as_int,
    as_probability_vector,
    as_sibling,
    as_weight,
)

__all__ = ["allocate_contrast"]


def allocate_contrast(
    q: npt.ArrayLike,
    budget: int,
    *,
    unanimous: bool,
    sibling: npt.ArrayLike | None = None,
    weight: float = 1.0,
    cost: npt.ArrayLike | None = None,
    max_per_prefix: npt.ArrayLike | None = None,
) -> IntArray:
    """Exact replays per anchor maximising the contrast objective (`trace_rl.allocation.contrast_value`).

    Solves (ours, docs/allocation.md "The contrast objective")::

        max_k  u * (1 - prod_j q_j^k_j)  +  weight * sum_{j in sibling} (1 - q_j^k_j)
        s.t.   sum_j cost_j * k_j <= budget,   0 <= k_j <= max_per_prefix_j

    with u = 1 when the prompt's roots are unanimous (``unanimous``), else 0.

    * A mixed tree (u = 0): the objective is ``weight`` times the paper's over the sibling anchors, so the answer
      is `allocate_prefixes` on those anchors (also the tie-break when ``weight`` is 0); anchors without a sibling
      group (the depth-0 anchor: a fresh rollout) get nothing, since they add nothing.
    * A unanimous tree: the tree term is not separable, so no greedy on increments is exact. The solver is an
      exact dynamic program over anchors and spend that keeps, for every spend, all Pareto-optimal pairs
      (P = prod q_j^k_j, S = sum_{j in sibling} 1 - q_j^k_j): the objective 1 - P + weight * S grows as P falls
      and as S rises, and both compose anchor by anchor (P multiplies, S adds), so a pair dominated at some spend
      stays dominated after any further anchors and the optimum survives the pruning. Costs are divided by their
      greatest common divisor first. Ties: larger S, then the larger spend.

    Args:
        q: repeat probability of each anchor (for a unanimous tree: the chance a replay ends with the shared
            outcome), shape (J,), values in [0, 1].
        budget: replay budget in cost units, >= 0.
        unanimous: the prompt's root rollouts all share one outcome.
        sibling: bool (J,), anchors with a sibling group (False for the depth-0 anchor); default all.
        weight: weight of the sibling terms (finite, >= 0).
        cost: integer cost of one replay from each anchor, shape (J,) or scalar, each >= 1 (default 1).
        max_per_prefix: cap on replays per anchor, scalar or shape (J,), >= 0 (default: no cap).

    Returns:
        int64 array k of shape (J,), sum(cost * k) <= budget.

    Raises:
        ValueError: as `allocate_prefixes`; a sibling mask of the wrong shape or type; a bad weight.
    """
    probs = as_probability_vector(q, "q")
    total = as_int(budget, "budget")
    j = probs.shape[0]
    sib = as_sibling(sibling, j)
    w = as_weight(weight)
    costs = as_costs(cost, j)
    caps = np.minimum(as_caps(max_per_prefix, j, total), total // costs) if j else np.zeros(0, np.int64)
    k = np.zeros(j, dtype=np.int64)
    if j == 0 or total == 0:
        return k
    if not unanimous:
        idx = np.flatnonzero(sib)
        if idx.size:
            k[idx] = allocate_prefixes(probs[idx], total, cost=costs[idx], max_per_prefix=caps[idx])
        return k
    return _contrast_pareto(probs, total, costs, caps, sib, w)


def _contrast_pareto(
    q: FloatArray, budget: int, costs: IntArray, caps: IntArray, sib: npt.NDArray[np.bool_], weight: float
) -> IntArray:
    """The exact Pareto dynamic program of `allocate_contrast` for a unanimous tree (see its docstring).

    The points are all (P, S, spend) of allocations of the anchors processed so far that no other point with the
    same spend dominates (P no larger and S no smaller), less those whose upper bound (the best the remaining
    anchors could add to P and to S separately, each with the whole remaining budget) cannot reach the value of
    a feasible allocation found first (`_contrast_greedy`). Anchors are processed most flips per cost first.
    """
    g = int(np.gcd.reduce(costs))
    c = costs // g
    units = budget // g
    caps = np.minimum(caps, units // c)
    n = q.shape[0]
    with np.errstate(divide="ignore"):
        rate = np.where(q > 0.0, -np.log(np.where(q > 0.0, q, 1.0)), np.inf) / c  # -log q per cost unit
    order = np.lexsort((np.arange(n), -rate))
    gains = [(1.0 - np.power(q[i], np.arange(caps[i] + 1))) * float(sib[i]) for i in range(n)]
    # suffix bounds over the anchors order[t:], for every remaining budget r: the largest S and the smallest P
    # each of them can reach alone (exact dynamic programs: S adds up, P multiplies non-negative factors)
    s_max = np.zeros((n + 1, units + 1))
    p_min = np.ones((n + 1, units + 1))
    for t in range(n - 1, -1, -1):
        i = int(order[t])
        s_best, p_best = s_max[t + 1].copy(), p_min[t + 1].copy()
        for kk in range(1, int(caps[i]) + 1):
            shift = kk * int(c[i])
            s_best[shift:] = np.maximum(s_best[shift:], s_max[t + 1, : units + 1 - shift] + gains[i][kk])
            p_best[shift:] = np.minimum(p_best[shift:], p_min[t + 1, : units + 1 - shift] * q[i] ** kk)
        s_max[t], p_min[t] = s_best, p_best
    floor = contrast_value(
        q, _contrast_greedy(q, units, c, caps, sib, weight), unanimous=True, sibling=sib, weight=weight
    )
    tol = 1e-12 * max(1.0, abs(floor))
    pts_p, pts_s, pts_b = np.ones(1), np.zeros(1), np.zeros(1, np.int64)
    back: list[tuple[IntArray, IntArray]] = []
    for t in range(n):
        i = int(order[t])
        cand_p, cand_s, cand_b, origin, pick = [], [], [], [], []
        for kk in range(int(caps[i]) + 1):
            spend = pts_b + kk * int(c[i])
            ok = np.flatnonzero(spend <= units)
            if not ok.size:
                break
            cand_p.append(pts_p[ok] * q[i] ** kk)
            cand_s.append(pts_s[ok] + gains[i][kk])
            cand_b.append(spend[ok])
            origin.append(ok)
            pick.append(np.full(ok.size, kk, np.int64))
        cp, cs, cb = np.concatenate(cand_p), np.concatenate(cand_s), np.concatenate(cand_b)
        co, ck = np.concatenate(origin), np.concatenate(pick)
        left = units - cb
        bound = 1.0 - cp * p_min[t + 1, left] + weight * (cs + s_max[t + 1, left])
        alive = np.flatnonzero(bound >= floor - tol)
        cp, cs, cb, co, ck = cp[alive], cs[alive], cb[alive], co[alive], ck[alive]
        # Pareto pruning within each spend: sort by spend, then P ascending, then S descending (stable: smaller k
        # first), and keep a point only if its S beats every earlier point of its spend; the running maximum is
        # taken over the integer ranks of S lifted by spend, so the groups never mix and nothing is rounded
        srt = np.lexsort((-cs, cp, cb))
        cp, cs, cb, co, ck = cp[srt], cs[srt], cb[srt], co[srt], ck[srt]
        rank = np.unique(cs, return_inverse=True)[1].reshape(-1).astype(np.int64)
        base = int(rank.max()) + 2
        lifted = rank + cb * base
        before = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], lifted[:-1]]))
        keep = lifted > np.maximum(before, cb * base - 1)
        pts_p, pts_s, pts_b = cp[keep], cs[keep], cb[keep]
        back.append((co[keep], ck[keep]))
    value = 1.0 - pts_p + weight * pts_s
    top = float(value.max())
    tied = np.flatnonzero(value >= top - 1e-12 * max(1.0, abs(top)))
    idx = int(tied[np.lexsort((-pts_b[tied], -pts_s[tied]))[0]])  # larger S, then the larger spend
    k = np.zeros(n, dtype=np.int64)
    for t in range(n - 1, -1, -1):
        origin_t, pick_t = back[t]
        k[int(order[t])] = int(pick_t[idx])
        idx = int(origin_t[idx])
    return k


def _contrast_greedy(
    q: FloatArray, units: int, c: IntArray, caps: IntArray, sib: npt.NDArray[np.bool_], weight: float
) -> IntArray:
    """A feasible allocation for the bound of `_contrast_pareto`: one replay at a time to the largest gain per
    cost, (1 - q_j)(P + weight q_j^k_j) / c_j (P = prod q^k so far). Not exact on its own."""
    k = np.zeros(q.shape[0], dtype=np.int64)
    left, p = units, 1.0
    while True:
        room = np.flatnonzero((k < caps) & (c <= left))
        if not room.size:
            return k
        gain = (1.0 - q[room]) * (p + weight * sib[room] * np.power(q[room], k[room])) / c[room]
        j = int(room[np.argmax(gain)])
        k[j] += 1
        left -= int(c[j])
        p *= float(q[j])
