"""Properties of the lab simulator over random parameters (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trace_rl.allocation import METHODS, BudgetShape
from trace_rl.lab import (
    NoisyOraclePredictor,
    TaskFamily,
    add_replays,
    make_pool,
    method_step,
    node_state,
    rollout_trees,
    sample_pool,
    simulate_futures,
)

probs = st.floats(0.0, 1.0)


@settings(max_examples=40, deadline=None)
@given(
    start=st.lists(probs, min_size=1, max_size=20),
    c=st.floats(0.5, 100.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_futures_stay_probabilities_and_rewards_are_binary(start: list[float], c: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = len(start)
    steps = rng.integers(1, 6, n).astype(np.int64)
    fut = simulate_futures(np.asarray(start), np.full(n, c), steps, rng)
    inside = fut.states[~np.isnan(fut.states)]
    assert ((inside >= 0) & (inside <= 1)).all()
    assert set(fut.reward.tolist()) <= {0.0, 1.0}
    assert (np.isnan(fut.states).sum(axis=1) == fut.states.shape[1] - steps).all()
    decided = np.isin(np.asarray(start), [0.0, 1.0])
    assert (fut.reward[decided] == np.asarray(start)[decided]).all()  # 0 and 1 are absorbing


@settings(max_examples=25, deadline=None)
@given(
    v0=st.lists(probs, min_size=1, max_size=4),
    length=st.integers(4, 9),
    counts=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_replays_keep_the_tree_consistent(v0: list[float], length: int, counts: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    pool = make_pool(v0, 5.0, length)
    trees = rollout_trees(pool, np.arange(len(v0)), np.full(len(v0), counts), rng)
    for tree in trees:
        anchors = [a.node for a in tree.anchors()]
        k = rng.integers(0, 3, len(anchors))
        add_replays(tree, pool, anchors, k, rng)
        assert tree.num_replays == int(k.sum())
        assert tree.num_root_rollouts == counts
        leaf_depth = tree.depth[tree.leaves()]
        assert leaf_depth.max() <= length + 2 and leaf_depth.min() >= length - 2
        for node in range(1, tree.num_nodes):  # every turn's recorded turn number is its depth
            assert tree.turn(node).info["turn"] == tree.depth[node]
        decided = node_state(tree, 0) in (0.0, 1.0)
        if decided:  # a decided prompt never produces a mixed tree
            assert not tree.mixed()[0]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(sorted(METHODS)), n=st.sampled_from([0, 2, 32]))
def test_method_step_never_overspends(seed: int, name: str, n: int) -> None:
    shape = BudgetShape(16, 2, group_size=8)
    rng = np.random.default_rng(seed)
    pool = sample_pool(TaskFamily(), 16, rng)
    res = method_step(METHODS[name], NoisyOraclePredictor(n, seed=seed), pool, shape, rng)
    assert res.spent(shape) <= shape.total
    assert res.plan.num_active <= shape.batch_size
