"""The TRL rows of a rollout tree (trace_rl.integrations.trl.parts; no TRL needed): one row per leaf path for
leaf-level estimators, one per turn for TreeRPO, with token totals equal to the native trainer's layouts."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.tree_examples import example_tree
from trace_rl.advantages import (
    grpo_advantages,
    token_advantages,
    tree_grpo_advantages,
    treerpo_advantages,
)
from trace_rl.integrations.trl.parts import prompt_text, task_index, tree_advantages, tree_rows
from trace_rl.types import Task


def _per_node_totals(tree, rows_tokens):  # type: ignore[no-untyped-def]
    """Sum over rows of advantage x trained tokens, per node that owns the tokens."""
    total = np.zeros(tree.num_nodes)
    for node_of_token, adv in rows_tokens:
        np.add.at(total, node_of_token, adv)
    return total


def _node_of_tokens(tree, node):  # type: ignore[no-untyped-def]
    return np.concatenate(
        [np.full(tree.turns[int(y)].token_ids.shape[0], int(y)) for y in tree.path_to(node)[1:]]
    )


@pytest.mark.parametrize("estimator", [grpo_advantages, tree_grpo_advantages])
def test_leaf_rows_are_the_per_path_layout(estimator) -> None:  # type: ignore[no-untyped-def]
    tree = example_tree(with_turns=True)
    adv = estimator(tree)
    rows = tree_rows(tree, adv)
    native = token_advantages(tree, adv, shared_prefix="per_path")
    assert [r.node for r in rows] == [p.leaf for p in native] == tree.leaves().tolist()
    for row, path in zip(rows, native, strict=True):
        assert np.array_equal(row.completion_ids, path.token_ids)
        assert np.array_equal(row.completion_mask, path.loss_mask)
        assert np.allclose(row.advantage * row.completion_mask, path.advantages)
        assert row.reward == tree.reward[row.node]
    assert abs(sum(r.advantage for r in rows)) < 1e-9  # why TRL's group-mean subtraction leaves them alone


def test_treerpo_rows_are_one_per_turn_the_once_layout() -> None:
    tree = example_tree(with_turns=True)
    adv = treerpo_advantages(tree)
    rows = tree_rows(tree, adv)
    assert [r.node for r in rows] == list(range(1, tree.num_nodes))
    for row in rows:
        own = tree.turns[row.node]
        n_own = own.token_ids.shape[0]
        assert np.array_equal(row.completion_ids[-n_own:], own.token_ids)  # the row ends with its own turn
        assert np.array_equal(row.completion_mask[-n_own:], own.loss_mask)
        assert not row.completion_mask[:-n_own].any()  # the turns above it are context only
        assert row.advantage == adv[row.node]
    ours = _per_node_totals(
        tree, [(_node_of_tokens(tree, r.node), r.advantage * r.completion_mask) for r in rows]
    )
    once = _per_node_totals(
        tree, [(p.node_of_token, p.advantages) for p in token_advantages(tree, adv, shared_prefix="once")]
    )
    assert np.allclose(ours, once)


def test_tree_advantages_names_and_prompt_matching() -> None:
    tree = example_tree(with_turns=True)
    assert np.allclose(tree_advantages(tree, "tree_grpo"), tree_grpo_advantages(tree), equal_nan=True)
    with pytest.raises(ValueError, match="unknown estimator"):
        tree_advantages(tree, "ppo")
    assert prompt_text([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]) == "hi"
    assert (
        prompt_text(
            [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
        )
        == "ab"
    )
    with pytest.raises(ValueError, match="user message"):
        prompt_text([{"role": "system", "content": "s"}])
    with pytest.raises(ValueError, match="share one prompt text"):
        task_index([Task(id="a", env="e", prompt="same"), Task(id="b", env="e", prompt="same")])
