"""Row layouts and the tree estimators (trace_rl.integrations.verl.layout / .estimators), without servers.

Hand numbers on the tree of tests/unit/tree_examples.py, then random trees against trace-rl's own
`token_advantages(tree, treerpo_advantages(tree))` through verl's real `compute_advantage` and `DataProto`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

import trace_rl.integrations.verl.register  # noqa: F401
from trace_rl.advantages import token_advantages, tree_grpo_advantages, treerpo_advantages
from trace_rl.integrations.verl.config import TraceVerlConfig
from trace_rl.integrations.verl.estimators import compute_trace_treerpo_advantage, tree_layouts
from trace_rl.integrations.verl.layout import RowLayout, tree_from_rows, tree_token_advantages
from trace_rl.tree import RolloutTree
from trace_rl.types import Turn

S = 1 / math.sqrt(2)  # a two-sibling group with values {1, 0}: (1 - 0.5) / std_unbiased = 0.5 / (1/sqrt 2)
# The example tree as rows: A = session 0 (3 turns, r 1), B = session 1 (2 turns, r 0), replay of A's first
# turn = session 2 (r 0), replay of B's first turn = session 3 (r 1). Turn lengths: 2 model + 1 observation.
LAYOUTS = [
    RowLayout(np.array([0, 0, 0]), np.array([3, 3, 3])),
    RowLayout(np.array([1, 1]), np.array([3, 3])),
    RowLayout(np.array([0, 2, 2]), np.array([3, 3, 3])),
    RowLayout(np.array([1, 3]), np.array([3, 3])),
]
REWARDS = np.array([1.0, 0.0, 0.0, 1.0])


def masks(width: int = 9) -> np.ndarray:
    m = np.zeros((4, width))
    for i, lay in enumerate(LAYOUTS):
        m[i, : 3 * len(lay.sessions)] = np.tile([1, 1, 0], len(lay.sessions))
    return m


def test_rows_rebuild_the_tree() -> None:
    built = tree_from_rows(LAYOUTS, REWARDS)
    t = built.tree
    assert t.num_nodes == 9 and t.num_leaves == 4
    # is_replay is inferred from node order: the lowest-id child continues its chain
    assert t.num_root_rollouts == 2 and t.num_replays == 2
    # nodes by (depth, session): depth 1: (0,0)->1 (1,0)->2; depth 2: (0,1)->3 (1,1)->4 (2,1)->5 (3,1)->6 ...
    assert [n.tolist() for n in built.row_nodes] == [[1, 3, 7], [2, 4], [1, 5, 8], [2, 6]]
    assert np.allclose(t.value_targets()[[1, 2]], [0.5, 0.5])


def test_treerpo_by_hand() -> None:
    adv = tree_token_advantages(LAYOUTS, ["u"] * 4, REWARDS, masks(), estimator="treerpo")
    # root children both have V = 0.5: A = 0; below them each group {1, 0} gives +-1/sqrt2, inherited downwards
    expected_turns = [[0, S, S], [0, -S], [0, -S, -S], [0, S]]
    for i, per_turn in enumerate(expected_turns):
        exp = np.zeros(9)
        exp[: 3 * len(per_turn)] = np.repeat(per_turn, 3) * np.tile([1, 1, 0], len(per_turn))
        assert np.allclose(adv[i], exp, atol=1e-5)


def test_tree_grpo_by_hand() -> None:
    adv = tree_token_advantages(LAYOUTS, ["u"] * 4, REWARDS, masks(), estimator="tree_grpo")
    inter = 0.5 / math.sqrt(1 / 3)  # rewards {1,0,0,1}: std_unbiased = sqrt(1/3)
    leaf = [inter + S, -inter - S, -inter - S, inter + S]
    for i, a in enumerate(leaf):
        assert np.allclose(adv[i][masks()[i] == 1], a, atol=1e-5)
        assert np.all(adv[i][masks()[i] == 0] == 0)


def random_batch(rng: np.random.Generator, prompts: int = 3):  # type: ignore[no-untyped-def]
    """Random trees built the way the worker builds them, and their rows (layouts, rewards, token masks)."""
    trees, layouts, rewards, index, rows_masks, rows_ids = [], [], [], [], [], []
    for p in range(prompts):
        tree = RolloutTree.new()

        def turns(k: int) -> list[Turn]:
            out = []
            for _ in range(k):
                n_model, n_obs = int(rng.integers(1, 4)), int(rng.integers(0, 3))
                ids = rng.integers(0, 1000, n_model + n_obs).astype(np.int64)
                mask = np.array([1] * n_model + [0] * n_obs, np.int8)
                out.append(Turn(ids, mask, np.zeros(ids.size, np.float32)))
            return out

        m = int(rng.integers(1, 4))
        origin: dict[int, int] = {}
        for s in range(m):
            t = turns(int(rng.integers(1, 4)))
            nodes = tree.add_rollout(t, float(rng.integers(0, 2)))
            origin.update({int(n): s for n in nodes})
        session = m
        for _ in range(int(rng.integers(0, 5))):
            anchors = tree.anchors()
            if not anchors:
                break
            a = anchors[int(rng.integers(len(anchors)))]
            t = turns(int(rng.integers(1, 3)))
            nodes = tree.add_replay(a.node, t, float(rng.integers(0, 2)))
            origin.update({int(n): session for n in nodes})
            session += 1
        trees.append(tree)
        for leaf in tree.leaves():
            path = tree.path_to(int(leaf))[1:]
            layouts.append(
                RowLayout(
                    np.array([origin[int(n)] for n in path]),
                    np.array([tree.turn(int(n)).token_ids.size for n in path]),  # type: ignore[union-attr]
                )
            )
            rewards.append(float(tree.reward[int(leaf)]))
            index.append(f"uid{p}")
            rows_masks.append(np.concatenate([tree.turn(int(n)).loss_mask for n in path]))  # type: ignore[union-attr]
            rows_ids.append(np.concatenate([tree.turn(int(n)).token_ids for n in path]))  # type: ignore[union-attr]
    return trees, layouts, np.array(rewards), index, rows_masks, rows_ids


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(
    ("name", "ours"), [("trace_treerpo", treerpo_advantages), ("trace_tree_grpo", tree_grpo_advantages)]
)
def test_registered_estimator_through_verl_equals_trace_rl(seed: int, name: str, ours) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    trees, layouts, rewards, index, row_masks, row_ids = random_batch(rng)
    order = rng.permutation(len(layouts))  # rows arrive in any order (TransferQueue, balancing)
    width = max(m.size for m in row_masks) + 2
    mask = np.zeros((len(order), width))
    tlr = np.zeros((len(order), width))
    for j, i in enumerate(order):
        mask[j, : row_masks[i].size] = row_masks[i]
        tlr[j, row_masks[i].size - 1] = rewards[i]  # verl's rm_scores: the reward on the last response token
    data = DataProto.from_dict(
        tensors={
            "token_level_rewards": torch.tensor(tlr, dtype=torch.float32),
            "response_mask": torch.tensor(mask),
        }
    )
    data.non_tensor_batch["uid"] = np.array([index[i] for i in order], dtype=object)
    with tree_layouts([layouts[i] for i in order]):
        out = compute_advantage(data, adv_estimator=name, config=None).batch["advantages"].numpy()
    expected = {}
    for p, tree in enumerate(trees):
        for path in token_advantages(tree, ours(tree)):
            expected[(f"uid{p}", tuple(path.token_ids.tolist()))] = path.advantages
    for j, i in enumerate(order):
        exp = expected[(index[i], tuple(row_ids[i].tolist()))]
        assert np.max(np.abs(out[j, : exp.size] - exp)) < 1e-6
        assert np.all(out[j, exp.size :] == 0)


def test_padding_rows_get_zero_and_estimators_refuse_without_layouts() -> None:
    adv = tree_token_advantages(
        [*LAYOUTS, None], ["u"] * 5, [*REWARDS, 0.0], np.vstack([masks(), np.ones(9)])
    )
    assert np.all(adv[4] == 0)
    with pytest.raises(ValueError, match="trace_sync"):
        compute_trace_treerpo_advantage(torch.zeros(2, 3), torch.ones(2, 3), index=["a", "a"])


def test_inconsistent_rows_are_rejected() -> None:
    with pytest.raises(ValueError, match="same leaf"):
        tree_from_rows([LAYOUTS[0], LAYOUTS[0]], [1.0, 0.0])
    with pytest.raises(ValueError, match="children"):  # a row ending inside another row's path
        tree_from_rows([LAYOUTS[0], RowLayout(np.array([0, 0]), np.array([3, 3]))], [1.0, 0.0])
    # session 2 continues node (0, 0) in one row and node (1, 0) in another
    with pytest.raises(ValueError, match="parent"):
        tree_from_rows(
            [RowLayout(np.array([0, 2]), np.array([1, 1])), RowLayout(np.array([1, 2]), np.array([1, 1]))],
            [0, 1],
        )
    with pytest.raises(ValueError, match="response has"):
        tree_token_advantages(LAYOUTS, ["u"] * 4, REWARDS, np.ones((4, 4)))
    with pytest.raises(ValueError, match="turn lengths"):
        RowLayout(np.array([0]), np.array([0]))


def test_trace_config_defaults_and_validation() -> None:
    from omegaconf import OmegaConf

    assert TraceVerlConfig.from_verl(OmegaConf.create({})) == TraceVerlConfig()
    cfg = TraceVerlConfig.from_verl(OmegaConf.create({"trace": {"continuations": 6, "root_budget": 512}}))
    assert (cfg.continuations, cfg.root_budget) == (6, 512)
    with pytest.raises(ValueError, match="unknown trace config keys"):
        TraceVerlConfig.from_verl(OmegaConf.create({"trace": {"N": 2}}))
    with pytest.raises(ValueError, match="min_rollouts"):
        TraceVerlConfig(min_rollouts=3, max_rollouts=2)
