"""Per-token advantages: broadcast node or leaf advantages over the turns of each root-to-leaf path.

The training batch holds one sequence per leaf (the prompt followed by the turns on its path), as in GRPO and
Tree-GRPO, which train every rollout as one sample. A turn that several paths share (a shared prefix) therefore
appears once per leaf below it. `shared_prefix` decides how those copies are counted:

- "per_path" (default): each copy carries the full advantage. Leaf-level estimators (GRPO, Tree-GRPO) give every
  token of path l the leaf's A(l), so a shared turn y receives sum over the n_y leaves below it of A(l): this is
  exactly the Tree-GRPO objective, where each leaf trajectory is one sample. Node-level TreeRPO gives the tokens of
  turn y its own A(y) in every path, so y counts n_y times.
- "once": each copy is scaled by 1/n_y so that the copies of turn y add up to one count. Leaf-level estimators give
  turn y the mean over its leaves of A(l); TreeRPO gives turn y exactly A(y), once, as if each turn were trained a
  single time. The scaling is exact for sum-type loss aggregations (seq-mean-token-sum); with token-mean the
  denominator still counts every copy.

Model tokens (loss_mask 1) carry the advantage; template, tool-result and observation tokens (loss_mask 0) get 0
and stay masked out of the loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from trace_rl.tree import RolloutTree

SharedPrefix = Literal["per_path", "once"]


@dataclass(frozen=True)
class PathTokens:
    """One training sequence: the turns on the path from the prompt to one leaf (prompt tokens not included).

    Attributes:
        leaf: the leaf node id.
        nodes: int64 (L,) the non-root node ids on the path, in order.
        prompt_ids: int64 (P,) the tree's prompt token ids (may be empty).
        token_ids: int64 (T,) the turns' tokens concatenated.
        loss_mask: int8 (T,) 1 for model-sampled tokens.
        logprobs: float32 (T,) behaviour-policy log-probabilities (0 where masked).
        advantages: float32 (T,) per-token advantage, 0 where masked.
        node_of_token: int64 (T,) the node each token belongs to.
    """

    leaf: int
    nodes: npt.NDArray[np.int64]
    prompt_ids: npt.NDArray[np.int64]
    token_ids: npt.NDArray[np.int64]
    loss_mask: npt.NDArray[np.int8]
    logprobs: npt.NDArray[np.float32]
    advantages: npt.NDArray[np.float32]
    node_of_token: npt.NDArray[np.int64]


def advantage_level(tree: RolloutTree, advantages: npt.ArrayLike) -> Literal["node", "leaf"]:
    """Whether `advantages` (float (n,)) is node-level (finite on every non-root node) or leaf-level (finite
    exactly on the leaves). A tree whose non-root nodes are all leaves reports "node" (both readings agree).

    Raises:
        ValueError: wrong shape or a NaN pattern that is neither.
    """
    a = np.asarray(advantages, dtype=np.float64)
    if a.shape != (tree.num_nodes,):
        raise ValueError(f"advantages must have shape ({tree.num_nodes},) (one per node), got {a.shape}")
    finite = np.isfinite(a[1:])
    if finite.all():
        return "node"
    if np.array_equal(finite, tree.is_leaf()[1:]):
        return "leaf"
    raise ValueError("advantages must be finite on every non-root node (node-level) or exactly on the leaves")


def token_advantages(
    tree: RolloutTree, advantages: npt.ArrayLike, *, shared_prefix: SharedPrefix = "per_path"
) -> list[PathTokens]:
    """Broadcast node- or leaf-level advantages to the tokens of every root-to-leaf path.

    Token t of turn y on the path to leaf l gets w_y * A, where A = A(l) for leaf-level input and A(y) for
    node-level input, w_y = 1 ("per_path") or 1/n_y ("once", n_y = leaves below y), times loss_mask[t].

    Args:
        tree: a tree whose non-root nodes all carry a `Turn`.
        advantages: float (n,), e.g. from `grpo_advantages`, `tree_grpo_advantages` or `treerpo_advantages`.
        shared_prefix: how the copies of a shared turn are counted (see the module docstring).

    Returns:
        One `PathTokens` per leaf, in `tree.leaves()` order.

    Raises:
        ValueError: bad shape or NaN pattern, an unknown `shared_prefix`, or a node without a turn payload.
    """
    if shared_prefix not in ("per_path", "once"):
        raise ValueError(f"shared_prefix must be 'per_path' or 'once', got {shared_prefix!r}")
    level = advantage_level(tree, advantages)
    a = np.asarray(advantages, dtype=np.float64)
    weight = 1.0 / np.maximum(tree.leaf_counts(), 1) if shared_prefix == "once" else np.ones(tree.num_nodes)
    turns = tree.turns
    out: list[PathTokens] = []
    for path in tree.paths():
        nodes = path[1:]
        leaf = int(nodes[-1])
        ids, masks, lps, advs, owner = [], [], [], [], []
        for y in nodes:
            turn = turns[int(y)]
            if turn is None:
                raise ValueError(f"node {int(y)} has no turn payload; token advantages need token ids")
            value = (a[leaf] if level == "leaf" else a[y]) * weight[y]
            ids.append(turn.token_ids)
            masks.append(turn.loss_mask)
            lps.append(turn.logprobs)
            advs.append(value * turn.loss_mask.astype(np.float64))
            owner.append(np.full(turn.token_ids.shape[0], y, dtype=np.int64))
        out.append(
            PathTokens(
                leaf=leaf,
                nodes=nodes.copy(),
                prompt_ids=tree.prompt_ids.copy(),
                token_ids=np.concatenate(ids).astype(np.int64),
                loss_mask=np.concatenate(masks).astype(np.int8),
                logprobs=np.concatenate(lps).astype(np.float32),
                advantages=np.concatenate(advs).astype(np.float32),
                node_of_token=np.concatenate(owner),
            )
        )
    return out
