"""Exact root allocation (`allocate_roots`): rollouts per candidate prompt maximising the expected mixed groups.

The paper (Zou et al. 2026, arXiv 2606.11119) solves it "exactly with a small dynamic program". We solve the
same problem exactly, faster than a dynamic program, using its structure (proofs in docs/allocation.md;
exactness is also tested against brute force and against the reference dynamic program `knapsack_dp` in
tests/property/test_allocation_exact.py):

P_mix(v, m) = 1 - v^m - (1-v)^m has increments D(m) = v^m (1-v) + (1-v)^m v that decrease in m, so once a
prompt is active (m >= L) its value is concave in m; and for every fixed m, P_mix(v, m) grows as v moves toward
1/2. Hence (exchange argument) an optimal active set is always a prefix of the prompts sorted by |v - 1/2|, and
given the active set the rest of the budget is spent greedily on the largest increments. `allocate_roots` sorts
all increments once, bounds the value of every number of active prompts s from above, and solves exactly
(vectorised, `_sweep_boundaries`) only the s whose bound can still reach the best value.

Floating-point note: "exact" means exact for the computed objective values; two allocations whose objectives
differ by less than about 1e-12 may be swapped by rounding. `allocate_roots` computes its powers with
multiplications only (`_int_power`) and its sums left to right, so its result is the same on every platform
and equals the JavaScript port behind `trace-rl explore` (src/trace_rl/explore/allocate_roots.js).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.validation import FloatArray, IntArray, as_int, as_probability_vector

__all__ = ["allocate_roots"]

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
    probs = as_probability_vector(v, "v")
    total = as_int(budget, "budget")
    low = as_int(min_rollouts, "min_rollouts", minimum=1)
    n = probs.shape[0]
    cap = total if max_rollouts is None else as_int(max_rollouts, "max_rollouts", minimum=1)
    if max_rollouts is not None and cap < low:
        raise ValueError(f"max_rollouts ({cap}) must be at least min_rollouts ({low})")
    limit = n if max_active is None else min(n, as_int(max_active, "max_active"))

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
