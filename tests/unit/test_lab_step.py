"""One step of every method on the lab: budget accounting, prompt caps, trees, predictor use."""

from __future__ import annotations

import numpy as np
import pytest

from trace_rl.allocation import METHODS, BudgetShape
from trace_rl.lab import OraclePredictor, TaskFamily, make_pool, method_step, sample_pool
from trace_rl.metrics import effective_ratio

SHAPE = BudgetShape(16, 2, group_size=8)  # total 16 (1 + 2/2) = 32; flat batch 4 prompts; TreePO 2 prompts


class _Refuses:
    def predict(self, queries):
        raise AssertionError("a method without a predictor called it")


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_spends_the_budget_and_respects_the_caps(name: str) -> None:
    method = METHODS[name]
    rng = np.random.default_rng(0)
    pool = sample_pool(TaskFamily(), 16, rng)
    predictor = OraclePredictor() if method.uses_predictor else _Refuses()
    res = method_step(method, predictor, pool, SHAPE, rng)
    assert len(res.trees) == res.plan.num_active <= SHAPE.batch_size
    for a, (i, tree) in enumerate(zip(res.prompts.tolist(), res.trees, strict=True)):
        assert tree.meta["prompt"] == i
        assert tree.num_root_rollouts == res.plan.rollouts[i]
        assert tree.num_replays == res.replays[a]
        # every lab rollout has >= 3 turns, so a prompt always has anchors: the replay budget is spent exactly
        assert res.replays[a] == res.plan.replay_budget[i]
    if method.has_replays:
        assert res.spent(SHAPE) == SHAPE.total  # 16 roots + 32 replays * 0.5 = 32
    else:
        assert res.spent(SHAPE) == SHAPE.flat_rollouts == 32
    assert res.effective_ratio == effective_ratio(res.trees)


def test_trace_with_the_oracle_skips_decided_prompts() -> None:
    # v0 = 0 and 1 can never be mixed (absorbing): the oracle gives them 0 rollouts and no replays.
    pool = make_pool([0.0, 1.0, 0.5, 0.4, 0.0, 1.0], 10.0, 6)
    res = method_step(METHODS["trace"], OraclePredictor(), pool, SHAPE, np.random.default_rng(1))
    assert sorted(res.prompts.tolist()) == [2, 3]
    assert res.plan.rollouts.sum() == 16


def test_the_step_is_deterministic_given_its_generator() -> None:
    pool = sample_pool(TaskFamily(), 16, np.random.default_rng(2))
    a = method_step(METHODS["trace"], OraclePredictor(), pool, SHAPE, np.random.default_rng(3))
    b = method_step(METHODS["trace"], OraclePredictor(), pool, SHAPE, np.random.default_rng(3))
    assert [t.to_dict() for t in a.trees] == [t.to_dict() for t in b.trees]
