"""Hypothesis invariants of rollout trees, value targets and advantages."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trace_rl.advantages import (
    grpo_advantages,
    token_advantages,
    tree_grpo_advantages,
    treerpo_advantages,
)
from trace_rl.metrics import effective_ratio
from trace_rl.tree import RolloutTree
from trace_rl.types import Turn

SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def trees(draw: st.DrawFn, binary: bool | None = None, with_turns: bool = False) -> RolloutTree:
    """A tree grown like a TRACE step: a few root rollouts, then replays from random non-leaf nodes."""
    if binary is None:
        binary = draw(st.booleans())
    reward = st.sampled_from([0.0, 1.0]) if binary else st.floats(0.0, 1.0, allow_nan=False)

    def turns(k: int) -> list[Turn | None]:
        if not with_turns:
            return [None] * k
        out: list[Turn | None] = []
        for _ in range(k):
            n = draw(st.integers(1, 4))
            mask = np.asarray(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype=np.int8)
            out.append(Turn(np.arange(n, dtype=np.int64), mask, np.zeros(n, np.float32)))
        return out

    t = RolloutTree.new()
    for _ in range(draw(st.integers(1, 4))):
        t.add_rollout(turns(draw(st.integers(1, 4))), draw(reward))
    for _ in range(draw(st.integers(0, 6))):
        inner = [i for i in range(t.num_nodes) if not t.is_leaf()[i]]
        anchor = draw(st.sampled_from(inner))
        t.add_replay(anchor, turns(draw(st.integers(1, 3))), draw(reward))
    return t


def brute_mean_below(t: RolloutTree, node: int) -> float:
    return float(np.mean(t.reward[t.leaves_below(node)]))


@SETTINGS
@given(trees())
def test_value_targets_invariants(t: RolloutTree) -> None:
    v = t.value_targets()
    assert np.all((v >= 0) & (v <= 1))
    assert v[0] == np.mean(t.reward[t.leaves()]) or np.isclose(v[0], np.mean(t.reward[t.leaves()]))
    leaves = t.leaves()
    np.testing.assert_array_equal(v[leaves], t.reward[leaves])
    counts = t.leaf_counts()
    for y in range(t.num_nodes):
        assert np.isclose(v[y], brute_mean_below(t, y))
        assert counts[y] == t.leaves_below(y).size
        kids = t.children(y)
        if kids.size:  # the paper's recursion V(y) = (1/n_y) sum_c n_c V(c)
            assert np.isclose(v[y], np.sum(counts[kids] * v[kids]) / counts[y])


@SETTINGS
@given(trees())
def test_structure_invariants(t: RolloutTree) -> None:
    paths = list(t.paths())
    assert len(paths) == t.num_leaves == t.num_root_rollouts + t.num_replays
    for p in paths:
        assert p[0] == 0 and t.is_leaf()[p[-1]]
        assert np.all(t.parent[p[1:]] == p[:-1])
        assert np.all(t.depth[p] == np.arange(p.size))
    # Chains are recovered from bare parent arrays exactly, except replays from the prompt itself, which look like
    # root rollouts (documented in from_parents); with explicit flags everything round-trips.
    u = RolloutTree.from_parents(t.parent, t.reward)
    if not np.any(t.parent[t.replay_starts()] == 0):
        assert u.is_replay.tolist() == t.is_replay.tolist()
        assert u.anchors(include_replays=True) == t.anchors(include_replays=True)
    u = RolloutTree.from_parents(t.parent, t.reward, is_replay=t.is_replay)
    assert u.anchors(include_replays=True) == t.anchors(include_replays=True)
    assert u.replay_starts().tolist() == t.replay_starts().tolist()
    # An anchor's reward is the reward at the end of its root rollout (follow non-replay children).
    for a in t.anchors():
        node = a.node
        while not t.is_leaf()[node]:
            node = int(next(c for c in t.children(node) if not t.is_replay[c]))
        assert a.reward == t.reward[node]
        assert not t.is_replay[a.node] and a.depth == t.depth[a.node] >= 1


@SETTINGS
@given(trees(with_turns=True))
def test_round_trip(t: RolloutTree) -> None:
    u = RolloutTree.from_dict(t.to_dict())
    assert u.to_dict() == t.to_dict()
    np.testing.assert_array_equal(u.value_targets(), t.value_targets())


@SETTINGS
@given(trees(), st.booleans())
def test_advantage_groups_sum_to_zero(t: RolloutTree, normalize_std: bool) -> None:
    leaves = t.leaves()
    g = grpo_advantages(t, normalize_std=normalize_std)
    assert np.isnan(np.delete(g, leaves)).all()
    assert abs(g[leaves].sum()) < 1e-6 * leaves.size
    tg = tree_grpo_advantages(t, normalize_std=normalize_std)
    assert abs(tg[leaves].sum()) < 1e-6 * leaves.size  # intra groups and the inter group each sum to 0
    # intra part alone sums to 0 within each root child's group
    intra = tg - g
    top = t.ancestor_at_depth(leaves, 1)
    for c in np.unique(top):
        assert abs(intra[leaves[top == c]].sum()) < 1e-6 * leaves.size
    r = treerpo_advantages(t, normalize_std=normalize_std)
    assert np.isnan(r[0]) and np.isfinite(r[1:]).all()
    for p in np.flatnonzero(t.num_children() >= 2):
        kids = t.children(int(p))
        assert abs(r[kids].sum()) < 1e-6 * kids.size


@SETTINGS
@given(trees(), st.floats(0.0, 1.0))
def test_unmixed_tree_has_zero_advantages(t: RolloutTree, value: float) -> None:
    flat = RolloutTree.from_parents(t.parent, np.where(np.isnan(t.reward), np.nan, value))
    assert effective_ratio([flat]) == 0.0
    for f in (grpo_advantages, tree_grpo_advantages, treerpo_advantages):
        a = f(flat)
        assert np.all(a[np.isfinite(a)] == 0.0)


@SETTINGS
@given(trees(with_turns=True), st.booleans())
def test_once_counts_each_turn_once(t: RolloutTree, node_level: bool) -> None:
    a = treerpo_advantages(t) if node_level else grpo_advantages(t)
    paths = token_advantages(t, a, shared_prefix="once")
    total = np.zeros(t.num_nodes)
    for p in paths:
        np.add.at(total, p.node_of_token, p.advantages.astype(np.float64))
        assert np.all(p.advantages[p.loss_mask == 0] == 0)
    for y in range(1, t.num_nodes):
        turn = t.turns[y]
        assert turn is not None
        model_tokens = int(turn.loss_mask.sum())
        if node_level:
            expected = a[y] * model_tokens
        else:  # mean of the leaf advantages below y, once per model token
            expected = float(np.mean(a[t.leaves_below(y)])) * model_tokens
        assert np.isclose(total[y], expected, atol=1e-4)
