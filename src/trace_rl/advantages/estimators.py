"""Group-relative advantage estimators on a `RolloutTree` (pure numpy).

Defaults match verl's GRPO: unbiased standard deviation (ddof=1), eps = 1e-6 added to the std, and a group of one
or a group whose values are all equal gets advantage 0 (never a residue of the float mean divided by a tiny std).
"Equal" means within ``trace_rl.tree.REWARD_ATOL`` (1e-6): rewards 0.3 and 0.1 + 0.2 are one reward, here and in
`RolloutTree.mixed` / `trace_rl.metrics.effective_ratio`, so a tree counts as effective exactly when it has a
non-zero advantage.
`normalize_std=False` drops the division by the std, as in Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like
Training", arXiv 2503.20783, Sec. 3.1); the centring stays.

Leaf-level estimators (`grpo_advantages`, `tree_grpo_advantages`) return float64 (n,) with values at the leaves
and NaN elsewhere. The node-level estimator (`treerpo_advantages`) returns a value for every non-root node and NaN
at the root. `trace_rl.advantages.tokens.token_advantages` turns either kind into per-token advantages.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from trace_rl.tree import REWARD_ATOL, RolloutTree

FloatArray = npt.NDArray[np.float64]

DEFAULT_EPS = 1e-6


def _check_options(eps: float, ddof: int) -> None:
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps}")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 (population std) or 1 (unbiased std), got {ddof}")


def group_normalize(
    values: npt.ArrayLike, *, normalize_std: bool = True, eps: float = DEFAULT_EPS, ddof: int = 1
) -> FloatArray:
    """Group-relative advantages of one group: A_i = (x_i - mean(x)) / (std(x) + eps).

    GRPO (Shao et al. 2024, "DeepSeekMath", arXiv 2402.03300, Sec. 4.1.2, outcome supervision).

    Args:
        values: float (g,), the group's rewards or values, finite.
        normalize_std: divide by std + eps (GRPO); False gives x_i - mean(x) (Dr. GRPO).
        eps: added to the std.
        ddof: 1 for the unbiased std (verl's default), 0 for the population std.

    Returns:
        float64 (g,); all zeros when g < 2 or all values are equal (max - min <= ``REWARD_ATOL``, 1e-6).

    Raises:
        ValueError: values not 1-D or not finite, or bad options.
    """
    _check_options(eps, ddof)
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"a group must be a 1-D array, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("group values must be finite")
    if x.shape[0] < 2 or x.max() - x.min() <= REWARD_ATOL:
        return np.zeros(x.shape[0], dtype=np.float64)
    centred: FloatArray = x - x.mean()
    if not normalize_std:
        return centred
    return np.asarray(centred / (x.std(ddof=ddof) + eps), dtype=np.float64)


def _leaf_output(tree: RolloutTree, leaf_values: FloatArray) -> FloatArray:
    out = np.full(tree.num_nodes, np.nan, dtype=np.float64)
    out[tree.leaves()] = leaf_values
    return out


def grpo_advantages(
    tree: RolloutTree, *, normalize_std: bool = True, eps: float = DEFAULT_EPS, ddof: int = 1
) -> FloatArray:
    """GRPO over the whole tree: per leaf, A(l) = (r_l - mean r) / (std r + eps) over all leaves of the tree.

    Source: GRPO (Shao et al. 2024, arXiv 2402.03300, Sec. 4.1.2); the group is every rollout and replay of the
    prompt, shared prefixes ignored.

    Returns:
        float64 (n,): advantages at the leaves, NaN elsewhere (all NaN for a tree without leaves).
    """
    leaves = tree.leaves()
    return _leaf_output(
        tree, group_normalize(tree.reward[leaves], normalize_std=normalize_std, eps=eps, ddof=ddof)
    )


def tree_grpo_advantages(
    tree: RolloutTree, *, normalize_std: bool = True, eps: float = DEFAULT_EPS, ddof: int = 1
) -> FloatArray:
    """Tree-GRPO: per leaf, A(l) = A_intra(l) + A_inter(l).

    A_intra normalises r_l over the leaves under the same child of the root (one "tree" of Tree-GRPO: a root
    rollout with the replays grown from its prefixes); A_inter normalises r_l over all leaves of the prompt.
    Source: Ji et al. 2025, "Tree Search for LLM Agent Reinforcement Learning", arXiv 2509.21240, Sec. 3
    (intra-tree and inter-tree group relative advantage, summed).

    Returns:
        float64 (n,): advantages at the leaves, NaN elsewhere.
    """
    leaves = tree.leaves()
    rewards = tree.reward[leaves]
    inter = group_normalize(rewards, normalize_std=normalize_std, eps=eps, ddof=ddof)
    intra = np.zeros_like(inter)
    top = tree.ancestor_at_depth(leaves, 1)
    for t in np.unique(top):
        members = top == t
        intra[members] = group_normalize(rewards[members], normalize_std=normalize_std, eps=eps, ddof=ddof)
    return _leaf_output(tree, intra + inter)


def treerpo_advantages(
    tree: RolloutTree, *, normalize_std: bool = True, eps: float = DEFAULT_EPS, ddof: int = 1
) -> FloatArray:
    """TreeRPO, generalised to irregular trees: sibling-group advantages of the node values V^.

    For every node b whose parent has >= 2 children, A(b) = (V^(b) - mean_{s in sib(b)} V^(s)) / (std + eps),
    sib(b) the children of b's parent (b included) and V^ the mean leaf reward below a node
    (`RolloutTree.value_targets`). Every other non-root node takes A of its nearest ancestor that has one, or 0 if
    none does. Source: Yang et al. 2025, "TreeRPO: Tree Relative Policy Optimization", arXiv 2506.05183, Sec. 3
    (step-level groups of a sampled tree; the paper's trees are regular N-ary, here any branching is a group).

    Returns:
        float64 (n,): advantages at every non-root node, NaN at the root.
    """
    _check_options(eps, ddof)
    n = tree.num_nodes
    values = tree.value_targets()
    adv = np.full(n, np.nan, dtype=np.float64)
    for p in np.flatnonzero(tree.num_children() >= 2):
        kids = tree.children(int(p))
        adv[kids] = group_normalize(values[kids], normalize_std=normalize_std, eps=eps, ddof=ddof)
    parent = tree.parent
    for i in range(1, n):  # parents come first: inherit top-down
        if np.isnan(adv[i]):
            adv[i] = 0.0 if parent[i] == 0 else adv[parent[i]]
    return adv
