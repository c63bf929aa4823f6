"""Issue 16: what counts as mixed. effective_ratio, RolloutTree.mixed and every advantage estimator use one
tolerance (REWARD_ATOL = 1e-6), and rows whose advantages are all about 0 are not trained on."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.tree_examples import make_turn
from trace_rl.advantages import group_normalize, grpo_advantages, tree_grpo_advantages, treerpo_advantages
from trace_rl.metrics import effective_ratio
from trace_rl.tree import REWARD_ATOL, RolloutTree

ESTIMATORS = [grpo_advantages, tree_grpo_advantages, treerpo_advantages]


def _tree(rewards: list[float]) -> RolloutTree:
    """One prompt, one two-turn rollout per reward, plus a replay from the first rollout's first turn."""
    t = RolloutTree.new()
    first = t.add_rollout([make_turn([1, 2], [9]), make_turn([3], [])], rewards[0])
    for j, r in enumerate(rewards[1:-1]):
        t.add_rollout([make_turn([4 + j], [9]), make_turn([5], [])], r)
    t.add_replay(int(first[0]), [make_turn([7], [])], rewards[-1])
    return t


@pytest.mark.parametrize(
    "rewards",
    [
        [0.3, 0.1 + 0.2, 0.3],  # equal up to rounding (5.6e-17 apart)
        [1.0, 1.0 - 1e-9, 1.0, 1.0 + 5e-7],
        [0.0, 4e-7, 0.0, 9e-7],
    ],
)
def test_rewards_equal_within_tolerance_are_not_mixed_and_get_no_advantage(rewards: list[float]) -> None:
    tree = _tree(rewards)
    assert effective_ratio([tree]) == 0.0 and not tree.mixed().any()
    for estimate in ESTIMATORS:
        adv = estimate(tree)
        assert np.all(adv[np.isfinite(adv)] == 0.0), estimate.__name__
    from trace_rl.spec import UpdateSpec
    from trace_rl.train.update import training_rows

    for estimator in ("grpo", "tree_grpo", "treerpo"):
        assert training_rows([tree], UpdateSpec(estimator=estimator)) == []


@pytest.mark.parametrize("rewards", [[0.3, 0.3 + 2e-6, 0.3], [1.0, 0.0, 1.0], [0.5, 0.5, 0.499]])
def test_rewards_apart_beyond_tolerance_are_mixed_and_trained_on(rewards: list[float]) -> None:
    tree = _tree(rewards)
    assert effective_ratio([tree]) == 1.0
    for estimate in ESTIMATORS:
        adv = estimate(tree)
        assert np.any(np.abs(adv[np.isfinite(adv)]) > REWARD_ATOL), estimate.__name__
    from trace_rl.spec import UpdateSpec
    from trace_rl.train.update import training_rows

    assert training_rows([tree], UpdateSpec(estimator="grpo"))


def test_group_normalize_tolerance_boundary() -> None:
    assert np.all(group_normalize([0.2, 0.2 + 0.9e-6]) == 0.0)
    assert np.all(group_normalize([0.2, 0.2 + 1.1e-6]) != 0.0)


def test_rows_with_all_tiny_advantages_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    import trace_rl.spec as spec
    import trace_rl.train.update as update

    tree = _tree([1.0, 0.0, 1.0])

    def tiny(t: RolloutTree, **_: object) -> np.ndarray:
        adv = np.full(t.num_nodes, np.nan)
        leaves = t.leaves()
        adv[leaves] = [3e-7, -8e-7, 0.5][: leaves.size]  # only the last leaf carries a real advantage
        return adv

    monkeypatch.setitem(update.ESTIMATORS, "grpo", tiny)
    rows = update.training_rows([tree], spec.UpdateSpec(estimator="grpo"))
    assert [r.leaf for r in rows] == [int(tree.leaves()[2])]
