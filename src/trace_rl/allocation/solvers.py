"""Exact integer solvers for TRACE's root-allocation and prefix-expansion problems.

The paper (Zou et al. 2026, arXiv 2606.11119) solves both problems "exactly with a small dynamic program". We
solve the same problems exactly, faster than a dynamic program, using their structure (proofs in
docs/allocation.md; exactness is also tested against brute force and against the reference dynamic program
`knapsack_dp` in tests/property/test_allocation_exact.py):

* Root allocation. P_mix(v, m) = 1 - v^m - (1-v)^m has increments D(m) = v^m (1-v) + (1-v)^m v that decrease
  in m, so once a prompt is active (m >= L) its value is concave in m; and for every fixed m, P_mix(v, m) grows
  as v moves toward 1/2. Hence (exchange argument) an optimal active set is always a prefix of the prompts sorted
  by |v - 1/2|, and given the active set the rest of the budget is spent greedily on the largest increments.
  `allocate_roots` sorts all increments once, bounds the value of every number of active prompts s from above,
  and solves exactly (vectorised, `_sweep_boundaries`) only the s whose bound can still reach the best value.
* Prefix expansion. P_flip(q, k) = 1 - q^k has increments q^k (1-q) that decrease in k (concave), so with equal
  costs the greedy on increments is exact; it is found with a threshold search in log space. With unequal
  integer costs the problem is a bounded knapsack, solved by the exact dynamic program `knapsack_dp`.

Floating-point note: "exact" means exact for the computed objective values; two allocations whose objectives
differ by less than about 1e-12 may be swapped by rounding. `allocate_roots` computes its powers with
multiplications only (`_int_power`) and its sums left to right, so its result is the same on every platform
and equals the JavaScript port behind `trace-rl explore` (src/trace_rl/explore/allocate_roots.js).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.objectives import (
    FloatArray,
    IntArray,
    _as_probability,
    _as_sibling,
    _as_weight,
    contrast_value,
)

__all__ = ["allocate_contrast", "allocate_prefixes", "allocate_roots", "knapsack_dp"]


# --------------------------------------------------------------------------------------------- validation
def _as_int(x: object, name: str, *, minimum: int = 0) -> int:
    if isinstance(x, bool) or not isinstance(x, int | np.integer | float | np.floating):
        raise ValueError(f"{name} must be an integer; got {x!r}")
    if isinstance(x, float | np.floating) and (not math.isfinite(float(x)) or float(x) != int(x)):
        raise ValueError(f"{name} must be a whole number; got {x!r}")
    value = int(x)
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {value}")
    return value


def _as_probability_vector(x: npt.ArrayLike, name: str) -> FloatArray:
    arr = _as_probability(x, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of probabilities; got shape {arr.shape}")
    return arr


# ------------------------------------------------------------------------------------------ root problem
_FIRST_CANDIDATES = 4  # numbers of active prompts solved exactly before pruning the others by their bound
_SWEEP_CHUNK = 64  # surviving numbers of active prompts solved per vectorised sweep


def _int_power(x: FloatArray, e: int) -> FloatArray:
    """x**e for a whole e >= 0 by binary exponentiation: IEEE-754 multiplications only, in a fixed order.

    Used instead of np.power so that the allocation is the same on every platform and in the JavaScript port
    (src/trace_rl/explore/allocate_roots.js): np.power differs across CPUs (SIMD libraries) by an ulp, which
    can reorder increments that are equal up to rounding (e.g. v = 0.3 and v = 0.7).
    """
    out = np.ones_like(x)
    base = x.copy()
    while e:
        if e & 1:
            out = out * base
        e >>= 1
        if e:
            base = base * base
    return out


def _int_powers(x: FloatArray, start: int, width: int) -> FloatArray:
    """P[i, j] = x_i ** (start + j), j < width: x**start, then one multiplication by x per column."""
    steps = np.repeat(x[:, None], width, axis=1)
    steps[:, 0] = _int_power(x, start)
    out: FloatArray = np.multiply.accumulate(steps, axis=1)
    return out


def _mixed_increments(v: FloatArray, start: int, width: int) -> FloatArray:
    """D[i, j] = P_mix(v_i, start + j + 1) - P_mix(v_i, start + j) for m >= 1; shape (len(v), width).

    D(m) = v^m (1 - v) + (1 - v)^m v, with powers from `_int_powers` (platform-independent rounding).
    """
    vv = v[:, None]
    inc = _int_powers(v, start, width) * (1.0 - vv) + _int_powers(1.0 - v, start, width) * vv
    # Mathematically non-increasing along each row; enforce it against rounding so rows stay sorted.
    out: FloatArray = np.minimum.accumulate(inc, axis=1)
    return out


def _greedy_order(inc: FloatArray) -> tuple[IntArray, FloatArray]:
    """Positions of the increments in the global greedy order: (row of each position, its value), shape (E,).

    Equal to a stable sort of ``-inc.ravel()`` (ties: lower row, then lower count), computed with numpy's
    fast unstable sort plus a second sort of (tie run, flat index) keys, which is several times quicker.
    """
    flat = inc.ravel()
    order = np.argsort(-flat)
    val = flat[order]
    if val.size > 1 and bool(np.any(val[1:] == val[:-1])):
        run = np.concatenate(([0], np.cumsum(val[1:] != val[:-1])))
        order = np.sort(run * flat.size + order) % flat.size
        val = flat[order]
    rows: IntArray = order // inc.shape[1]
    return rows, val


def _sweep_boundaries(
    g_rank: IntArray, g_val: FloatArray, s: IntArray, k: IntArray
) -> tuple[IntArray, FloatArray]:
    """For every sweep point t: the greedy selection of k[t] increments among the first s[t] prompts.

    The selection is the first k[t] positions of the global order whose row is < s[t]. ``s`` must increase and
    ``k`` must not increase, with k[t] <= #{positions with row < s[t]}. Returns
    ``boundary[t]`` (one past the k[t]-th such position; 0 when k[t] == 0; non-increasing in t) and
    ``chosen[t]`` (the sum of their values), each shape (T,).

    Vectorised instead of walking the boundary position by position: positions are cut into buckets of about
    sqrt(E); 2-D prefix counts over (prompt, bucket) locate each boundary's bucket and one (T, bucket) block
    resolves the position inside it. Position p of row r is selected exactly for the points t with
    s[t] > r and boundary[t] > p, a contiguous range of t, so the sums come from one difference array.
    """
    e = g_rank.shape[0]
    t_count = s.shape[0]
    boundary = np.zeros(t_count, dtype=np.int64)
    n_live = int(np.count_nonzero(k > 0))  # the live points are a prefix, since k does not increase
    if e == 0 or n_live == 0:
        return boundary, np.zeros(t_count)
    k_live = k[:n_live]
    # start[p]: the first point t at which position p is a candidate (its row < s[t]); t_count = never
    start = np.searchsorted(s, g_rank, side="right").astype(np.int32)
    w = max(16, math.isqrt(e))
    n_buckets = -(-e // w)
    # per_bucket[g, t]: candidates of point t in bucket g; c_cum[g, t]: in buckets <= g
    cell = (np.arange(e) // w) * (t_count + 1) + start
    hist = np.bincount(cell, minlength=n_buckets * (t_count + 1)).reshape(n_buckets, t_count + 1)
    per_bucket = np.cumsum(hist[:, :n_live], axis=1)
    c_cum = np.cumsum(per_bucket, axis=0)
    g = (c_cum < k_live[None, :]).sum(axis=0)  # the bucket holding the k-th selected position
    t_idx = np.arange(n_live)
    need = k_live - (c_cum[g, t_idx] - per_bucket[g, t_idx])  # >= 1: still needed inside bucket g
    pad = np.full(n_buckets * w - e, t_count, dtype=np.int32)  # padding is never a candidate
    on = np.concatenate((start, pad)).reshape(n_buckets, w)[g] <= t_idx[:, None]
    j = (np.cumsum(on, axis=1, dtype=np.int32) < need[:, None]).sum(axis=1)
    boundary[:n_live] = g * w + j + 1
    # sums: position p counts for the points t in [start[p], stop[p]), stop[p] = #{t : boundary[t] > p}
    stop = t_count - np.searchsorted(boundary[::-1], np.arange(e), side="right")
    keep = start < stop
    diff = np.bincount(start[keep], weights=g_val[keep], minlength=t_count + 1)
    diff -= np.bincount(stop[keep], weights=g_val[keep], minlength=t_count + 1)
    chosen: FloatArray = np.cumsum(diff[:t_count])
    return boundary, chosen


def allocate_roots(
    v: npt.ArrayLike,
    budget: int,
    *,
    min_rollouts: int = 2,
    max_rollouts: int | None = None,
    max_active: int | None = None,
) -> IntArray:
    """Exact root allocation: rollouts per candidate prompt maximising the expected number of mixed groups.

    Solves (TRACE, root allocation)::

        max_m  sum_i P_mix(v_i, m_i),   P_mix(v, m) = 1 - v^m - (1-v)^m
        s.t.   sum_i m_i == budget,
               m_i == 0  or  min_rollouts <= m_i <= max_rollouts,
               #{i : m_i > 0} <= max_active.

    Exact (not a heuristic): see the module docstring and docs/allocation.md. Cost O(E log E + S sqrt(E))
    with E = P * min(max_rollouts - min_rollouts, budget - min_rollouts * ceil(budget / max_rollouts)) and S
    the numbers of active prompts not pruned by the bound (usually 1-4); pass ``max_rollouts`` for large
    budgets. Ties (objectives within 1e-12 relative) prefer fewer active prompts, then prompts nearer
    v = 1/2, then lower indices, so the result is deterministic.

    Args:
        v: predicted success probability of each candidate prompt, shape (P,), values in [0, 1].
        budget: root rollouts to spend, B >= 0 (the paper's M).
        min_rollouts: smallest group of an active prompt (L >= 1; the paper's rule is 0 or at least 2).
        max_rollouts: cap per prompt (None: no cap beyond the budget).
        max_active: most prompts that may get rollouts (None: no limit), e.g. the baselines' batch size.

    Returns:
        int64 array m of shape (P,) with sum(m) == budget.

    Raises:
        ValueError: v is not a 1-D array of probabilities (NaN, outside [0, 1]); an argument is not a whole
            number or is out of range; or no allocation meets the constraints (for example budget 1 with
            min_rollouts 2, or a budget larger than max_active * max_rollouts).
    """
    probs = _as_probability_vector(v, "v")
    total = _as_int(budget, "budget")
    low = _as_int(min_rollouts, "min_rollouts", minimum=1)
    n = probs.shape[0]
    cap = total if max_rollouts is None else _as_int(max_rollouts, "max_rollouts", minimum=1)
    if max_rollouts is not None and cap < low:
        raise ValueError(f"max_rollouts ({cap}) must be at least min_rollouts ({low})")
    limit = n if max_active is None else min(n, _as_int(max_active, "max_active"))

    m = np.zeros(n, dtype=np.int64)
    if total == 0:
        return m
    s_lo = -(-total // max(cap, 1)) if cap >= low else limit + 1
    s_hi = min(limit, total // low)
    if s_lo > s_hi:
        if total < low:
            why = f"an active prompt needs at least min_rollouts={low} rollouts"
        elif limit == 0:
            why = "no prompt may be active (empty pool or max_active=0)"
        else:
            why = (
                f"{limit} active prompts (pool size {n}, max_active {max_active}) with at most "
                f"max_rollouts={cap} each can spend at most {limit * cap}"
            )
        raise ValueError(f"cannot spend a root budget of {total}: {why}")

    # Prompts ranked by balance |v - 1/2| (ties: lower index first). The optimal active set is a prefix.
    balance = np.minimum(probs, 1.0 - probs)
    order = np.lexsort((np.arange(n), -balance))
    v_sorted = probs[order]
    base = 1.0 - _int_power(v_sorted, low) - _int_power(1.0 - v_sorted, low)
    base = np.where(low >= 2, np.maximum(base, 0.0), 0.0)
    setup = np.concatenate(([0.0], np.cumsum(base)))  # setup[s] = sum of P_mix(v, L) over the first s

    width = min(cap - low, total - low * s_lo)  # no prompt ever takes more than `width` increments
    if width > 0:
        # Global greedy order of the increments of the first s_hi prompts (value desc, ties: row, then count).
        g_rank, g_val = _greedy_order(_mixed_increments(v_sorted[:s_hi], low, width))
    else:
        g_rank, g_val = np.zeros(0, dtype=np.int64), np.zeros(0)
    # Value of s active prompts: setup[s] + the sum of the top k_s = B - L*s increments among rows < s.
    # Bound it above by the top k_s among all rows (one cumulative sum); solve the best bounds exactly, then
    # solve the s whose bound reaches that value, in increasing s, until no later s can win or tie first.
    s_all = np.arange(s_lo, s_hi + 1)
    k_all = total - low * s_all
    bound = setup[s_all] + np.concatenate(([0.0], np.cumsum(g_val)))[k_all]
    known: dict[int, tuple[float, int]] = {}  # sweep point -> (exact value, boundary)

    def solve(points: IntArray) -> None:
        boundary, chosen = _sweep_boundaries(g_rank, g_val, s_all[points], k_all[points])
        values = setup[s_all[points]] + chosen
        known.update(zip(points.tolist(), zip(values.tolist(), boundary.tolist(), strict=True), strict=True))

    def best() -> tuple[float, int]:  # (best value, smallest point within rounding of it)
        top = max(value for value, _ in known.values())
        tie = top - 1e-12 * max(1.0, abs(top))
        return top, min(t for t, (value, _) in known.items() if value >= tie)

    solve(np.sort(np.argsort(-bound, kind="stable")[:_FIRST_CANDIDATES]))
    floor = best()[0]
    alive = np.flatnonzero(bound >= floor - 1e-9 * max(1.0, abs(floor)))
    todo = alive[[t not in known for t in alive.tolist()]]
    for start in range(0, todo.size, _SWEEP_CHUNK):
        solve(todo[start : start + _SWEEP_CHUNK])
        top, pick = best()
        rest = todo[start + _SWEEP_CHUNK :]
        if rest.size and float(bound[rest].max()) <= top and pick < int(rest[0]):
            break  # later points can neither beat the best nor win a tie (they have more active prompts)
    pick = best()[1]
    best_s, best_boundary = int(s_all[pick]), known[pick][1]

    counts_sorted = np.zeros(n, dtype=np.int64)
    counts_sorted[:best_s] = low
    if width > 0 and best_boundary > 0:
        sel = g_rank[:best_boundary]
        sel = sel[sel < best_s]
        counts_sorted[:best_s] += np.bincount(sel, minlength=best_s)[:best_s]
    m[order] = counts_sorted
    return m


# ---------------------------------------------------------------------------------------- prefix problem
def _as_caps(max_per_prefix: npt.ArrayLike | None, j: int, default: int) -> IntArray:
    if max_per_prefix is None:
        return np.full(j, default, dtype=np.int64)
    arr = np.asarray(max_per_prefix)
    if arr.ndim == 0:
        return np.full(j, min(_as_int(arr.item(), "max_per_prefix"), default), dtype=np.int64)
    if arr.shape != (j,):
        raise ValueError(f"max_per_prefix must be a scalar or have shape ({j},); got shape {arr.shape}")
    caps = np.array([_as_int(c, "max_per_prefix") for c in arr.tolist()], dtype=np.int64)
    return np.minimum(caps, default)


def _as_costs(cost: npt.ArrayLike | None, j: int) -> IntArray:
    if cost is None:
        return np.ones(j, dtype=np.int64)
    c_arr = np.asarray(cost)
    if c_arr.ndim == 0:
        c_arr = np.full(j, c_arr.item())
    if c_arr.shape != (j,):
        raise ValueError(f"cost must be a scalar or have shape ({j},); got shape {c_arr.shape}")
    return np.array([_as_int(c, "cost", minimum=1) for c in c_arr.tolist()], dtype=np.int64)


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
    probs = _as_probability_vector(q, "q")
    total = _as_int(budget, "budget")
    j = probs.shape[0]
    costs = _as_costs(cost, j)
    if j == 0 or total == 0:
        return np.zeros(j, dtype=np.int64)
    if np.all(costs == costs[0]):
        units = total // int(costs[0])
        caps = _as_caps(max_per_prefix, j, units)
        return _greedy_flip(probs, units, caps)
    caps = np.minimum(_as_caps(max_per_prefix, j, total), total // costs)
    width = int(caps.max())
    ks = np.arange(width + 1)
    table = 1.0 - np.power(probs[:, None], ks[None, :])
    table = np.where(ks[None, :] <= caps[:, None], table, -np.inf)
    return knapsack_dp(table, total, cost=costs, exact=False)


# ------------------------------------------------------------------------------------- contrast objective
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
    probs = _as_probability_vector(q, "q")
    total = _as_int(budget, "budget")
    j = probs.shape[0]
    sib = _as_sibling(sibling, j)
    w = _as_weight(weight)
    costs = _as_costs(cost, j)
    caps = np.minimum(_as_caps(max_per_prefix, j, total), total // costs) if j else np.zeros(0, np.int64)
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


# ------------------------------------------------------------------------------- reference dynamic program
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
        cost: integer cost per unit of each item, shape (P,) or scalar (default 1).
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
    total = _as_int(budget, "budget")
    p, width = table.shape
    costs = (
        np.ones(p, dtype=np.int64)
        if cost is None
        else np.broadcast_to(np.asarray(cost, dtype=np.int64), (p,)).copy()
    )
    if (costs < 1).any():
        raise ValueError("cost must be at least 1")
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
