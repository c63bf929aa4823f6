"""Small hand-built trees shared by the unit tests."""

from __future__ import annotations

import numpy as np

from trace_rl.tree import RolloutTree
from trace_rl.types import Turn


def make_turn(model: list[int], obs: list[int], lp: float = -0.5) -> Turn:
    """A turn with `model` sampled tokens (mask 1) followed by `obs` observation tokens (mask 0)."""
    ids = np.asarray(model + obs, dtype=np.int64)
    mask = np.asarray([1] * len(model) + [0] * len(obs), dtype=np.int8)
    return Turn(token_ids=ids, loss_mask=mask, logprobs=(mask * lp).astype(np.float32), text=f"t{model}")


def example_tree(with_turns: bool = False) -> RolloutTree:
    """Two root rollouts with one replay each.

    0 (prompt)
    |-- 1 -- 2 -- 3      rollout A, r = 1
    |   `-- 6 -- 7       replay from 1, r = 0
    `-- 4 -- 5           rollout B, r = 0
        `-- 8            replay from 4, r = 1
    """
    t = RolloutTree.new(meta={"task": "ex"})

    def turns(k: int, base: int) -> list[Turn | None]:
        return [make_turn([base + j, base + j], [900 + j]) if with_turns else None for j in range(k)]

    assert list(t.add_rollout(turns(3, 10), 1.0)) == [1, 2, 3]
    assert list(t.add_rollout(turns(2, 20), 0.0)) == [4, 5]
    assert list(t.add_replay(1, turns(2, 30), 0.0)) == [6, 7]
    assert list(t.add_replay(4, turns(1, 40), 1.0)) == [8]
    return t
