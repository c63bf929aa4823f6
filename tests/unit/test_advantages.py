"""Advantage estimators and the token broadcast on hand-computed trees."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.tree_examples import example_tree
from trace_rl.advantages import (
    advantage_level,
    group_normalize,
    grpo_advantages,
    token_advantages,
    tree_grpo_advantages,
    treerpo_advantages,
)
from trace_rl.tree import RolloutTree

EPS = 1e-6
S3 = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]: var = 4 * 0.25 / 3
S2 = math.sqrt(0.5)  # unbiased std of [1, 0]: var = (0.25 + 0.25) / 1


def nan_equal(actual: np.ndarray, expected: list[float]) -> None:
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_group_normalize_by_hand() -> None:
    # [1, 0, 0]: mean 1/3, deviations (2/3, -1/3, -1/3), unbiased var (4/9 + 1/9 + 1/9) / 2 = 1/3.
    s = math.sqrt(1 / 3)
    nan_equal(group_normalize([1, 0, 0]), [(2 / 3) / (s + EPS), (-1 / 3) / (s + EPS), (-1 / 3) / (s + EPS)])
    # Population std (ddof=0): var = (4/9 + 1/9 + 1/9) / 3 = 2/9.
    p = math.sqrt(2 / 9)
    nan_equal(
        group_normalize([1, 0, 0], ddof=0), [(2 / 3) / (p + EPS), (-1 / 3) / (p + EPS), (-1 / 3) / (p + EPS)]
    )
    # Dr. GRPO: centring only.
    nan_equal(group_normalize([1, 0, 0], normalize_std=False), [2 / 3, -1 / 3, -1 / 3])
    # Groups of one and zero-spread groups get exactly 0, even with float residue in the mean.
    assert group_normalize([0.7]).tolist() == [0.0]
    assert group_normalize([0.1, 0.1, 0.1]).tolist() == [0.0, 0.0, 0.0]
    assert group_normalize([0.1, 0.1, 0.1], normalize_std=False).tolist() == [0.0, 0.0, 0.0]
    assert group_normalize([]).tolist() == []


@pytest.mark.parametrize(
    ("kwargs", "values", "message"),
    [
        ({}, [1.0, float("nan")], "finite"),
        ({"eps": -1.0}, [1.0, 0.0], "eps"),
        ({"ddof": 2}, [1.0, 0.0], "ddof"),
    ],
)
def test_group_normalize_rejects_bad_input(
    kwargs: dict[str, float], values: list[float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        group_normalize(values, **kwargs)


def test_grpo_by_hand() -> None:
    t = example_tree()
    # Leaves 3, 5, 7, 8 have rewards 1, 0, 0, 1: mean 0.5, unbiased std sqrt(1/3).
    a = 0.5 / (S3 + EPS)
    nan_equal(grpo_advantages(t), [np.nan, np.nan, np.nan, a, np.nan, -a, np.nan, -a, a])
    nan_equal(
        grpo_advantages(t, normalize_std=False),
        [np.nan, np.nan, np.nan, 0.5, np.nan, -0.5, np.nan, -0.5, 0.5],
    )


def test_tree_grpo_by_hand() -> None:
    t = example_tree()
    # inter: over all leaves, +-0.5 / (sqrt(1/3) + eps) as in GRPO.
    inter = 0.5 / (S3 + EPS)
    # intra: under root child 1 the leaves {3: 1, 7: 0}; under root child 4 {5: 0, 8: 1}:
    # mean 0.5, unbiased std sqrt(0.5), so +-0.5 / (sqrt(0.5) + eps).
    intra = 0.5 / (S2 + EPS)
    s = inter + intra  # = 0.8660 + 0.7071 = 1.5731
    nan_equal(tree_grpo_advantages(t), [np.nan, np.nan, np.nan, s, np.nan, -s, np.nan, -s, s])


def test_tree_grpo_intra_group_of_one() -> None:
    # Root children 1 (leaf, r=1) and 2 -> {3 (r=0), 4 (r=1)}: leaf 1 is alone in its tree, so intra(1) = 0.
    t = RolloutTree.from_parents([-1, 0, 0, 2, 2], [np.nan, 1.0, np.nan, 0.0, 1.0])
    # inter over (1, 0, 1): mean 2/3, unbiased var (1/9 + 4/9 + 1/9) / 2 = 1/3.
    s = math.sqrt(1 / 3) + EPS
    inter = [(1 / 3) / s, (-2 / 3) / s, (1 / 3) / s]
    intra = [0.0, -0.5 / (S2 + EPS), 0.5 / (S2 + EPS)]
    nan_equal(
        tree_grpo_advantages(t),
        [np.nan, inter[0] + intra[0], np.nan, inter[1] + intra[1], inter[2] + intra[2]],
    )


def test_treerpo_by_hand() -> None:
    t = example_tree()
    # Values V: [0.5, 0.5, 1, 1, 0.5, 0, 0, 0, 1].
    # Root's children {1, 4}: V = (0.5, 0.5), zero spread -> 0 for both.
    # Node 1's children {2, 6}: V = (1, 0) -> +-0.5 / (sqrt(0.5) + eps).
    # Node 4's children {5, 8}: V = (0, 1) -> -/+ the same.
    # Node 3 (only child of 2) inherits A(2); node 7 (only child of 6) inherits A(6).
    a = 0.5 / (S2 + EPS)
    nan_equal(treerpo_advantages(t), [np.nan, 0, a, a, 0, -a, -a, -a, a])
    nan_equal(treerpo_advantages(t, normalize_std=False), [np.nan, 0, 0.5, 0.5, 0, -0.5, -0.5, -0.5, 0.5])


def test_treerpo_three_siblings_and_no_branching_above() -> None:
    # root -> 1 -> {2 (r=1), 3 (r=0), 4 -> 5 (r=0)}: the root has a single child, so node 1 gets 0.
    t = RolloutTree.from_parents([-1, 0, 1, 1, 1, 4], [np.nan, np.nan, 1.0, 0.0, np.nan, 0.0])
    # Siblings {2, 3, 4}: V = (1, 0, 0): mean 1/3, unbiased std sqrt(1/3).
    s = math.sqrt(1 / 3) + EPS
    nan_equal(treerpo_advantages(t), [np.nan, 0, (2 / 3) / s, (-1 / 3) / s, (-1 / 3) / s, (-1 / 3) / s])


def test_estimators_on_an_unmixed_tree_are_zero() -> None:
    t = RolloutTree.from_parents([-1, 0, 1, 1, 0], [np.nan, np.nan, 1.0, 1.0, 1.0])
    for f in (grpo_advantages, tree_grpo_advantages, treerpo_advantages):
        a = f(t)
        assert np.all(a[np.isfinite(a)] == 0.0)


def test_empty_tree() -> None:
    t = RolloutTree.new()
    assert np.isnan(grpo_advantages(t)).all()
    assert np.isnan(tree_grpo_advantages(t)).all()
    assert np.isnan(treerpo_advantages(t)).all()


def test_advantage_level() -> None:
    t = example_tree()
    assert advantage_level(t, grpo_advantages(t)) == "leaf"
    assert advantage_level(t, treerpo_advantages(t)) == "node"
    with pytest.raises(ValueError, match="exactly on the leaves"):
        advantage_level(t, np.full(9, np.nan))
    with pytest.raises(ValueError, match="shape"):
        advantage_level(t, np.zeros(3))


def test_token_advantages_leaf_level_per_path() -> None:
    t = example_tree(with_turns=True)  # every turn: 2 model tokens then 1 observation token
    adv = np.full(9, np.nan)
    adv[[3, 5, 7, 8]] = [1.0, -1.0, -2.0, 2.0]
    paths = token_advantages(t, adv)
    assert [p.leaf for p in paths] == [3, 5, 7, 8]
    p = paths[0]  # path 1, 2, 3: every model token carries A(3) = 1, observation tokens 0
    assert p.nodes.tolist() == [1, 2, 3]
    assert p.token_ids.tolist() == [10, 10, 900, 11, 11, 901, 12, 12, 902]
    assert p.loss_mask.tolist() == [1, 1, 0] * 3
    assert p.advantages.tolist() == [1, 1, 0] * 3
    assert p.node_of_token.tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert p.logprobs.tolist() == [-0.5, -0.5, 0] * 3
    assert paths[2].advantages.tolist() == [-2, -2, 0] * 3  # path 1, 6, 7


def test_token_advantages_once_scales_shared_turns() -> None:
    t = example_tree(with_turns=True)
    adv = np.full(9, np.nan)
    adv[[3, 5, 7, 8]] = [1.0, -1.0, -2.0, 2.0]
    paths = token_advantages(t, adv, shared_prefix="once")
    # Node 1 has n_1 = 2 leaves below: each copy of its tokens is scaled by 1/2.
    # Path to 3: node 1 -> 1/2, node 2 (n=1) -> 1, node 3 -> 1.
    # Path to 7 (nodes 1, 6, 7): node 1 -> -2/2 = -1, nodes 6 and 7 (one leaf each) -> -2.
    assert paths[0].advantages.tolist() == [0.5, 0.5, 0, 1, 1, 0, 1, 1, 0]
    assert paths[2].advantages.tolist() == [-1, -1, 0, -2, -2, 0, -2, -2, 0]
    # The two copies of node 1 add up to the mean of the leaf advantages below it: (1 + -2) / 2.
    assert paths[0].advantages[0] + paths[2].advantages[0] == pytest.approx(-0.5)


def test_token_advantages_node_level() -> None:
    t = example_tree(with_turns=True)
    a = treerpo_advantages(t)
    paths = token_advantages(t, a)
    # Path 1, 6, 7: node 1 carries A(1) = 0, node 6 carries A(6), node 7 inherits A(6).
    expected = [0, 0, 0, a[6], a[6], 0, a[7], a[7], 0]
    np.testing.assert_allclose(paths[2].advantages, np.asarray(expected, np.float32))
    once = token_advantages(t, a, shared_prefix="once")
    # Node 6 lies on one path only: unchanged; node 1 would be halved but its advantage is 0 anyway.
    np.testing.assert_allclose(once[2].advantages, paths[2].advantages)


def test_token_advantages_needs_turns_and_a_known_mode() -> None:
    t = example_tree()
    with pytest.raises(ValueError, match="no turn payload"):
        token_advantages(t, grpo_advantages(t))
    with pytest.raises(ValueError, match="shared_prefix"):
        token_advantages(example_tree(with_turns=True), grpo_advantages(t), shared_prefix="twice")  # type: ignore[arg-type]
