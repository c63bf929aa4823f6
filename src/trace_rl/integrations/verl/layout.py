"""Tree layout of verl training rows, and tree advantages per token (pure numpy; no verl import).

In verl one trajectory is one row: the prompt's token ids, then ``responses`` (every turn's tokens) with
``response_mask`` 1 on model-sampled tokens. TRACE's rows are the root-to-leaf paths of a rollout tree: a root
rollout is one row, and a replay from the turn prefix of session ``p`` at depth ``d`` is a row whose first
``d`` turns are session ``p``'s and whose later turns are its own. Each row carries two small int64 fields:

- ``trace_sessions`` (turns,): the session that sampled each turn on the row's path;
- ``trace_turn_lens`` (turns,): each turn's token count in ``responses`` (model tokens + observation tokens).

A tree node is identified by (origin session, depth), so all rows of one prompt (one verl ``uid``) rebuild its
`RolloutTree` exactly, whatever order the rows arrive in, and per-token advantages follow trace-rl's own
estimators with ``shared_prefix="per_path"`` (`trace_rl.advantages.token_advantages`): every token of turn y on
a row gets A(y) for node-level TreeRPO, or the row's leaf advantage A(l) for leaf-level Tree-GRPO / GRPO; masked
tokens get 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trace_rl.advantages import advantage_level, grpo_advantages, tree_grpo_advantages, treerpo_advantages
from trace_rl.tree import RolloutTree

TreeEstimator = Callable[..., npt.NDArray[np.float64]]

TREE_ESTIMATORS: dict[str, TreeEstimator] = {
    "treerpo": treerpo_advantages,
    "tree_grpo": tree_grpo_advantages,
    "grpo": grpo_advantages,
}


@dataclass(frozen=True)
class RowLayout:
    """Where one verl row sits in its prompt's rollout tree.

    Attributes:
        sessions: int64 (turns,) the session that sampled each turn on the row's path (root to leaf).
        turn_lens: int64 (turns,) tokens of each turn in the row's ``responses``, in order (sum <= response length).
    """

    sessions: npt.NDArray[np.int64]
    turn_lens: npt.NDArray[np.int64]

    def __post_init__(self) -> None:
        s, t = np.asarray(self.sessions), np.asarray(self.turn_lens)
        if s.ndim != 1 or s.shape != t.shape:
            raise ValueError(
                f"sessions and turn_lens must be 1-D of equal length, got {s.shape} and {t.shape}"
            )
        if s.size == 0:
            raise ValueError("a row needs at least one turn")
        if (t < 1).any() or (s < 0).any():
            raise ValueError("turn lengths must be >= 1 and session ids >= 0")


@dataclass(frozen=True)
class PromptTree:
    """The rollout tree rebuilt from one prompt's rows.

    Attributes:
        tree: the `RolloutTree` (node 0 the prompt; one node per (origin session, depth)).
        row_nodes: for each input row, int64 (turns,) the node of each of its turns (the last one its leaf).
    """

    tree: RolloutTree
    row_nodes: list[npt.NDArray[np.int64]]


def tree_from_rows(layouts: Sequence[RowLayout], rewards: npt.ArrayLike) -> PromptTree:
    """Rebuild one prompt's rollout tree from its rows.

    Args:
        layouts: one `RowLayout` per row of the prompt (any order).
        rewards: float (R,) each row's terminal reward.

    Returns:
        `PromptTree`. Nodes are numbered by (depth, origin session), so parents come first.

    Raises:
        ValueError: no rows, a reward count that differs from the rows, or rows that disagree about a node's
            parent, or two rows that end on the same leaf (each root rollout or replay is exactly one row).
    """
    r = np.asarray(rewards, dtype=np.float64)
    if not layouts:
        raise ValueError("a prompt needs at least one row")
    if r.shape != (len(layouts),):
        raise ValueError(f"{len(layouts)} rows but rewards of shape {r.shape}")
    parent_of: dict[tuple[int, int], tuple[int, int] | None] = {}
    for lay in layouts:
        prev: tuple[int, int] | None = None
        for depth, s in enumerate(np.asarray(lay.sessions).tolist()):
            key = (int(s), depth)
            if parent_of.setdefault(key, prev) != prev:
                raise ValueError(f"rows disagree about the parent of turn {depth} of session {s}")
            prev = key
    order = sorted(parent_of, key=lambda k: (k[1], k[0]))
    node_of = {k: i + 1 for i, k in enumerate(order)}
    n = len(order) + 1
    parent = np.full(n, -1, dtype=np.int64)
    for k in order:
        p = parent_of[k]
        parent[node_of[k]] = 0 if p is None else node_of[p]
    reward = np.full(n, np.nan, dtype=np.float64)
    row_nodes = []
    has_child = np.zeros(n, dtype=bool)
    has_child[parent[1:]] = True
    for lay, rew in zip(layouts, r.tolist(), strict=True):
        nodes = np.array(
            [node_of[(int(s), d)] for d, s in enumerate(np.asarray(lay.sessions).tolist())], dtype=np.int64
        )
        leaf = int(nodes[-1])
        if has_child[leaf]:
            raise ValueError(f"a row ends on node {leaf}, which has children: rows must end on leaves")
        if not np.isnan(reward[leaf]):
            raise ValueError(f"two rows end on the same leaf (node {leaf})")
        reward[leaf] = rew
        row_nodes.append(nodes)
    return PromptTree(RolloutTree.from_parents(parent, reward), row_nodes)


def tree_token_advantages(
    layouts: Sequence[RowLayout | None],
    index: Sequence[object],
    rewards: npt.ArrayLike,
    response_mask: npt.ArrayLike,
    *,
    estimator: str = "treerpo",
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> npt.NDArray[np.float32]:
    """Per-token tree advantages for a verl batch (the registered estimators' core).

    Args:
        layouts: (B,) each row's `RowLayout`, or None for a padding row (advantage 0).
        index: (B,) each row's prompt id (verl's ``uid``); rows of one prompt form one tree.
        rewards: float (B,) each row's terminal reward (the row sum of verl's ``token_level_rewards``).
        response_mask: (B, L) 1 on model-sampled response tokens (verl's ``response_mask``).
        estimator: "treerpo" (node-level, Yang et al. 2025), "tree_grpo" (Ji et al. 2025) or "grpo" over the
            whole tree; see `trace_rl.advantages`.
        normalize_std, eps: as in `trace_rl.advantages.group_normalize` (unbiased std, verl's GRPO defaults).

    Returns:
        float32 (B, L): A of the turn each token belongs to (node-level) or of the row's leaf (leaf-level),
        times the response mask; 0 on padding rows and beyond each row's turns.

    Raises:
        ValueError: unknown estimator, mismatched lengths, a row whose turns exceed its response length, or an
            inconsistent tree (see `tree_from_rows`).
    """
    if estimator not in TREE_ESTIMATORS:
        raise ValueError(
            f"unknown tree estimator {estimator!r}; expected one of {', '.join(TREE_ESTIMATORS)}"
        )
    mask = np.asarray(response_mask, dtype=np.float64)
    r = np.asarray(rewards, dtype=np.float64)
    b = len(layouts)
    if mask.ndim != 2 or mask.shape[0] != b or r.shape != (b,) or len(index) != b:
        raise ValueError(
            f"layouts ({b}), index ({len(index)}), rewards {r.shape} and response_mask {mask.shape} must agree"
        )
    out = np.zeros(mask.shape, dtype=np.float64)
    groups: dict[object, list[int]] = {}
    for i, lay in enumerate(layouts):
        if lay is not None:
            groups.setdefault(index[i], []).append(i)
    fn = TREE_ESTIMATORS[estimator]
    for rows in groups.values():
        lays = [layouts[i] for i in rows]
        built = tree_from_rows([lay for lay in lays if lay is not None], r[rows])
        adv = fn(built.tree, normalize_std=normalize_std, eps=eps)
        node_level = advantage_level(built.tree, adv) == "node"
        for i, lay, nodes in zip(rows, lays, built.row_nodes, strict=True):
            assert lay is not None
            lens = np.asarray(lay.turn_lens, dtype=np.int64)
            if int(lens.sum()) > mask.shape[1]:
                raise ValueError(
                    f"row {i}: turns cover {int(lens.sum())} tokens, the response has {mask.shape[1]}"
                )
            per_turn = adv[nodes] if node_level else np.full(nodes.shape, adv[int(nodes[-1])])
            out[i, : int(lens.sum())] = np.repeat(per_turn, lens)
    return np.asarray(out * mask, dtype=np.float32)
