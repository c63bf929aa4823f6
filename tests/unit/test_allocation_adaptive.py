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


def _ranked_state(seed: int = 0) -> AdaptiveState:
    """A state whose window shows estimates that rank: outcomes drawn from Binomial(8, v) at the estimate v."""
    rng = np.random.default_rng(seed)
    st = AdaptiveState()
    for _ in range(3):
        v = rng.uniform(0.02, 0.98, 12)
        st.observe(v, rng.binomial(8, v), np.full(12, 8), replays=0, flips=0, estimates_used=True)
    assert st.calibration().ranks
    return st


def test_adaptive_roots_is_grpo_until_the_predictor_ranks() -> None:
    from trace_rl.allocation import grpo_roots

    v = np.random.default_rng(5).uniform(0.0, 1.0, 48)
    # no outcomes yet (the prior reading ranks nothing): GRPO's plan, drawn exactly as GRPO draws it
    plan = adaptive_roots(v, SHAPE, np.random.default_rng(7), AdaptiveState())
    grpo = grpo_roots(v, SHAPE, np.random.default_rng(7))
    assert plan.rollouts.tolist() == grpo.rollouts.tolist() and plan.replay_budget.sum() == 0
    assert plan.info["ranks"] == 0.0 and plan.info["replays_on"] == 0.0 and plan.method == "trace_adaptive"
    # outcomes the estimates do not predict: still GRPO's plan, whatever the flip rate
    rng = np.random.default_rng(3)
    st = AdaptiveState()
    for _ in range(5):
        st.observe(
            rng.uniform(0.05, 0.95, 12),
            rng.binomial(8, 0.4, 12),
            np.full(12, 8),
            replays=8,
            flips=8,
            estimates_used=True,
        )
    assert not st.calibration().ranks
    plan = adaptive_roots(v, SHAPE, np.random.default_rng(7), st)
    assert plan.rollouts.tolist() == grpo.rollouts.tolist() and plan.info["replays_on"] == 0.0


def test_adaptive_roots_with_a_ranking_predictor_selects_and_covers() -> None:
    st = _ranked_state()
    # a decided prompt is skipped unless the coverage floor draws it
    v2 = np.concatenate([np.full(40, 0.999), np.full(8, 0.5)])
    plan2 = adaptive_roots(v2, SHAPE, np.random.default_rng(1), st, coverage=0.0)
    assert plan2.info["ranks"] == 1.0 and set(np.flatnonzero(plan2.rollouts)) <= set(range(40, 48))
    # the floor: ceil(coverage * A) of the A active prompts are uniform draws and must be active
    plan = adaptive_roots(v2, SHAPE, np.random.default_rng(1), st, coverage=0.5)
    active = int(np.count_nonzero(plan.rollouts))
    assert plan.info["covered"] == math.ceil(0.5 * active)
    assert np.count_nonzero(plan.rollouts[:40]) >= 2  # uniform draws land mostly among the 40 decided prompts
    # the "dof" objective prefers groups at the cap; "mixed" (the paper's) many small ones at equal estimates
    v = np.full(48, 0.5)
    dof = adaptive_roots(v, SHAPE, np.random.default_rng(0), st, coverage=0.0, objective="dof")
    assert dof.info["replays_on"] == 0.0 and sorted(dof.rollouts[dof.rollouts > 0].tolist()) == [8] * 6
    mixed = adaptive_roots(v, SHAPE, np.random.default_rng(0), st, coverage=0.0)
    assert mixed.rollouts.max() <= 4 and np.count_nonzero(mixed.rollouts) == SHAPE.batch_size
    with pytest.raises(ValueError, match="coverage"):
        adaptive_roots(v, SHAPE, np.random.default_rng(0), st, coverage=1.5)
    with pytest.raises(ValueError, match="objective"):
        adaptive_roots(v, SHAPE, np.random.default_rng(0), st, objective="best")


def test_adaptive_roots_matches_the_paper_for_a_sharp_predictor() -> None:
    from trace_rl.allocation import allocate_roots, mixed_probability

    st = _ranked_state()
    cal = st.calibration()
    assert 0.5 <= cal.beta <= 1.5 and cal.kappa >= 30  # estimates borne out: near the identity, confident
    v = np.random.default_rng(2).uniform(0.0, 1.0, 48)
    shape = BudgetShape(roots=32, continuations=0, group_size=4, min_rollouts=2, max_rollouts=8)
    plan = adaptive_roots(v, shape, np.random.default_rng(0), st, coverage=0.0)
    mean = cal.mean(v)
    paper = allocate_roots(
        mean, shape.flat_rollouts, min_rollouts=2, max_rollouts=8, max_active=shape.batch_size
    )
    ours = sum(float(mixed_probability(mean[i : i + 1], int(m))[0]) for i, m in enumerate(plan.rollouts))
    best = sum(float(mixed_probability(mean[i : i + 1], int(m))[0]) for i, m in enumerate(paper))
    if math.isinf(cal.kappa):
        assert ours == pytest.approx(best, abs=1e-9)  # the exact objective, the paper's optimum
    else:
        assert ours >= 0.97 * best  # a finite kappa shrinks the values, not the ranking


def test_replay_gain_by_hand() -> None:
    from trace_rl.allocation.adaptive import _replay_gain

    table = np.array([[0.0, 0.0, 0.5, 0.75], [0.0, 0.0, 0.2, 0.3], [0.0, 0.0, 0.9, 0.95]])
    m = np.array([3, 2, 0])
    r = np.array([3, 2, 0])
    # mixed: (1 - 0.75)(1 - 0.5^3) + (1 - 0.2)(1 - 0.5^2) = 0.25 * 0.875 + 0.8 * 0.75
    assert _replay_gain(table, m, r, 0.5, "mixed") == pytest.approx(0.21875 + 0.6)
    assert _replay_gain(table, m, r, 0.5, "dof") == pytest.approx(2.5)
    assert _replay_gain(table, m, r, 0.0, "mixed") == 0.0


def test_adaptive_roots_split_follows_the_flip_rate() -> None:
    v = np.random.default_rng(4).uniform(0.0, 1.0, 48)
    flips = _ranked_state()
    flips.observe([], [], [], replays=32, flips=32, estimates_used=False)  # every replay flipped
    plan = adaptive_roots(v, SHAPE, np.random.default_rng(0), flips)
    assert plan.info["replays_on"] == 1.0 and plan.root_rollouts == SHAPE.roots
    assert SHAPE.spent(plan.root_rollouts, plan.replay_budget.sum()) == pytest.approx(SHAPE.total)
    none = _ranked_state()
    none.observe([], [], [], replays=32, flips=0, estimates_used=False)
    assert adaptive_roots(v, SHAPE, np.random.default_rng(0), none).info["replays_on"] == 0.0
    # without replays for REEXPLORE_STEPS - 1 steps, the next step replays again to re-measure the flip rate
    for _ in range(REEXPLORE_STEPS - 1):
        none.observe([], [], [], replays=0, flips=0, estimates_used=False)
    assert adaptive_roots(v, SHAPE, np.random.default_rng(0), none).info["replays_on"] == 1.0


def test_ranking_test_by_hand() -> None:
    from trace_rl.allocation.adaptive import (
        ALPHA_GRID,
        BETA_GRID,
        RANKING_CRITICAL,
        Calibration,
        fit_calibration,
    )

    rng = np.random.default_rng(1)
    v = rng.uniform(0.05, 0.95, 40)
    k, n = rng.binomial(4, v), np.full(40, 4)
    cal = fit_calibration(v, k, n)
    full = beta_binomial_loglik(cal.mean(v), k, n, cal.kappa)
    null = max(
        beta_binomial_loglik(Calibration(a, 0.0).mean(v), k, n, kappa)
        for a in ALPHA_GRID
        for kappa in KAPPA_GRID
    )
    assert cal.ranking_lr == pytest.approx(2 * (full - null), abs=1e-6) and cal.ranks
    assert 0.0 in BETA_GRID and RANKING_CRITICAL == pytest.approx(2.706, abs=1e-3)
    # the same outcomes against shuffled estimates: no ranking in most draws (the test's size is 5%)
    shuffled = [fit_calibration(rng.permutation(v), k, n).ranks for _ in range(40)]
    assert sum(shuffled) <= 8


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


def test_no_continuations_never_replays() -> None:
    shape = BudgetShape(roots=64, continuations=0, group_size=8, max_rollouts=12)  # the demo preset's shape
    st = _ranked_state()
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


def test_the_spec_default_is_the_allocators() -> None:
    from trace_rl.allocation.adaptive import COVERAGE
    from trace_rl.spec import BudgetSpec

    assert BudgetSpec().coverage == COVERAGE
