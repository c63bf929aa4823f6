"""Allocation solvers vs a straightforward O(N * B * K) dynamic program, in the same run.

    python benchmarks/allocation.py [--repeats 5] [--json]

Workloads (issue 2): allocate_roots on 1024 candidates, budget 8192, max 64 rollouts per prompt (also against
its previous implementation, the boundary walk in a Python loop, `allocate_roots_loop` below; issue 16);
allocate_prefixes on 4096 anchors, budget 8192 (the DP needs a bound K on replays per anchor: both solvers get
max_per_prefix=16 so they solve the same problem; our solver uncapped is timed too). Prints medians in ms and
the speed-up; checks that both reach the same objective value.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from bisect import bisect_left

import numpy as np

from trace_rl.allocation import allocate_prefixes, allocate_roots, flip_probability, mixed_probability
from trace_rl.allocation.roots import _mixed_increments


def allocate_roots_loop(v: np.ndarray, total: int, *, low: int = 2, cap: int) -> np.ndarray:
    """The previous allocate_roots sweep (before issue 16): one boundary walked through a Python loop.

    Valid inputs only (no validation, no max_active); kept to time the vectorised sweep against it.
    """
    n = v.shape[0]
    m = np.zeros(n, dtype=np.int64)
    s_lo, s_hi = -(-total // cap), min(n, total // low)
    balance = np.minimum(v, 1.0 - v)
    order = np.lexsort((np.arange(n), -balance))
    v_sorted = v[order]
    base = np.maximum(1.0 - np.power(v_sorted, low) - np.power(1.0 - v_sorted, low), 0.0)
    setup = np.concatenate(([0.0], np.cumsum(base)))
    width = min(cap - low, total - low * s_lo)
    inc = _mixed_increments(v_sorted[:s_hi], low, width)
    rows = np.repeat(np.arange(s_hi), width)
    flat = inc.ravel()
    glob = np.argsort(-flat, kind="stable")
    g_rank, g_val = rows[glob], flat[glob]
    position = np.empty(s_hi * width, dtype=np.int64)
    position[glob] = np.arange(s_hi * width)
    row_pos = position.reshape(s_hi, width).tolist()
    row_cum = np.concatenate((np.zeros((s_hi, 1)), np.cumsum(inc, axis=1)), axis=1)
    k = total - low * s_lo
    on = g_rank < s_lo
    boundary = int(np.searchsorted(np.cumsum(on), k)) + 1 if k > 0 else 0
    chosen = float(g_val[:boundary][on[:boundary]].sum()) if boundary else 0.0
    count, best_s, best_boundary = k, s_lo, boundary
    best_value = setup[s_lo] + chosen
    ranks, vals = g_rank.tolist(), g_val.tolist()
    for s in range(s_lo, s_hi):
        a = bisect_left(row_pos[s], boundary) if boundary else 0
        chosen += float(row_cum[s, a])
        count += a
        target = k - low * (s + 1 - s_lo)
        while count > target:
            boundary -= 1
            if ranks[boundary] <= s:
                count -= 1
                chosen -= vals[boundary]
        value = setup[s + 1] + chosen
        if value > best_value + 1e-12 * max(1.0, abs(best_value)):
            best_s, best_boundary, best_value = s + 1, boundary, value
    counts_sorted = np.zeros(n, dtype=np.int64)
    counts_sorted[:best_s] = low
    sel = g_rank[:best_boundary]
    sel = sel[sel < best_s]
    counts_sorted[:best_s] += np.bincount(sel, minlength=best_s)[:best_s]
    m[order] = counts_sorted
    return m


def straightforward_dp(values: np.ndarray, budget: int, exact: bool) -> np.ndarray:
    """best[i][b] = max_k best[i-1][b-k] + values[i, k]; O(N * B * K) with a numpy loop over k."""
    n, width = values.shape
    best = np.full(budget + 1, -np.inf)
    best[0] = 0.0
    choice = np.zeros((n, budget + 1), dtype=np.int64)
    for i in range(n):
        new = np.full(budget + 1, -np.inf)
        for k in range(min(width, budget + 1)):
            if values[i, k] == -np.inf:
                continue
            cand = np.full(budget + 1, -np.inf)
            cand[k:] = best[: budget + 1 - k] + values[i, k]
            better = cand > new
            new[better] = cand[better]
            choice[i, better] = k
        best = new
    b = budget if exact else int(np.argmax(best))
    out = np.zeros(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        out[i] = choice[i, b]
        b -= out[i]
    return out


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dp-repeats", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)

    v = rng.beta(0.6, 0.6, size=1024)  # many prompts near 0 or 1, as in practice
    root_ms, m = timed(lambda: allocate_roots(v, 8192, max_rollouts=64), args.repeats)
    root_loop_ms, m_loop = timed(lambda: allocate_roots_loop(v, 8192, cap=64), args.repeats)
    v_half = rng.uniform(0.3, 0.7, size=1024)  # all prompts undecided: a different boundary walk
    half_ms, m_half = timed(lambda: allocate_roots(v_half, 8192, max_rollouts=64), args.repeats)
    half_loop_ms, m_half_loop = timed(lambda: allocate_roots_loop(v_half, 8192, cap=64), args.repeats)
    v_tied = rng.choice([0.0, 1.0], size=1024)  # worst case: every value ties, no number of prompts is pruned
    tied_ms, m_tied = timed(lambda: allocate_roots(v_tied, 8192, max_rollouts=64), args.repeats)
    tied_loop_ms, m_tied_loop = timed(lambda: allocate_roots_loop(v_tied, 8192, cap=64), args.repeats)
    table = mixed_probability(v[:, None], np.arange(65)[None, :])
    table[:, 1] = -np.inf
    root_dp_ms, m_dp = timed(lambda: straightforward_dp(table, 8192, exact=True), args.dp_repeats)
    root_gap = float(mixed_probability(v, m_dp).sum() - mixed_probability(v, m).sum())

    q = rng.uniform(0.05, 0.999, size=4096)
    pref_ms, k = timed(lambda: allocate_prefixes(q, 8192, max_per_prefix=16), args.repeats)
    pref_free_ms, _ = timed(lambda: allocate_prefixes(q, 8192), args.repeats)
    ptable = flip_probability(q[:, None], np.arange(17)[None, :])
    pref_dp_ms, k_dp = timed(lambda: straightforward_dp(ptable, 8192, exact=False), args.dp_repeats)
    pref_gap = float(flip_probability(q, k_dp).sum() - flip_probability(q, k).sum())

    out = {
        "roots_ms": round(root_ms, 2),
        "roots_loop_ms": round(root_loop_ms, 2),
        "roots_same_as_loop": bool(np.array_equal(m, m_loop)),
        "roots_uniform_v_ms": round(half_ms, 2),
        "roots_uniform_v_loop_ms": round(half_loop_ms, 2),
        "roots_uniform_v_same_as_loop": bool(np.array_equal(m_half, m_half_loop)),
        "roots_all_tied_ms": round(tied_ms, 2),
        "roots_all_tied_loop_ms": round(tied_loop_ms, 2),
        "roots_all_tied_same_as_loop": bool(np.array_equal(m_tied, m_tied_loop)),
        "roots_dp_ms": round(root_dp_ms, 1),
        "roots_speedup": round(root_dp_ms / root_ms, 1),
        "roots_dp_minus_ours": root_gap,
        "prefixes_ms": round(pref_ms, 2),
        "prefixes_uncapped_ms": round(pref_free_ms, 2),
        "prefixes_dp_ms": round(pref_dp_ms, 1),
        "prefixes_speedup": round(pref_dp_ms / pref_ms, 1),
        "prefixes_dp_minus_ours": pref_gap,
    }
    if args.json:
        print(json.dumps(out))
    else:
        for key, val in out.items():
            print(f"{key:26s} {val}")


if __name__ == "__main__":
    main()
