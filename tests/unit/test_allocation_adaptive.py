"""`trace_adaptive`'s math (`trace_rl.allocation.adaptive`) on hand-computed cases and against brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from trace_rl.allocation import BudgetShape, mixed_probability
from trace_rl.allocation.adaptive import (
    KAPPA_GRID,
    PRIOR_CONCENTRATION,
    PRIOR_FLIP_RATE,
    REEXPLORE_STEPS,
    AdaptiveState,
    adaptive_roots,
    allocate_table,
    beta_binomial_loglik,
    contrastive_value,
    expected_mixed_probability,
    expected_power,
    fit_concentration,
)

SHAPE = BudgetShape(roots=32, continuations=1, group_size=4, min_rollouts=2, max_rollouts=8)


def test_beta_moments_by_hand() -> None:
    # Beta(1, 1) is uniform: E[v^2] = 1/3, E[v^3] = 1/4; Beta(2, 1): E[v] = 2/3, E[v^2] = 2/3 * 3/4 = 1/2
    assert expected_power(1.0, 1.0, 2) == pytest.approx(1 / 3)
    assert expected_power(1.0, 1.0, 3) == pytest.approx(1 / 4)
    assert expected_power(2.0, 1.0, 2) == pytest.approx(1 / 2)
    assert expected_power(3.0, 5.0, 0) == pytest.approx(1.0)
    # v = 1/2, kappa = 2 is the uniform Beta: P_mix(2) = 1 - 1/3 - 1/3 = 1/3 (kappa = inf: 1/2)
    assert expected_mixed_probability([0.5], 2, 2.0)[0] == pytest.approx(1 / 3)
    assert expected_mixed_probability([0.5], 2, math.inf)[0] == pytest.approx(0.5)
    # decided prompts stay decided; m < 2 is never mixed
    assert expected_mixed_probability([0.0, 1.0], 4, 3.0).tolist() == [0.0, 0.0]
    assert expected_mixed_probability([0.3], 1, 3.0)[0] == 0.0
    with pytest.raises(ValueError):
        expected_power(0.0, 1.0, 2)
    with pytest.raises(ValueError):
        expected_mixed_probability([0.5], 2, 0.0)


def test_mixed_probability_limits() -> None:
    v = np.array([0.05, 0.3, 0.5, 0.9])
    for m in (2, 3, 8):
        # a very confident Beta is the paper's objective; a flatter one shrinks every prompt's value
        assert np.allclose(expected_mixed_probability(v, m, 1e7), mixed_probability(v, m), atol=1e-5)
        assert np.all(expected_mixed_probability(v, m, 2.0) <= mixed_probability(v, m) + 1e-12)


def test_contrastive_value_by_hand() -> None:
    # GRPO's normalisation: a mixed group of m has sum A^2 = m - 1, so (m - 1) P_mix: v = 1/2 gives 1 * 1/2, 2 * 3/4
    assert contrastive_value([0.5], 3, math.inf)[0].tolist() == pytest.approx([0.0, 0.0, 0.5, 1.5])
    # Dr. GRPO: (m - 1) v (1 - v) kappa / (kappa + 1)
    assert contrastive_value([0.5], 3, math.inf, normalize_std=False)[0].tolist() == pytest.approx(
        [0.0, 0.0, 0.25, 0.5]
    )
    assert contrastive_value([0.5], 3, 1.0, normalize_std=False)[0].tolist() == pytest.approx(
        [0.0, 0.0, 0.125, 0.25]
    )
    # fewer, larger groups: one prompt at 8 is worth more than two at 4 (7 * 0.992 > 2 * 3 * 0.875)
    t = contrastive_value([0.5, 0.5], 8, math.inf)
    assert t[0, 8] > t[0, 4] + t[1, 4]


def test_group_of_m_has_m_minus_one_squared_advantage_mass() -> None:
    # the identity behind contrastive_value: with the unbiased std, sum_i ((r_i - mean) / std)^2 = m - 1
    from trace_rl.advantages.estimators import group_normalize

    for r in ([1, 0], [1, 0, 0], [1, 1, 0, 0, 0, 1, 0, 1]):
        a = group_normalize(np.asarray(r, dtype=float), eps=0.0)
        assert float(np.sum(a**2)) == pytest.approx(len(r) - 1)


def test_beta_binomial_loglik_by_hand() -> None:
    # v = 1/2, kappa = 2 (uniform): P(k=1 of 2) = C(2,1) B(2,2) / B(1,1) = 2/6; without the coefficient: 1/6
    assert beta_binomial_loglik([0.5], [1], [2], 2.0) == pytest.approx(math.log(1 / 6))
    # kappa = inf is the binomial: 0.3^2 * 0.7 for k = 2 of 3
    assert beta_binomial_loglik([0.3], [2], [3], math.inf) == pytest.approx(math.log(0.3**2 * 0.7))
    with pytest.raises(ValueError):
        beta_binomial_loglik([0.5], [3], [2], 2.0)


def test_fit_concentration_reads_dispersion() -> None:
    n = 60
    v = np.full(n, 0.5)
    trials = np.full(n, 8)
    # every prompt all-pass or all-fail although v = 1/2: the estimates explain nothing, kappa at the grid's bottom
    split = np.where(np.arange(n) % 2 == 0, 8, 0)
    assert fit_concentration(v, split, trials) == KAPPA_GRID[0]
    # exactly binomial counts around v: the estimates are the truth
    assert fit_concentration(v, np.full(n, 4), trials) == math.inf
    # draws from a Beta of concentration 4: the fit lands near it
    rng = np.random.default_rng(0)
    u = rng.beta(2.0, 2.0, 3000)
    k = rng.binomial(8, u)
    kappa = fit_concentration(np.full(3000, 0.5), k, np.full(3000, 8))
    assert 2.5 < kappa < 6.5
    # prompts with one trial say nothing about kappa and are left out
    assert fit_concentration([0.5, 0.5], [1, 0], [1, 1]) == KAPPA_GRID[0]


def _brute(table, budget, lo, max_active, forced):
    p, width = table.shape
    best, arg = -np.inf, None
    for ms in itertools.product([0, *range(lo, width)], repeat=p):
        if sum(ms) != budget or sum(m > 0 for m in ms) > max_active:
            continue
        if any(f and m == 0 for f, m in zip(forced, ms, strict=True)):
            continue
        val = sum(table[i, m] for i, m in enumerate(ms))
        if val > best + 1e-12:
            best, arg = val, ms
    return best, arg


@pytest.mark.parametrize("seed", range(12))
def test_allocate_table_is_exact(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p, width = 4, 5
    table = np.cumsum(rng.random((p, width)), axis=1) - rng.random((p, 1))
    table[:, 0] = 0.0
    budget = int(rng.integers(2, 12))
    max_active = int(rng.integers(1, 5))
    forced = rng.random(p) < 0.3
    best, arg = _brute(table, budget, 2, max_active, forced)
    if arg is None:
        with pytest.raises(ValueError, match="no allocation"):
            allocate_table(table, budget, max_active=max_active, forced=forced)
        return
    m = allocate_table(table, budget, max_active=max_active, forced=forced)
    assert m.sum() == budget and np.count_nonzero(m) <= max_active
    assert np.all(m[forced] >= 2) and np.all((m == 0) | (m >= 2))
    assert table[np.arange(p), m].sum() == pytest.approx(best)


def test_adaptive_roots_prefers_large_groups_and_covers() -> None:
    v = np.full(48, 0.5)
    plan = adaptive_roots(v, SHAPE, np.random.default_rng(0), AdaptiveState(), coverage=0.5)
    # equal estimates: the value of (m - 1) P_mix prefers groups at the cap; 6 x 8 spend the 48 of an all-roots step
    assert plan.info["replays_on"] == 0.0 and sorted(plan.rollouts[plan.rollouts > 0].tolist()) == [8] * 6
    assert plan.info["covered"] == 3.0 and plan.info["kappa"] == PRIOR_CONCENTRATION
    assert plan.replay_budget.sum() == 0
    # a decided prompt is skipped unless the coverage floor draws it
    v2 = np.concatenate([np.full(40, 0.999), np.full(8, 0.5)])
    plan2 = adaptive_roots(v2, SHAPE, np.random.default_rng(1), AdaptiveState(), coverage=0.0)
    assert set(np.flatnonzero(plan2.rollouts)) <= set(range(40, 48))
    with pytest.raises(ValueError, match="coverage"):
        adaptive_roots(v, SHAPE, np.random.default_rng(0), AdaptiveState(), coverage=1.5)


def test_adaptive_roots_coverage_draws_uniform_prompts() -> None:
    # coverage 1: every active prompt is a uniform draw, so decided prompts get trained on as often as the others
    v = np.concatenate([np.full(24, 0.999), np.full(24, 0.5)])
    hits = np.zeros(48)
    for s in range(40):
        plan = adaptive_roots(v, SHAPE, np.random.default_rng(s), AdaptiveState(), coverage=1.0)
        hits += plan.rollouts > 0
    assert abs(hits[:24].sum() - hits[24:].sum()) / hits.sum() < 0.1


def test_adaptive_roots_split_follows_the_flip_rate() -> None:
    v = np.full(48, 0.5)
    flips = AdaptiveState()
    flips.observe([], [], [], replays=32, flips=32, estimates_used=False)  # every replay flipped
    plan = adaptive_roots(v, SHAPE, np.random.default_rng(0), flips)
    assert plan.info["replays_on"] == 1.0 and plan.root_rollouts == SHAPE.roots
    assert SHAPE.spent(plan.root_rollouts, plan.replay_budget.sum()) == pytest.approx(SHAPE.total)
    none = AdaptiveState()
    none.observe([], [], [], replays=32, flips=0, estimates_used=False)
    assert adaptive_roots(v, SHAPE, np.random.default_rng(0), none).info["replays_on"] == 0.0
    # without replays for REEXPLORE_STEPS - 1 steps, the next step replays again to re-measure the flip rate
    for _ in range(REEXPLORE_STEPS - 1):
        none.observe([], [], [], replays=0, flips=0, estimates_used=False)
    assert adaptive_roots(v, SHAPE, np.random.default_rng(0), none).info["replays_on"] == 1.0


def test_adaptive_state_window_and_round_trip() -> None:
    st = AdaptiveState(window=2)
    assert st.flip_rate() == PRIOR_FLIP_RATE and st.concentration() == PRIOR_CONCENTRATION
    for i in range(3):
        st.observe([0.5] * 12, [4] * 12, [8] * 12, replays=10, flips=i, estimates_used=True)
    assert st.flip_rate() == pytest.approx(3 / 20)  # the last two steps only
    assert st.concentration() == math.inf  # 24 prompts (the minimum) met exactly their expected counts
    st.observe(
        [0.5] * 12, [4] * 12, [8] * 12, replays=0, flips=0, estimates_used=False
    )  # cold start: not kept
    assert len(st.outcomes) == 2 and st.since_replays == 1
    st.observe([0.5] * 12, [4] * 12, [8] * 12, replays=0, flips=0, estimates_used=True)
    other = AdaptiveState()
    other.load_state_dict(st.state_dict())
    assert other.state_dict() == st.state_dict() and other.concentration() == st.concentration() == math.inf
    with pytest.raises(ValueError, match="malformed"):
        other.load_state_dict({"window": 2})
    with pytest.raises(ValueError, match="flips"):
        st.observe([], [], [], replays=1, flips=2, estimates_used=False)


def test_fit_calibration_reads_ranking_and_confidence() -> None:
    from trace_rl.allocation.adaptive import Calibration, fit_calibration

    rng = np.random.default_rng(0)
    u = rng.beta(0.6, 0.9, 400)
    k = rng.binomial(8, u)
    n = np.full(400, 8)
    logit = np.log(u / (1 - u))
    # an under-confident predictor that ranks well (its logits shrunk by 2.5): stretched back, beta near 2.5
    shrunk = 1 / (1 + np.exp(-logit / 2.5))
    cal = fit_calibration(shrunk, k, n)
    assert 2.0 <= cal.beta <= 3.0 and cal.kappa > 30
    # estimates unrelated to the outcomes: beta 0, every prompt at the base rate, kappa the prompts' spread
    noise = fit_calibration(rng.uniform(0.2, 0.8, 400), k, n)
    assert noise.beta <= 0.25 and noise.kappa < 4
    assert np.ptp(Calibration(0.0, 0.0, 1.0).mean(rng.uniform(0.01, 0.99, 10))) == pytest.approx(0.0)
    assert Calibration().mean([0.3]).tolist() == pytest.approx([0.3])  # the identity


def test_uninformative_calibration_makes_allocation_uniform() -> None:
    # after a window of outcomes that the estimates do not predict, the allocation stops following v
    rng = np.random.default_rng(3)
    st = AdaptiveState()
    for _ in range(5):
        v = rng.uniform(0.05, 0.95, 12)
        st.observe(v, rng.binomial(8, 0.4, 12), np.full(12, 8), replays=0, flips=0, estimates_used=True)
    assert st.calibration().beta <= 0.25
    v = np.concatenate([np.full(24, 0.02), np.full(24, 0.5)])  # the predictor says half the pool is decided
    hits = np.zeros(48)
    for s in range(20):
        hits += adaptive_roots(v, SHAPE, np.random.default_rng(s), st, coverage=0.0).rollouts > 0
    assert 0.3 < hits[:24].sum() / hits.sum() < 0.7


def test_no_continuations_never_replays() -> None:
    shape = BudgetShape(roots=64, continuations=0, group_size=8, max_rollouts=12)  # the demo preset's shape
    st = AdaptiveState()
    for _ in range(2 * REEXPLORE_STEPS):
        plan = adaptive_roots(np.full(64, 0.5), shape, np.random.default_rng(0), st)
        assert plan.info["replays_on"] == 0.0 and plan.replay_budget.sum() == 0 and plan.root_rollouts == 64
        st.observe([], [], [], replays=0, flips=0, estimates_used=False)


def test_edges_found_in_review() -> None:
    from trace_rl.allocation.adaptive import Calibration, fit_calibration

    # no prompt with 2 trials: the prior reading, not the grid's first corner
    assert fit_calibration([0.5] * 30, [1] * 30, [1] * 30) == Calibration()
    assert fit_calibration([], [], []) == Calibration()
    st = AdaptiveState()
    for _ in range(3):
        st.observe([0.5] * 10, [1] * 10, [1] * 10, replays=0, flips=0, estimates_used=True)
    assert st.calibration() == Calibration()
    with pytest.raises(ValueError, match="successes"):
        st.observe([0.5], [3], [2], replays=0, flips=0, estimates_used=True)
    with pytest.raises(ValueError, match="max_active"):
        allocate_table(np.zeros((3, 5)), 4, max_active=-1)
