"""`trace_adaptive` on the known-truth lab (`trace_rl.lab.adaptive`): where the predictor ranks nothing it is GRPO,
where it ranks it selects like TRACE, and the lab's counts are right on a hand-built tree."""

import numpy as np
import pytest

from trace_rl.lab.adaptive import contrastive_dof, run_adaptive_lab, tree_flips
from trace_rl.tree import RolloutTree


def test_counts_on_a_hand_built_tree() -> None:
    # prompt 0 -> roots 1 -> 2 (leaf, r=1) and 3 (leaf, r=0); a replay 4 -> 5 (leaf, r=0) from anchor 1
    parent = [-1, 0, 1, 0, 1, 4]
    reward = [np.nan, np.nan, 1.0, 0.0, np.nan, 0.0]
    tree = RolloutTree.from_parents(parent, reward, is_replay=[False, False, False, False, True, True])
    assert tree_flips(tree) == (1, 1)  # the replay ended 0 where its rollout ended 1
    assert contrastive_dof([tree]) == 2.0  # 3 leaves, mixed
    flat = RolloutTree.from_parents([-1, 0, 0], [np.nan, 1.0, 1.0])
    assert contrastive_dof([flat]) == 0.0 and tree_flips(flat) == (0, 0)


def test_trace_adaptive_is_grpo_without_ranking_and_selects_with_it() -> None:
    res = run_adaptive_lab(predictors=("noisy:0", "oracle"), seeds=2, steps=6, coverage=0.0)
    for metric in ("effective_ratio", "mixed_groups", "contrastive_dof"):
        # a predictor that ranks nothing never passes the ranking test: GRPO's plan, GRPO's numbers, every step
        assert np.array_equal(
            res.values["noisy:0", "trace_adaptive", metric], res.values["noisy:0", "grpo", metric]
        )
    ratio = {
        a: float(res.values["oracle", a, "effective_ratio"].mean())
        for a in ("grpo", "trace", "trace_adaptive")
    }
    # the oracle: GRPO's plan for the two steps that fill the first window (16 prompts a step, 24 needed), then
    # selection as sharp as TRACE's
    warm = (2 * ratio["grpo"] + 4 * ratio["trace"]) / 6
    assert ratio["trace_adaptive"] > ratio["grpo"] + 0.15 and ratio["trace_adaptive"] >= warm - 0.05, ratio
    with pytest.raises(ValueError, match="unknown shape"):
        run_adaptive_lab(shape="1x1", seeds=1, steps=1)
