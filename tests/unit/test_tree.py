"""RolloutTree: construction, queries, value targets, anchors, save/load (hand-computed numbers)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.unit.tree_examples import example_tree, make_turn
from trace_rl.tree import RolloutTree
from trace_rl.types import Anchor


def test_new_tree_is_only_the_prompt() -> None:
    t = RolloutTree.new()
    assert t.num_nodes == 1
    assert t.parent.tolist() == [-1]
    assert t.depth.tolist() == [0]
    assert np.isnan(t.reward[0])
    assert t.turns == [None]
    assert t.leaves().size == 0
    assert t.anchors() == []
    assert np.isnan(t.value_targets()[0])  # no leaf below the root yet


def test_incremental_build_arrays() -> None:
    t = example_tree()
    assert t.parent.tolist() == [-1, 0, 1, 2, 0, 4, 1, 6, 4]
    assert t.depth.tolist() == [0, 1, 2, 3, 1, 2, 2, 3, 2]
    assert t.is_replay.tolist() == [False, False, False, False, False, False, True, True, True]
    np.testing.assert_array_equal(t.reward, [np.nan, np.nan, np.nan, 1, np.nan, 0, np.nan, 0, 1])
    assert t.leaves().tolist() == [3, 5, 7, 8]
    assert t.children(0).tolist() == [1, 4]
    assert t.children(1).tolist() == [2, 6]
    assert t.children(3).tolist() == []
    assert t.leaves_below(1).tolist() == [3, 7]
    assert t.leaves_below(4).tolist() == [5, 8]
    assert t.leaves_below(0).tolist() == [3, 5, 7, 8]
    assert t.leaves_below(7).tolist() == [7]
    assert [p.tolist() for p in t.paths()] == [[0, 1, 2, 3], [0, 4, 5], [0, 1, 6, 7], [0, 4, 8]]
    assert t.subtree(1).tolist() == [1, 2, 3, 6, 7]
    assert t.replay_starts().tolist() == [6, 8]
    assert (t.num_root_rollouts, t.num_replays) == (2, 2)
    assert t.leaf_counts().tolist() == [4, 2, 1, 1, 2, 1, 1, 1, 1]
    assert t.chain_leaf().tolist() == [-1, 3, 3, 3, 5, 5, 7, 7, 8]


def test_value_targets_by_hand() -> None:
    t = example_tree()
    # Leaves keep their reward: V(3)=1, V(5)=0, V(7)=0, V(8)=1.
    # V(2) = V(3) = 1; V(6) = V(7) = 0; V(1) = (1 + 0) / 2 = 0.5; V(4) = (0 + 1) / 2 = 0.5;
    # root: (n1 V1 + n4 V4) / n0 = (2 * 0.5 + 2 * 0.5) / 4 = 0.5.
    np.testing.assert_allclose(t.value_targets(), [0.5, 0.5, 1, 1, 0.5, 0, 0, 0, 1])
    lo, hi = t.leaf_reward_range()
    assert t.mixed().tolist() == [True, True, False, False, True, False, False, False, False]
    assert (lo[0], hi[0]) == (0.0, 1.0)


def test_value_targets_non_binary() -> None:
    # root -> 1 -> {2 (r=0.2), 3 -> 4 (r=0.9)}, root -> 5 (r=0.4)
    t = RolloutTree.from_parents([-1, 0, 1, 1, 3, 0], [np.nan, np.nan, 0.2, np.nan, 0.9, 0.4])
    # V(3) = 0.9; V(1) = (0.2 + 0.9) / 2 = 0.55; V(0) = (0.2 + 0.9 + 0.4) / 3 = 0.5
    np.testing.assert_allclose(t.value_targets(), [0.5, 0.55, 0.2, 0.9, 0.9, 0.4])


def test_anchors_carry_the_reward_of_their_root_rollout() -> None:
    t = example_tree()
    # Non-root, non-leaf, non-replay nodes: 1, 2 (rollout A, r=1) and 4 (rollout B, r=0).
    assert t.anchors() == [Anchor(1, 1, 1.0), Anchor(2, 2, 1.0), Anchor(4, 1, 0.0)]
    # Replay chains add node 6 (on the replay from 1 that ended with r=0).
    assert t.anchors(include_replays=True) == [
        Anchor(1, 1, 1.0),
        Anchor(2, 2, 1.0),
        Anchor(4, 1, 0.0),
        Anchor(6, 2, 0.0),
    ]


def test_replay_of_replay_and_from_prompt() -> None:
    t = example_tree()
    ids = t.add_replay(6, [None], 1.0)  # deeper round: anchor 6 is itself a replay node
    assert ids.tolist() == [9]
    assert t.parent[9] == 6 and t.depth[9] == 3 and t.is_replay[9]
    assert t.replay_starts().tolist() == [6, 8, 9]
    assert t.chain_leaf()[6] == 7  # node 6's own chain still ends at 7
    ids = t.add_replay(0, [None, None], 0.0)  # a fresh start counted as a replay
    assert ids.tolist() == [10, 11]
    assert t.replay_starts().tolist() == [6, 8, 9, 10]
    # V(6) = (0 + 1) / 2 after the new leaf; root: (1 + 0 + 0 + 1 + 1 + 0) / 6 = 0.5
    assert t.value_targets()[6] == 0.5
    assert t.value_targets()[0] == 0.5


def test_from_parents_infers_replays_like_the_incremental_build() -> None:
    t = example_tree()
    u = RolloutTree.from_parents(t.parent, t.reward)
    assert u.is_replay.tolist() == t.is_replay.tolist()
    assert u.anchors() == t.anchors()


@pytest.mark.parametrize(
    ("parent", "reward", "message"),
    [
        ([0, 0], [np.nan, 1.0], "parent\\[0\\] must be -1"),
        ([-1, 2, 1], [np.nan, np.nan, 1.0], "parents must come before"),
        ([-1, 0], [np.nan, np.nan], "leaves need a finite reward"),
        ([-1, 0, 1], [np.nan, 0.5, 1.0], "not a leaf"),
        ([-1, 0], [np.nan], "shape"),
        ([[-1, 0]], [np.nan, 1.0], "1-D"),
        ([-1.5, 0], [np.nan, 1.0], "integers"),
    ],
)
def test_from_parents_rejects_bad_arrays(parent: list[float], reward: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RolloutTree.from_parents(parent, reward)


def test_from_parents_rejects_inconsistent_replay_flags() -> None:
    parent, reward = [-1, 0, 1, 1], [np.nan, np.nan, 1.0, 0.0]
    with pytest.raises(ValueError, match="one chain"):
        RolloutTree.from_parents(parent, reward, is_replay=np.array([False, False, False, False]))
    with pytest.raises(ValueError, match="must be a replay node"):
        RolloutTree.from_parents(
            [-1, 0, 1, 2], [np.nan, np.nan, np.nan, 1.0], is_replay=np.array([0, 0, 1, 0], bool)
        )
    ok = RolloutTree.from_parents(parent, reward, is_replay=np.array([False, False, True, False]))
    # Explicit flags win over the lowest-id rule: node 3 continues the root rollout, node 2 is the replay.
    assert ok.anchors() == [Anchor(1, 1, 0.0)]


def test_bad_incremental_input() -> None:
    t = example_tree()
    with pytest.raises(ValueError, match="is a leaf"):
        t.add_replay(3, [None], 1.0)
    with pytest.raises(ValueError, match="does not exist"):
        t.add_replay(99, [None], 1.0)
    with pytest.raises(ValueError, match="at least one turn"):
        t.add_rollout([], 1.0)
    with pytest.raises(ValueError, match="finite"):
        t.add_rollout([None], float("nan"))
    bad = make_turn([1, 2], [3])
    bad = type(bad)(token_ids=bad.token_ids, loss_mask=bad.loss_mask[:2], logprobs=bad.logprobs)
    with pytest.raises(ValueError, match="same length"):
        t.add_rollout([bad], 1.0)
    assert t.num_nodes == 9  # failed calls leave the tree unchanged


def test_arrays_are_read_only() -> None:
    t = example_tree()
    with pytest.raises(ValueError):
        t.parent[1] = 5
    assert t.parent[1] == 0


def test_save_load_round_trip(tmp_path) -> None:
    t = example_tree(with_turns=True)
    t.prompt_ids = np.arange(5, dtype=np.int64)
    path = tmp_path / "tree.json"
    t.save(path)
    json.loads(path.read_text())  # strict JSON: NaN written as null
    u = RolloutTree.load(path)
    assert u.to_dict() == t.to_dict()
    np.testing.assert_array_equal(u.reward, t.reward)
    assert u.is_replay.tolist() == t.is_replay.tolist()
    assert u.prompt_ids.tolist() == [0, 1, 2, 3, 4]
    assert u.meta == {"task": "ex"}
    for a, b in zip(u.turns[1:], t.turns[1:], strict=True):
        assert a is not None and b is not None
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_array_equal(a.loss_mask, b.loss_mask)
        np.testing.assert_array_equal(a.logprobs, b.logprobs)
        assert a.logprobs.dtype == np.float32 and a.loss_mask.dtype == np.int8
        assert a.text == b.text


def test_load_rejects_garbage(tmp_path) -> None:
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        RolloutTree.load(p)
    p.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match=r"not a trace_rl\.RolloutTree"):
        RolloutTree.load(p)
    d = example_tree().to_dict()
    del d["parent"]
    with pytest.raises(ValueError, match="missing field 'parent'"):
        RolloutTree.from_dict(d)


def test_save_converts_numpy_meta_and_rejects_nan_without_leaving_temp_file(tmp_path) -> None:
    path = tmp_path / "t.json"
    t = RolloutTree.new(meta={"step": np.int64(3), "lr": np.float32(0.5), "ids": np.arange(2)})
    t.add_rollout([None], 1.0)
    t.save(path)
    assert RolloutTree.load(path).meta == {"step": 3, "lr": 0.5, "ids": [0, 1]}
    bad = RolloutTree.new(meta={"stats": {"loss": float("nan")}})
    bad.add_rollout([None], 1.0)
    with pytest.raises(ValueError, match=r"meta\['stats'\]\['loss'\]"):
        bad.save(tmp_path / "bad.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]  # no bad.json.tmp left behind


def test_load_validates_is_replay_prompt_ids_and_meta(tmp_path) -> None:
    base = {"format": "trace_rl.RolloutTree", "version": 1, "parent": [-1, 0], "reward": [None, 1]}
    base |= {"is_replay": [False, False], "turns": [None, None]}
    path = tmp_path / "t.json"
    for field, value in [("is_replay", [False, "yes"]), ("is_replay", [0, 2]), ("prompt_ids", "abc")]:
        path.write_text(json.dumps({**base, field: value}))
        with pytest.raises(ValueError, match=field):
            RolloutTree.load(path)
    path.write_text(json.dumps({**base, "meta": []}))
    with pytest.raises(ValueError, match="meta"):
        RolloutTree.load(path)
    path.write_text(json.dumps({**base, "is_replay": [0, 0], "prompt_ids": [5, 6]}))
    loaded = RolloutTree.load(path)
    assert loaded.is_replay.tolist() == [False, False] and loaded.prompt_ids.tolist() == [5, 6]


def test_uint64_parent_reported_as_given() -> None:
    with pytest.raises(ValueError, match="9223372036854775808"):
        RolloutTree.from_parents(np.array([2**63, 0], dtype=np.uint64), [np.nan, 1.0])
    # a float id too large for int64 is reported as given too (it used to overflow in the cast)
    with pytest.raises(ValueError, match=r"parent\[1\] = 1e\+30"):
        RolloutTree.from_parents(np.array([-1.0, 1e30]), [np.nan, 1.0])
