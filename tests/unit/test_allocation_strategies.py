"""Per-method strategies: equal budget, the batch-size cap on distinct prompts, and each rule's choice."""

import numpy as np
import pytest

from trace_rl.allocation import (
    METHODS,
    BudgetShape,
    get_method,
    knapsack_roots,
    pcl_roots,
    random_prefixes,
    token_aware_budget,
    token_aware_costs,
    trace_roots,
)

SHAPE = BudgetShape(roots=64, continuations=2, group_size=8, max_rollouts=16)


def test_budget_shape_accounting() -> None:
    # the paper's shapes: (1024, 2) and (512, 6) both cost 2048 rollout-equivalents
    assert BudgetShape(1024, 2).total == 2048
    assert BudgetShape(512, 6).total == 2048
    assert BudgetShape(1024, 2).batch_size == 256  # 2048 / 8 prompts for GRPO at n = 8
    assert BudgetShape(1024, 2).tree_batch == 128  # 1024 / 8 for TreePO's uniform roots
    assert SHAPE.spent(64, 128) == 128.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"roots": 0}, "roots"),
        ({"roots": 12, "group_size": 8}, "multiple"),
        ({"roots": 16, "group_size": 1}, "group_size"),
        ({"roots": 16, "replay_cost": 0.0}, "replay_cost"),
        ({"roots": 16, "max_rollouts": 1}, "max_rollouts"),
    ],
)
def test_budget_shape_validation(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        BudgetShape(**kwargs)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_spends_the_equal_budget(name) -> None:
    rng = np.random.default_rng(0)
    v = rng.random(200)
    method = get_method(name)
    plan = method.roots(v, SHAPE, rng)
    assert plan.num_active <= SHAPE.batch_size
    spent = SHAPE.spent(plan.root_rollouts, plan.replay_budget.sum())
    if method.adaptive:  # the paper's split or the whole budget on roots, decided per step
        assert plan.root_rollouts in (SHAPE.roots, SHAPE.flat_rollouts)
        assert spent == pytest.approx(SHAPE.total)
    elif method.has_replays:
        assert plan.root_rollouts == SHAPE.roots
        assert spent == pytest.approx(SHAPE.total)
    else:
        assert plan.root_rollouts == SHAPE.flat_rollouts
        assert plan.replay_budget.sum() == 0
    assert ((plan.rollouts == 0) | (plan.rollouts >= 2)).all()


def test_pcl_picks_prompts_nearest_half() -> None:
    v = np.array([0.0, 0.5, 0.45, 0.9, 1.0, 0.6, 0.1, 0.52] * 3)
    plan = pcl_roots(v, BudgetShape(roots=8, continuations=2, group_size=8), np.random.default_rng(0))
    # batch = 8 * 2 / 8 = 2 prompts: two of the three v = 0.5 copies
    assert set(v[plan.active].tolist()) == {0.5}
    assert (plan.rollouts[plan.active] == 8).all()


def test_trace_skips_certain_prompts_and_caps_active() -> None:
    v = np.array([0.0, 1.0, 0.5, 0.4, 0.6, 1.0, 0.0, 0.3])
    shape = BudgetShape(roots=16, continuations=2, group_size=8)
    plan = trace_roots(v, shape, np.random.default_rng(0))
    assert plan.rollouts[[0, 1, 5, 6]].sum() == 0
    assert plan.num_active <= shape.batch_size == 4
    np.testing.assert_array_equal(plan.replay_budget, 2 * plan.rollouts)


def test_knapsack_weights_favour_hard_side() -> None:
    # Knapsack RL's value P_mix(p, m) * p (1-p)^2 is largest near p = 1/3, and 0 at p in {0, 1}
    v = np.array([1 / 3, 0.9, 0.0, 1.0])
    shape = BudgetShape(
        roots=8, continuations=2, group_size=4
    )  # total 16 -> batch 4 (whole pool), 16 rollouts
    plan = knapsack_roots(v, shape, np.random.default_rng(0))
    assert plan.rollouts.sum() == 16
    assert plan.rollouts[0] > plan.rollouts[1]


def test_random_prefixes_spend_budget() -> None:
    rng = np.random.default_rng(1)
    k = random_prefixes(np.full(5, 0.5), 12, rng, None)
    assert k.sum() == 12
    k = random_prefixes(np.full(3, 0.5), 10, rng, np.array([3, 4, 5]))
    assert (k * np.array([3, 4, 5])).sum() <= 10
    assert random_prefixes(np.zeros(0), 5, rng, None).shape == (0,)


def test_token_aware_costs_and_budget() -> None:
    # 8 units per rollout; remaining 50 of mean 100 tokens -> 4 units; 1 token -> at least 1 unit
    np.testing.assert_array_equal(token_aware_costs([50, 1, 100, 130], 100), [4, 1, 8, 11])
    assert token_aware_budget(16, 0.5) == 64
    with pytest.raises(ValueError):
        token_aware_costs([-1], 100)


def test_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown method 'ppo'"):
        get_method("ppo")


def test_pool_smaller_than_batch_is_an_error() -> None:
    with pytest.raises(ValueError, match="fewer than the batch size"):
        METHODS["grpo"].roots(np.full(3, 0.5), SHAPE, np.random.default_rng(0))
