"""`trace_adaptive` on the known-truth lab (`trace_rl.lab.adaptive`): where the predictor ranks nothing it keeps
more groups mixed than both uniform allocation and TRACE, and the lab's counts are right on a hand-built tree."""

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


def test_uninformative_predictor_trace_adaptive_mixes_more_groups() -> None:
    res = run_adaptive_lab(predictors=("noisy:0",), seeds=3, steps=4)
    ratio = {
        a: float(res.values["noisy:0", a, "effective_ratio"].mean())
        for a in ("grpo", "trace", "trace_adaptive")
    }
    assert ratio["trace_adaptive"] > max(ratio["grpo"], ratio["trace"]), ratio
    with pytest.raises(ValueError, match="unknown shape"):
        run_adaptive_lab(shape="1x1", seeds=1, steps=1)
