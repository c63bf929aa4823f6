"""Tree metrics on hand-built trees."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from tests.unit.tree_examples import example_tree
from trace_rl.metrics import (
    effective_ratio,
    mixed_anchor_ratio,
    replay_depth_histogram,
    rollouts_per_active_prompt,
    tree_metrics,
)
from trace_rl.tree import RolloutTree


def flat_tree(rewards: list[float]) -> RolloutTree:
    """GRPO-style tree: one single-turn rollout per reward."""
    t = RolloutTree.new()
    for r in rewards:
        t.add_rollout([None], r)
    return t


def test_effective_ratio() -> None:
    trees = [
        flat_tree([1, 0]),
        flat_tree([1, 1, 1]),
        flat_tree([0, 0]),
        flat_tree([0.3, 0.5]),
        flat_tree([1]),
    ]
    # mixed: [1, 0] and [0.3, 0.5] (non-binary, not all equal) -> 2 of 5.
    assert effective_ratio(trees) == pytest.approx(2 / 5)
    assert math.isnan(effective_ratio([]))
    with pytest.raises(ValueError, match="not a RolloutTree"):
        effective_ratio([flat_tree([1]), "tree"])  # type: ignore[list-item]


def test_mixed_anchor_ratio() -> None:
    t = example_tree()
    # Anchors 1, 2, 4; replayed: 1 (leaves 3: 1, 7: 0 -> mixed) and 4 (5: 0, 8: 1 -> mixed) -> 2 / 2.
    assert mixed_anchor_ratio([t]) == 1.0
    # All anchors: node 2 has the single leaf 3 -> not mixed -> 2 / 3.
    assert mixed_anchor_ratio([t], replayed_only=False) == pytest.approx(2 / 3)
    # Add a replay from 2 that also succeeds: anchor 2 replayed but unmixed -> 2 / 3.
    t.add_replay(2, [None], 1.0)
    assert mixed_anchor_ratio([t]) == pytest.approx(2 / 3)
    assert math.isnan(mixed_anchor_ratio([flat_tree([1, 0])]))


def test_rollouts_per_active_prompt() -> None:
    trees = [example_tree(), flat_tree([1, 0, 1])]
    # leaves: 4 and 3 -> mean 3.5; rollout-equivalents: (2 + 0.5 * 2) and 3 -> mean (3 + 3) / 2 = 3.
    assert rollouts_per_active_prompt(trees) == 3.5
    assert rollouts_per_active_prompt(trees, replay_cost=0.5) == 3.0
    with pytest.raises(ValueError, match="replay_cost"):
        rollouts_per_active_prompt(trees, replay_cost=-1)


def test_replay_depth_histogram() -> None:
    t = example_tree()  # replays from node 1 (depth 1) and node 4 (depth 1)
    t.add_replay(2, [None], 1.0)  # anchor depth 2
    t.add_replay(0, [None], 1.0)  # from the prompt, depth 0
    assert replay_depth_histogram([t, flat_tree([1, 0])]).tolist() == [1, 2, 1]
    assert replay_depth_histogram([t], max_depth=1).tolist() == [1, 3]  # depth 2 folded into the last bin
    assert replay_depth_histogram([flat_tree([1])]).tolist() == []
    assert replay_depth_histogram([], max_depth=2).tolist() == [0, 0, 0]


def test_tree_metrics_summary() -> None:
    m = tree_metrics([example_tree(), flat_tree([1, 1])])
    assert m["effective_ratio"] == 0.5
    assert m["replays_per_active_prompt"] == 1.0  # 2 replays over 2 trees
    assert m["mean_replay_anchor_depth"] == 1.0
    assert m["rollout_equivalents_per_active_prompt"] == 2.5  # (2 + 0.5 * 2 + 2) / 2
    assert m["active_prompts"] == 2.0
    assert all(isinstance(v, float) for v in m.values())
    assert np.isnan(tree_metrics([])["effective_ratio"])


def test_pure_parts_import_without_torch_or_matplotlib() -> None:
    code = (
        "import sys, trace_rl.metrics, trace_rl.tree, trace_rl.advantages; "
        "bad = [m for m in ('torch', 'matplotlib') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mixed_sibling_share_counts_every_node_with_two_or_more_children() -> None:
    import math

    from trace_rl.metrics import mixed_sibling_share, sibling_groups, signal_per_token
    from trace_rl.tree import RolloutTree

    nan = float("nan")
    # prompt 0 -> roots 1 (-> 2 leaf 0) and 3 (-> 4 leaf 0); anchor 1 replayed twice: 5 (1), 6 (0)
    # root group {V(1) = 1/3, V(3) = 0}: mixed; anchor 1's group {V(2)=0, V(5)=1, V(6)=0}: mixed
    parent = [-1, 0, 1, 0, 3, 1, 1]
    reward = [nan, nan, 0.0, nan, 0.0, 1.0, 0.0]
    tree = RolloutTree.from_parents(parent, reward)
    assert sibling_groups(tree) == (2, 2)
    # all roots failed, no replays: one unanimous group at the prompt
    flat = RolloutTree.from_parents([-1, 0, 0, 0], [nan, 0.0, 0.0, 0.0])
    assert sibling_groups(flat) == (0, 1)
    # a replay group whose outcomes agree, under a mixed root group
    agree = RolloutTree.from_parents([-1, 0, 1, 0, 1], [nan, nan, 1.0, 0.0, 1.0])
    assert sibling_groups(agree) == (1, 2)
    assert mixed_sibling_share([tree, flat, agree]) == pytest.approx(3 / 5)
    assert math.isnan(mixed_sibling_share([RolloutTree.from_parents([-1, 0], [nan, 1.0])]))
    assert signal_per_token(6.0, 3.0) == 2.0 and math.isnan(signal_per_token(1.0, 0.0))
