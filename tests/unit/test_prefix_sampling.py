"""prefix_sampling: Prefix Sampling's pass-rate control (arXiv 2605.05112) as a baseline at equal budget, on hand-made
groups and trees."""

import numpy as np
import pytest

from trace_rl.allocation import (
    TailAnchors,
    get_method,
    prefix_sampling_prefixes,
    prefix_sampling_sources,
    tail_anchors,
)
from trace_rl.tree import RolloutTree

NAN = float("nan")


def test_sources_are_the_minority_outcome_of_a_skewed_group() -> None:
    # mostly failing (1 of 4 passes): the passing rollout gives the head start
    assert prefix_sampling_sources([0.0, 1.0, 0.0, 0.0]).tolist() == [False, True, False, False]
    # mostly passing (3 of 4): the failing rollout gives the handicap
    assert prefix_sampling_sources([1.0, 1.0, 0.0, 1.0]).tolist() == [False, False, True, False]
    # balanced (a = 1/2) and unanimous groups have no source
    assert not prefix_sampling_sources([1.0, 0.0, 1.0, 0.0]).any()
    assert not prefix_sampling_sources([0.0, 0.0, 0.0]).any()
    assert not prefix_sampling_sources([1.0, 1.0]).any()
    # rewards below 1/2 count as failures
    assert prefix_sampling_sources([0.4, 0.6, 0.2]).tolist() == [False, True, False]
    with pytest.raises(ValueError, match="finite"):
        prefix_sampling_sources([1.0, NAN])


def _tree_mostly_failing() -> RolloutTree:
    # prompt 0 -> root A (1 -> 2 -> 3) passes, roots B (4 -> 5 -> 6), C (7 -> 8) and D (9 -> 10) fail
    parents = [-1, 0, 1, 2, 0, 4, 5, 0, 7, 0, 9]
    reward = [NAN, NAN, NAN, 1.0, NAN, NAN, 0.0, NAN, 0.0, NAN, 0.0]
    return RolloutTree.from_parents(parents, reward)


def test_a_mostly_failing_group_replays_only_from_its_passing_rollouts_prefixes() -> None:
    tree = _tree_mostly_failing()
    nodes = [a.node for a in tree.anchors()]
    tails = tail_anchors(tree, nodes)
    for seed in range(20):
        k = prefix_sampling_prefixes(tails, 12, np.random.default_rng(seed))
        assert int(k.sum()) == 12  # the whole local budget is spent
        on_a = np.isin(np.asarray(nodes), [1, 2])  # A's turn prefixes (depths 1 and 2)
        assert k[~on_a].sum() == 0 and k[on_a].sum() == 12
    # both of A's depths get replays over seeds (every depth equally likely)
    k = sum(prefix_sampling_prefixes(tails, 12, np.random.default_rng(s)) for s in range(20))
    assert all(k[i] > 0 for i in np.flatnonzero(np.isin(nodes, [1, 2])))


def test_a_mostly_passing_group_replays_from_its_failing_rollouts_each_alike() -> None:
    # rollouts 0-2 pass, rollout 3 fails, rollout 4 fails: 3/5 pass -> sources 3 and 4, one anchor each
    tails = TailAnchors(
        rollout=np.array([0, 1, 2, 3, 4, 4, 4]),
        from_end=np.array([1, 1, 1, 1, 1, 2, 3]),
        reward=np.array([1.0, 1.0, 1.0, 0.0, 0.0]),
        turns=np.array([2, 2, 2, 2, 4]),
    )
    total = np.zeros(7, dtype=np.int64)
    for seed in range(200):
        k = prefix_sampling_prefixes(tails, 4, np.random.default_rng(seed))
        assert int(k.sum()) == 4 and k[:3].sum() == 0
        total += k
    # each source rollout seeds half the replays (not in proportion to its anchors): rollout 3's one anchor gets
    # about as many as rollout 4's three together
    share = total[3] / total.sum()
    assert 0.4 < share < 0.6


def test_groups_without_a_source_branch_uniformly_and_costs_are_respected() -> None:
    balanced = TailAnchors(np.array([0, 1]), np.array([1, 1]), np.array([1.0, 0.0]), np.array([2, 2]))
    k = prefix_sampling_prefixes(balanced, 6, np.random.default_rng(0))
    assert int(k.sum()) == 6  # TreePO's uniform branching spends the budget
    tails = tail_anchors(_tree_mostly_failing(), [a.node for a in _tree_mostly_failing().anchors()])
    cost = np.array([2, 3, 1, 1, 1, 1])  # A's anchors (nodes 1, 2) cost 2 and 3 units
    for seed in range(10):
        k = prefix_sampling_prefixes(tails, 7, np.random.default_rng(seed), cost)
        assert int((k * cost).sum()) == 7  # the cost-1 anchors pay for what A's anchors cannot
        assert int((k[:2] * cost[:2]).sum()) >= 6  # A's anchors first, while one of them is affordable
    # no source anchor is affordable at all: the budget still goes to uniform branching
    dear = TailAnchors(
        np.array([0, 0, 1, 2]), np.array([2, 1, 1, 1]), np.array([1.0, 0, 0, 0]), np.array([3, 2, 2, 2])
    )
    k = prefix_sampling_prefixes(dear, 5, np.random.default_rng(0), np.array([6, 6, 1, 1]))
    assert k.tolist()[:2] == [0, 0] and int(k.sum()) == 5
    assert prefix_sampling_prefixes(tails, 0, np.random.default_rng(0)).tolist() == [0] * 6
    with pytest.raises(ValueError, match="cost"):
        prefix_sampling_prefixes(tails, 4, np.random.default_rng(0), np.array([1, 0, 1, 1, 1, 1]))


def test_prefix_sampling_is_a_tree_method_without_a_predictor() -> None:
    method = get_method("prefix_sampling")
    assert method.has_replays and not method.uses_predictor
    assert method.tail_prefixes is prefix_sampling_prefixes
