"""The lab simulator's laws: martingale steps, conditional means, replay consistency, tree structure."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trace_rl.lab import (
    TaskFamily,
    add_replays,
    beta_step,
    make_pool,
    node_state,
    remaining_turns,
    rollout_trees,
    sample_pool,
    simulate_futures,
)


def _within(mean: float, target: float, sd: float, n: int, z: float = 4.5) -> bool:
    return abs(mean - target) <= z * sd / math.sqrt(n)


def test_task_family_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="Beta"):
        TaskFamily(difficulty_a=0.0)
    with pytest.raises(ValueError, match="concentration"):
        TaskFamily(concentration_low=5.0, concentration_high=4.0)
    with pytest.raises(ValueError, match="at least 2 turns"):
        TaskFamily(length_low=3, length_spread=2)  # shortest rollout 1 turn: no anchor


def test_make_pool_validates() -> None:
    with pytest.raises(ValueError, match="probabilities"):
        make_pool([0.5, 1.2], 5.0, 6)
    with pytest.raises(ValueError, match="concentration"):
        make_pool([0.5], -1.0, 6)
    with pytest.raises(ValueError, match="at least 2 turns"):
        make_pool([0.5], 5.0, 3, spread=2)
    pool = make_pool([0.2, 0.7], 5.0, 6)
    assert len(pool) == 2
    assert pool.tasks[1].env == "lab" and pool.tasks[1].metadata["v0"] == 0.7


def test_remaining_turns_is_the_conditional_length_law() -> None:
    # L = 5, spread 2: T uniform on {3..7}. From depth 5 (T > 5): T in {6, 7}, so 1 or 2 new turns, each ~1/2.
    pool = make_pool([0.5], 5.0, 5, spread=2)
    rng = np.random.default_rng(0)
    n = 4000
    got = remaining_turns(pool, np.zeros(n, np.int64), np.full(n, 5, np.int64), rng)
    assert set(got.tolist()) == {1, 2}
    assert _within(float((got == 1).mean()), 0.5, 0.5, n)
    root = remaining_turns(pool, np.zeros(n, np.int64), np.zeros(n, np.int64), rng)
    assert set(root.tolist()) == {3, 4, 5, 6, 7}
    with pytest.raises(ValueError, match="no future"):
        remaining_turns(pool, np.zeros(1, np.int64), np.full(1, 7, np.int64), rng)


def test_beta_step_is_a_martingale_step_with_the_documented_variance() -> None:
    # E[V'] = V = 0.3, Var[V'] = V (1 - V) / (c + 1) = 0.21 / 6 = 0.035 for c = 5.
    rng = np.random.default_rng(1)
    n = 100_000
    out = beta_step(np.full(n, 0.3), np.full(n, 5.0), rng)
    assert _within(float(out.mean()), 0.3, math.sqrt(0.035), n)
    assert abs(float(out.var()) - 0.035) < 0.002
    edge = beta_step(np.array([0.0, 1.0]), np.array([5.0, 5.0]), rng)
    assert edge.tolist() == [0.0, 1.0]  # absorbing


@pytest.mark.parametrize("start", [0.05, 0.5, 0.9])
def test_terminal_reward_has_conditional_mean_v(start: float) -> None:
    # V_t = E[R | F_t]: from state v, the mean terminal reward of fresh futures is v (sd of R: sqrt(v (1 - v))).
    rng = np.random.default_rng(2)
    n = 40_000
    fut = simulate_futures(np.full(n, start), np.full(n, 4.0), rng.integers(1, 8, n).astype(np.int64), rng)
    assert _within(float(fut.reward.mean()), start, math.sqrt(start * (1 - start)), n)
    assert np.isnan(fut.states[fut.steps == 1, 1:]).all()  # NaN past a chain's end
    assert (fut.progress[np.isnan(fut.states)] == -1).all()


def test_squared_movement_equals_v_one_minus_v() -> None:
    # E[sum_s (V_{s+1} - V_s)^2 + (R - V_T)^2] = v (1 - v) = 0.3 * 0.7 = 0.21.
    rng = np.random.default_rng(3)
    n = 40_000
    v = np.full(n, 0.3)
    fut = simulate_futures(v, np.full(n, 6.0), np.full(n, 5, np.int64), rng)
    path = np.concatenate([v[:, None], fut.states], axis=1)
    moves = (np.diff(path, axis=1) ** 2).sum(axis=1) + (fut.reward - fut.final()) ** 2
    assert _within(float(moves.mean()), 0.21, float(moves.std()), n)


def test_progress_buckets_by_hand() -> None:
    # logit(0.5) = 0, logit(0.9) = 2.197, logit(0.1) = -2.197: deltas 0, +2.197, -4.394
    # -> buckets 2 (no change), 4 (progress), 0 (setback) with edges (-1, -0.25, 0.25, 1).
    from trace_rl.lab.simulator import _progress

    got = _progress(np.array([0.5]), np.array([[0.5, 0.9, 0.1]]))
    assert got.tolist() == [[2, 4, 0]]


def test_rollout_trees_structure_and_states() -> None:
    pool = make_pool([0.2, 0.6], [5.0, 20.0], [5, 8], spread=2)
    trees = rollout_trees(pool, [0, 1], [3, 2], np.random.default_rng(4))
    assert [t.num_root_rollouts for t in trees] == [3, 2]
    for i, tree in enumerate(trees):
        assert tree.meta["prompt"] == i and node_state(tree, 0) == pool.v0[i]
        depths = tree.depth[tree.leaves()]
        assert depths.min() >= pool.length[i] - 2 and depths.max() <= pool.length[i] + 2
        for node in range(1, tree.num_nodes):
            turn = tree.turn(node)
            assert turn is not None and turn.info["turn"] == tree.depth[node]
            assert 0.0 <= node_state(tree, node) <= 1.0
        assert set(np.unique(tree.reward[tree.leaves()]).tolist()) <= {0.0, 1.0}


def test_replays_continue_the_anchor_with_the_right_law() -> None:
    pool = make_pool([0.5], 6.0, 6, spread=2)
    rng = np.random.default_rng(5)
    (tree,) = rollout_trees(pool, [0], [1], rng)
    anchor = tree.anchors()[1]  # the prefix after turn 2
    v_anchor = node_state(tree, anchor.node)
    n = 3000
    leaves = add_replays(tree, pool, [anchor.node], [n], rng)
    assert leaves.shape == (n,) and tree.num_replays == n
    starts = tree.replay_starts()
    assert (tree.parent[starts] == anchor.node).all()
    assert (tree.depth[starts] == 3).all()
    # T | T > 2 for L = 6, spread 2: uniform on {4..8}; every replay's leaf lies at depth 4..8.
    assert set(tree.depth[leaves].tolist()) == {4, 5, 6, 7, 8}
    first = np.asarray([node_state(tree, int(s)) for s in starts])
    sd = math.sqrt(v_anchor * (1 - v_anchor))
    assert _within(float(first.mean()), v_anchor, sd, n)  # one martingale step from the anchor
    assert _within(float(tree.reward[leaves].mean()), v_anchor, sd, n)  # conditional mean of the reward
    assert tree.value_targets()[0] == pytest.approx(tree.reward[tree.leaves()].mean())


def test_replays_validate_anchors() -> None:
    pool = make_pool([0.5], 6.0, 6)
    rng = np.random.default_rng(6)
    (tree,) = rollout_trees(pool, [0], [1], rng)
    leaf = int(tree.leaves()[0])
    with pytest.raises(ValueError, match="leaf"):
        add_replays(tree, pool, [leaf], [1], rng)
    with pytest.raises(ValueError, match=">= 0"):
        add_replays(tree, pool, [1], [-1], rng)
    assert add_replays(tree, pool, [1], [0], rng).size == 0


def test_same_seed_same_trees() -> None:
    def build(seed: int) -> list[dict[str, object]]:
        rng = np.random.default_rng(seed)
        pool = sample_pool(TaskFamily(), 6, rng)
        trees = rollout_trees(pool, np.arange(6), np.full(6, 2), rng)
        add_replays(trees[0], pool, [a.node for a in trees[0].anchors()], [1] * len(trees[0].anchors()), rng)
        return [t.to_dict() for t in trees]

    assert build(7) == build(7)
    assert build(7) != build(8)
