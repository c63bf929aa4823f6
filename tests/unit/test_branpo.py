"""branpo: BranPO's tail branching (arXiv 2602.03719) as a baseline at equal budget, on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from trace_rl.allocation import TailAnchors, apportion, branpo_prefixes, branpo_tiers, get_method

NAN = float("nan")


def test_tiers_follow_branpos_accuracy_rules() -> None:
    # a = 3/4, mean turns of the solved = 3: the longer solved rollout gets 5 replays 2 turns from its end, the
    # rest 2 replays from the last turn prefix (a <= 3/4)
    k, b = branpo_tiers([1.0, 1.0, 1.0, 0.0], [3, 4, 2, 3])
    assert k.tolist() == [2, 5, 2, 2] and b.tolist() == [1, 2, 1, 1]
    k, b = branpo_tiers([1.0] * 4, [3, 4, 2, 3])  # a = 1: one replay each, from the last turn prefix
    assert k.tolist() == [1, 1, 1, 1] and b.tolist() == [1, 1, 1, 1]
    # a = 7/8 > 3/4: solved rollouts no longer than usual get none, the failure 2
    k, _ = branpo_tiers([1.0] * 7 + [0.0], [2] * 8)
    assert k.tolist() == [0] * 7 + [2]
    k, _ = branpo_tiers([0.0, 0.0, 0.5], [3, 3, 3])  # reward 0.5 < 0.8 counts as failed: a = 0
    assert k.tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match="one length"):
        branpo_tiers([1.0, 0.0], [3])


def test_apportion_spends_the_budget_in_proportion_to_the_weights() -> None:
    assert apportion([2, 0, 5, 2], 18).tolist() == [4, 0, 10, 4]
    assert apportion([2, 0, 5, 2], 10).tolist() == [2, 0, 6, 2]  # the largest remainder takes the last one
    assert apportion([1, 1], 7, cost=np.array([2, 4])).tolist() == [1, 1]  # 6 of 7 units: nothing else fits
    assert apportion([0, 0, 0], 4).tolist() == [2, 1, 1]  # no weight: spread evenly, earlier first
    assert apportion([], 5).tolist() == []
    with pytest.raises(ValueError, match="weights"):
        apportion([-1.0, 2.0], 3)


def test_branpo_replays_from_each_rollouts_tail_by_its_tier() -> None:
    # two 3-turn rollouts (anchors 2 and 1 turns from the end), one solved and one failed: a = 1/2, so each gets
    # weight 2 on its last turn prefix; 6 replays split 3 / 3
    tails = TailAnchors(
        rollout=np.array([0, 0, 1, 1]),
        from_end=np.array([2, 1, 2, 1]),
        reward=np.array([1.0, 0.0]),
        turns=np.array([3, 3]),
    )
    rng = np.random.default_rng(0)
    assert branpo_prefixes(tails, 6, rng).tolist() == [0, 3, 0, 3]
    # a 2-turn solved rollout longer than usual (tier: 5 replays 2 turns back) has only its last turn prefix:
    # the branch point is clamped to it; the 1-turn rollouts have no anchor and drop out
    short = TailAnchors(np.array([0]), np.array([1]), np.array([1.0, 1.0, 0.0]), np.array([2, 1, 1]))
    assert branpo_prefixes(short, 4, rng).tolist() == [4]
    with pytest.raises(ValueError, match="from_end"):
        TailAnchors(np.array([0]), np.array([0]), np.array([1.0]), np.array([2]))


def test_branpo_is_a_tree_method_without_a_predictor() -> None:
    method = get_method("branpo")
    assert method.has_replays and not method.uses_predictor and method.tail_prefixes is branpo_prefixes


def test_tail_anchors_read_from_a_tree() -> None:
    from trace_rl.allocation import tail_anchors
    from trace_rl.tree import RolloutTree

    # prompt 0 -> roots (1 -> 2 -> 3) solved, (4 -> 5) failed, (6) failed in one turn
    tree = RolloutTree.from_parents([-1, 0, 1, 2, 0, 4, 0], [NAN, NAN, NAN, 1.0, NAN, 0.0, 0.0])
    tails = tail_anchors(tree, [a.node for a in tree.anchors()])
    assert tails.rollout.tolist() == [0, 0, 1] and tails.from_end.tolist() == [2, 1, 1]
    assert tails.reward.tolist() == [1.0, 0.0, 0.0] and tails.turns.tolist() == [3, 2, 1]
    with pytest.raises(ValueError, match="not the prompt"):
        tail_anchors(tree, [0])
