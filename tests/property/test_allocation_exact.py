"""Exactness of the allocators against brute force and the reference dynamic program (hypothesis)."""

import itertools

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trace_rl.allocation import (
    allocate_prefixes,
    allocate_roots,
    flip_probability,
    knapsack_dp,
    mixed_probability,
)

probs = st.one_of(st.sampled_from([0.0, 0.02, 0.1, 0.5, 0.9, 0.99, 1.0]), st.floats(0.0, 1.0))


def brute_force_roots(v, budget, low, cap, max_active):
    best = None
    for combo in itertools.product(range(cap + 1), repeat=len(v)):
        m = np.array(combo)
        if m.sum() != budget or ((m > 0) & (m < low)).any() or (m > 0).sum() > max_active:
            continue
        val = mixed_probability(v, m).sum()
        best = val if best is None else max(best, val)
    return best


@settings(max_examples=150, deadline=None)
@given(
    v=st.lists(probs, min_size=1, max_size=4),
    budget=st.integers(0, 12),
    low=st.integers(1, 3),
    cap=st.integers(1, 6),
    max_active=st.integers(0, 4),
)
def test_roots_optimal_vs_brute_force(v, budget, low, cap, max_active) -> None:
    v = np.array(v)
    assume(cap >= low)
    best = brute_force_roots(v, budget, low, cap, max_active)
    try:
        m = allocate_roots(v, budget, min_rollouts=low, max_rollouts=cap, max_active=max_active)
    except ValueError:
        assert best is None, "solver called a feasible problem infeasible"
        return
    assert best is not None
    assert m.sum() == budget
    assert ((m == 0) | ((m >= low) & (m <= cap))).all()
    assert (m > 0).sum() <= max_active
    assert mixed_probability(v, m).sum() >= best - 1e-9


@settings(max_examples=100, deadline=None)
@given(
    v=st.lists(probs, min_size=1, max_size=12), budget=st.integers(0, 40), cap=st.none() | st.integers(2, 12)
)
def test_roots_optimal_vs_dp_larger(v, budget, cap) -> None:
    roots_match_dp(np.array(v), budget, cap)


@settings(max_examples=40, deadline=None)
@given(v=st.lists(probs, min_size=8, max_size=40), budget=st.integers(16, 160), cap=st.integers(2, 10))
def test_roots_optimal_vs_dp_many_buckets(v, budget, cap) -> None:
    """Problems big enough for several buckets in the vectorised sweep (issue 16)."""
    roots_match_dp(np.array(v), budget, cap)


def dp_optimum(v: np.ndarray, budget: int, cap: int | None) -> float | None:
    """The reference DP's optimal objective of the root problem (0-or->=2 rule), None when infeasible."""
    ms = np.arange((budget if cap is None else cap) + 1)
    table = mixed_probability(v[:, None], ms[None, :])
    table[:, 1:2] = -np.inf
    try:
        return float(mixed_probability(v, knapsack_dp(table, budget)).sum())
    except ValueError:
        return None


def roots_match_dp(v: np.ndarray, budget: int, cap: int | None) -> None:
    best = dp_optimum(v, budget, cap)
    try:
        m = allocate_roots(v, budget, max_rollouts=cap)
    except ValueError:
        assert best is None
        return
    assert best is not None and m.sum() == budget
    np.testing.assert_allclose(mixed_probability(v, m).sum(), best, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(v=st.lists(probs, min_size=2, max_size=10), budget=st.integers(2, 30))
def test_roots_value_monotone_in_budget(v, budget) -> None:
    v = np.array(v)
    a = mixed_probability(v, allocate_roots(v, budget)).sum()
    b = mixed_probability(v, allocate_roots(v, budget + 1)).sum()
    assert b >= a - 1e-12


@settings(max_examples=150, deadline=None)
@given(
    q=st.lists(probs, min_size=1, max_size=6),
    budget=st.integers(0, 14),
    costs=st.none() | st.lists(st.integers(1, 4), min_size=6, max_size=6),
    cap=st.none() | st.integers(0, 5),
)
def test_prefixes_optimal_vs_dp(q, budget, costs, cap) -> None:
    q = np.array(q)
    c = None if costs is None else np.array(costs[: q.size])
    k = allocate_prefixes(q, budget, cost=c, max_per_prefix=cap)
    unit = np.ones(q.size, dtype=int) if c is None else c
    assert (k >= 0).all() and (unit * k).sum() <= budget
    if cap is not None:
        assert (k <= cap).all()
    ks = np.arange(budget + 1)
    table = flip_probability(q[:, None], ks[None, :])
    if cap is not None:
        table[:, cap + 1 :] = -np.inf
    ref = knapsack_dp(table, budget, cost=unit, exact=False)
    np.testing.assert_allclose(flip_probability(q, k).sum(), flip_probability(q, ref).sum(), atol=1e-9)
    if c is None:  # unit costs: the whole budget is spent whenever the caps allow
        assert k.sum() == min(budget, q.size * (budget if cap is None else cap))


@settings(max_examples=50, deadline=None)
@given(q=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=50), budget=st.integers(0, 200))
def test_prefixes_monotone_in_budget(q, budget) -> None:
    q = np.array(q)
    assert (
        flip_probability(q, allocate_prefixes(q, budget + 1)).sum()
        >= flip_probability(q, allocate_prefixes(q, budget)).sum() - 1e-12
    )


@settings(max_examples=80, deadline=None)
@given(
    q=st.lists(probs, min_size=1, max_size=30),
    budget=st.integers(0, 60),
    cap=st.none() | st.integers(0, 8),
)
def test_prefix_paths_agree(q, budget, cap) -> None:
    """The direct sort (small problems) and the log-threshold search (large ones) reach the same optimum."""
    import trace_rl.allocation.prefixes as prefixes

    q = np.array(q)
    direct = allocate_prefixes(q, budget, max_per_prefix=cap)
    saved = prefixes._DIRECT_LIMIT
    prefixes._DIRECT_LIMIT = 0
    try:
        search = allocate_prefixes(q, budget, max_per_prefix=cap)
    finally:
        prefixes._DIRECT_LIMIT = saved
    assert direct.sum() == search.sum()
    np.testing.assert_allclose(
        flip_probability(q, direct).sum(), flip_probability(q, search).sum(), atol=1e-9
    )
