"""Exactness of `allocate_contrast` (the contrast objective of the prefix stage) against brute force (hypothesis)."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trace_rl.allocation import allocate_contrast, contrast_value

probs = st.one_of(st.sampled_from([0.0, 0.05, 0.5, 0.9, 0.97, 1.0]), st.floats(0.0, 1.0))


def brute_force(q, budget, unanimous, sibling, weight, cost, cap):
    best = 0.0
    top = [budget // int(c) if cap is None else min(budget // int(c), cap) for c in cost]
    for combo in itertools.product(*(range(t + 1) for t in top)):
        k = np.array(combo)
        if (cost * k).sum() > budget:
            continue
        best = max(best, contrast_value(q, k, unanimous=unanimous, sibling=sibling, weight=weight))
    return best


@settings(max_examples=150, deadline=None)
@given(
    q=st.lists(probs, min_size=1, max_size=4),
    budget=st.integers(0, 9),
    unanimous=st.booleans(),
    weight=st.sampled_from([0.0, 0.25, 1.0, 3.0]),
    data=st.data(),
)
def test_contrast_optimal_vs_brute_force(q, budget, unanimous, weight, data) -> None:
    q = np.array(q)
    j = q.shape[0]
    sibling = np.array(data.draw(st.lists(st.booleans(), min_size=j, max_size=j)))
    cost = np.array(data.draw(st.lists(st.integers(1, 3), min_size=j, max_size=j)))
    cap = data.draw(st.one_of(st.none(), st.integers(0, 4)))
    k = allocate_contrast(
        q, budget, unanimous=unanimous, sibling=sibling, weight=weight, cost=cost, max_per_prefix=cap
    )
    assert k.shape == (j,) and (k >= 0).all() and int((cost * k).sum()) <= budget
    assert cap is None or (k <= cap).all()
    got = contrast_value(q, k, unanimous=unanimous, sibling=sibling, weight=weight)
    want = brute_force(q, budget, unanimous, sibling, weight, cost, cap)
    assert got >= want - 1e-9 * max(1.0, want)


@settings(max_examples=60, deadline=None)
@given(q=st.lists(st.floats(0.01, 0.99), min_size=2, max_size=5), budget=st.integers(1, 8))
def test_unit_costs_spend_the_whole_budget(q, budget) -> None:
    """Every replay from an anchor with q < 1 adds contrast, so with unit costs the budget is spent in full."""
    for unanimous in (True, False):
        k = allocate_contrast(np.array(q), budget, unanimous=unanimous, weight=1.0)
        assert int(k.sum()) == budget


def test_where_the_marginal_greedy_fails_the_solver_is_exact() -> None:
    """docs/allocation.md's counterexample: the greedy on marginal gains (1 - q_j)(P + w q_j^k_j) takes anchors
    3, 2, 3, 1 -> (1, 1, 2), C = 2.614392; the optimum is (1, 2, 1), C = 2.6161 (brute force agrees)."""
    q, ones = np.array([0.71, 0.5, 0.36]), np.ones(3, np.int64)
    k = allocate_contrast(q, 4, unanimous=True, weight=1.0)
    assert k.tolist() == [1, 2, 1]
    best = brute_force(q, 4, True, np.ones(3, bool), 1.0, ones, None)
    assert abs(contrast_value(q, k, unanimous=True) - best) < 1e-12
    assert contrast_value(q, [1, 1, 2], unanimous=True) < contrast_value(q, k, unanimous=True) - 1e-3
