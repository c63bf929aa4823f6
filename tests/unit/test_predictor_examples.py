"""Cutting predictor examples from a rollout tree (a small fake tree with the documented attributes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from trace_rl.predictor.examples import NodeExample, leaf_counts, node_examples, split_by_level
from trace_rl.predictor.serialize import serialize_anchor
from trace_rl.types import Turn


@dataclass
class FakeTree:
    """Duck-typed stand-in for trace_rl.tree.RolloutTree: parent pointers, rewards on leaves, turns."""

    parent: np.ndarray
    reward: np.ndarray
    turns: list[Turn | None]

    @property
    def depth(self) -> np.ndarray:
        d = np.zeros(len(self.parent), dtype=np.int64)
        for i in range(1, len(self.parent)):
            d[i] = d[self.parent[i]] + 1
        return d

    def value_targets(self) -> np.ndarray:
        # mean reward of the leaves below each node, by brute force over descendants
        n = len(self.parent)
        out = np.full(n, np.nan)
        for i in range(n):
            leaves = [j for j in range(n) if not np.isnan(self.reward[j]) and self._below(j, i)]
            out[i] = np.mean(self.reward[leaves])
        return out

    def _below(self, j: int, i: int) -> bool:
        while j != -1:
            if j == i:
                return True
            j = int(self.parent[j])
        return False


def make_tree() -> FakeTree:
    # 0 (prompt) -> 1 -> 2 (leaf, r=1); 0 -> 3 -> 4 (leaf, r=0); replay from 1: 1 -> 5 (leaf, r=0)
    nan = float("nan")
    turns: list[Turn | None] = [None] + [
        Turn(text=t, observation=f"obs {t}") for t in ["a1", "a2", "b1", "b2", "c2"]
    ]
    return FakeTree(
        parent=np.array([-1, 0, 1, 0, 3, 1]),
        reward=np.array([nan, nan, 1.0, nan, 0.0, 0.0]),
        turns=turns,
    )


def test_node_examples_targets_depths_and_texts() -> None:
    tree = make_tree()
    ex = node_examples(tree, "Solve it")
    # non-leaf nodes 0, 1, 3. targets: root leaves {1, 0, 0} -> 1/3; node 1 leaves {1, 0} -> 0.5; node 3 -> 0
    assert [e.node for e in ex] == [0, 1, 3]
    np.testing.assert_allclose([e.target for e in ex], [1 / 3, 0.5, 0.0])
    assert [e.depth for e in ex] == [0, 1, 1]
    assert ex[0].text == serialize_anchor("Solve it")
    assert ex[1].text == serialize_anchor("Solve it", [tree.turns[1]])  # type: ignore[list-item]
    assert [e.weight for e in ex] == [1.0, 1.0, 1.0]
    prompts, prefixes = split_by_level(ex)
    assert [e.node for e in prompts] == [0] and [e.node for e in prefixes] == [1, 3]


def test_leaf_weighting_and_leaves() -> None:
    tree = make_tree()
    np.testing.assert_array_equal(leaf_counts(tree.parent, tree.depth), [3, 2, 1, 1, 1, 1])
    ex = node_examples(tree, "P", weighting="leaves", include_leaves=True)
    assert [e.node for e in ex] == [0, 1, 2, 3, 4, 5]
    assert [e.weight for e in ex] == [3.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    # the replay leaf 5 hangs under node 1: its text holds turn 1 then its own turn
    assert ex[5].text == serialize_anchor("P", [tree.turns[1], tree.turns[5]])  # type: ignore[list-item]
    assert ex[5].target == 0.0 and ex[2].target == 1.0


def test_malformed_trees() -> None:
    tree = make_tree()
    tree.turns[3] = None
    with pytest.raises(ValueError, match="no turn"):
        node_examples(tree, "P")
    tree = make_tree()
    tree.reward[2] = 3.0  # node 1 target (3 + 0) / 2 = 1.5
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        node_examples(tree, "P")
    tree = make_tree()
    tree.parent = np.array([-1, 0, 1, 0, 3])
    with pytest.raises(ValueError, match="disagree"):
        node_examples(tree, "P")
    with pytest.raises(ValueError, match="weighting"):
        node_examples(make_tree(), "P", weighting="depth")  # type: ignore[arg-type]


def test_node_example_level() -> None:
    assert not NodeExample("t", 0.5, 0).is_prefix
    assert NodeExample("t", 0.5, 2).is_prefix
