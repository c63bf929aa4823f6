"""Root and prefix solvers: the blog's six-prompt scenario, hand cases, edge cases and errors."""

import numpy as np
import pytest

from trace_rl.allocation import (
    allocate_prefixes,
    allocate_roots,
    flip_probability,
    knapsack_dp,
    mixed_probability,
)

SIX = np.array([0.99, 0.90, 0.50, 0.50, 0.15, 0.02])


def test_six_prompt_tight_budget_goes_to_the_middle() -> None:
    # budget 4: both coin-flip prompts get 2 (P_mix 0.5 each = 1.0); anything else is worse, e.g. 0.9 gets 0.18.
    np.testing.assert_array_equal(allocate_roots(SIX, 4), [0, 0, 2, 2, 0, 0])
    for b in range(4, 8):
        m = allocate_roots(SIX, b)
        assert m[[0, 1, 4, 5]].sum() == 0, (b, m)


def test_six_prompt_behaviour_over_the_budget_range() -> None:
    allocs = {b: allocate_roots(SIX, b) for b in range(2, 49)}
    # the 0.99 prompt never gets rollouts
    assert all(m[0] == 0 for m in allocs.values())
    # coin-flip prompts saturate: from budget 16 on they hold 4-6 rollouts, and 5 rollouts already give > 0.9
    assert all(4 <= m[2] <= 6 and 4 <= m[3] <= 6 for b, m in allocs.items() if b >= 16)
    assert mixed_probability(0.5, 5) > 0.9
    # growth flows to the 0.90 and 0.15 prompts
    assert allocs[48][1] > allocs[16][1] and allocs[48][4] > allocs[16][4]
    assert allocs[48][1] + allocs[48][4] > allocs[48][2] + allocs[48][3]
    # the 0.02 prompt only near the top of the range
    first = min(b for b, m in allocs.items() if m[5] > 0)
    assert first >= 40, first


def test_six_prompt_budget_16_beats_uniform() -> None:
    m = allocate_roots(SIX, 16)
    np.testing.assert_array_equal(m, [0, 3, 4, 4, 5, 0])
    uniform = np.array([3, 3, 3, 3, 2, 2])
    assert mixed_probability(SIX, m).sum() > mixed_probability(SIX, uniform).sum()


def test_roots_caps_and_max_active() -> None:
    v = np.array([0.5, 0.5, 0.5, 0.3])
    m = allocate_roots(v, 12, max_rollouts=3)
    np.testing.assert_array_equal(m, [3, 3, 3, 3])
    m = allocate_roots(v, 12, max_active=2)
    assert (m > 0).sum() <= 2 and m.sum() == 12
    # with 3 active and min 3 each: exactly [3+x...]; budget 9 -> three prompts at 3 (0.75 each) beats 2 at 4/5
    m = allocate_roots(v, 9, min_rollouts=3)
    assert set(m.tolist()) <= {0, 3, 4, 5, 6, 7, 8, 9} and m.sum() == 9


def test_roots_zero_budget_and_empty_pool() -> None:
    np.testing.assert_array_equal(allocate_roots([0.2, 0.4], 0), [0, 0])
    assert allocate_roots([], 0).shape == (0,)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"v": [0.5, 0.5], "budget": 1}, "at least min_rollouts=2"),
        ({"v": [0.5, 0.5], "budget": 10, "max_rollouts": 4}, "at most 8"),
        ({"v": [0.5, 0.5], "budget": 6, "max_active": 1, "max_rollouts": 4}, "at most 4"),
        ({"v": [], "budget": 4}, "no prompt may be active"),
        ({"v": [0.5, np.nan], "budget": 4}, "NaN"),
        ({"v": [0.5, 1.1], "budget": 4}, "must lie in"),
        ({"v": [0.5], "budget": -2}, "at least 0"),
        ({"v": [0.5], "budget": 2.5}, "whole number"),
        ({"v": [[0.5]], "budget": 2}, "1-D"),
        ({"v": [0.5], "budget": 4, "max_rollouts": 1}, "at least min_rollouts"),
        ({"v": [0.5], "budget": 4, "min_rollouts": 0}, "at least 1"),
    ],
)
def test_roots_invalid(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        allocate_roots(**kwargs)


def test_prefixes_hand_case() -> None:
    # increments q^k (1-q): q=0.5 -> .5, .25, .125 ; q=0.9 -> .1, .09 ; q=1 -> 0.
    # budget 3 takes .5, .25, .125 -> k = [3, 0, 0]
    np.testing.assert_array_equal(allocate_prefixes([0.5, 0.9, 1.0], 3), [3, 0, 0])
    # budget 5: .5 .25 .125 .1 .09 (q=0.9's second, 0.9 * 0.1, beats q=0.5's fourth, .0625) -> [3, 2, 0]
    np.testing.assert_array_equal(allocate_prefixes([0.5, 0.9, 1.0], 5), [3, 2, 0])
    # caps: max 1 each -> one replay per useful anchor, the rest of the budget on the useless one (exact sum)
    np.testing.assert_array_equal(allocate_prefixes([0.5, 0.9, 1.0], 3, max_per_prefix=1), [1, 1, 1])


def test_prefixes_spend_whole_budget_and_spread_useless_replays() -> None:
    k = allocate_prefixes([1.0, 1.0, 1.0], 7)
    assert k.sum() == 7 and k.max() - k.min() <= 1
    # q = 0: one replay flips for sure, further replays add nothing
    k = allocate_prefixes([0.0, 0.0, 0.99], 4)
    assert k[0] >= 1 and k[1] >= 1 and k.sum() == 4


def test_prefixes_unequal_costs_match_dp() -> None:
    q = np.array([0.5, 0.8, 0.95])
    cost = np.array([3, 1, 2])
    k = allocate_prefixes(q, 7, cost=cost)
    assert (k * cost).sum() <= 7
    # brute force over k0 <= 2, k1 <= 7, k2 <= 3
    best = max(
        flip_probability(q, np.array([a, b, c])).sum()
        for a in range(3)
        for b in range(8)
        for c in range(4)
        if 3 * a + b + 2 * c <= 7
    )
    assert flip_probability(q, k).sum() == pytest.approx(best)


def test_prefixes_uniform_cost_divides_budget() -> None:
    k = allocate_prefixes([0.5, 0.5], 7, cost=2)
    assert k.sum() == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"q": [0.5], "budget": -1}, "at least 0"),
        ({"q": [0.5, 2.0], "budget": 3}, "must lie in"),
        ({"q": [0.5], "budget": 3, "cost": [0]}, "at least 1"),
        ({"q": [0.5, 0.5], "budget": 3, "cost": [1, 2, 3]}, "shape"),
        ({"q": [0.5], "budget": 3, "max_per_prefix": -1}, "at least 0"),
    ],
)
def test_prefixes_invalid(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        allocate_prefixes(**kwargs)


def test_knapsack_dp_exact_and_infeasible() -> None:
    # two items, values for k = 0..2; exact budget 2: best is (1,1) = 3 + 4 = 7 vs (2,0)=5 or (0,2)=6
    table = np.array([[0.0, 3.0, 5.0], [0.0, 4.0, 6.0]])
    np.testing.assert_array_equal(knapsack_dp(table, 2), [1, 1])
    with pytest.raises(ValueError, match="exactly"):
        knapsack_dp(np.array([[0.0, -np.inf, 1.0]]), 1)


@pytest.mark.parametrize("cost", [1.5, True, "2", [1, 1, 1], 0])
def test_knapsack_dp_checks_costs_like_the_other_solvers(cost: object) -> None:
    table = np.array([[0.0, 3.0, 5.0], [0.0, 4.0, 6.0]])
    with pytest.raises(ValueError, match="cost"):
        knapsack_dp(table, 2, cost=cost)  # type: ignore[arg-type]
    np.testing.assert_array_equal(knapsack_dp(table, 4, cost=2), [1, 1])
