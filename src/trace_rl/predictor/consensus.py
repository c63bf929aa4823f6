"""What a prompt's other root rollouts say about a prefix: sibling consensus, a feature block of the convex predictor.

Why (issue 23, item 1; docs/predictor.md, "The group-aware predictors"): the root rollouts of a prompt are samples of
the same policy on the same task, and in a multi-turn environment several of them often pass through the same
environment state (the same observations, turn after turn). Those that did are extra Monte Carlo samples of the
success probability from the anchor's state, already generated and paid for; those that did not still say how hard
the prompt is for the current policy. The text of a prefix says neither (``ngram+minilm`` ranks multistep anchors by
flip rate at Spearman 0.32 within depth; the policy's hidden state 0.33). This module turns the tree into three
numbers per node, which the convex head weighs against the text features.

Features of a node v at depth t >= 1 (float64, :data:`GROUP_FEATURES` order), over C = the tree's root rollouts
(leaves that are not replays) whose path does NOT pass through v:

- ``same_state``: share of C whose first t turns returned the same observations as v's path (same environment
  state; a rollout that ended before turn t is not in it);
- ``same_state_success``: the rewards of those same-state rollouts, summed and divided by |C| (with 0/1 rewards,
  the share of C in the same state AND solved; other rewards count clipped to [0, 1]);
- ``others_success``: mean reward of C (clipped to [0, 1]).

The prompt node (t = 0) and a node all of whose tree's root rollouts pass through it get zeros. The node's own
rollout never enters its row (leak-free: the predictor trains on the node's outcome, and its features must not
contain it). The predictor keys rows by text, and two nodes can share one (two roots that acted and were answered
identically, or a serialization cut at ``max_chars``); its update pools their outcomes into one target. Given
``keys`` (the nodes' texts), nodes with one key therefore get one row, over the roots that pass through NONE of
them, so that no outcome behind a text's target enters that text's row; their "same state" is the state of any
of them (a history cut at ``max_chars`` can give nodes in different states one text). A node created by a replay is compared
with every root rollout (none passes through it), the rollout its anchor lies on included: that rollout shares its
state up to the anchor, and its ending is a sample from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

#: Column names of :func:`sibling_consensus` rows, in order.
GROUP_FEATURES = ("same_state", "same_state_success", "others_success")


def _observations(tree: Any, turns: list[Any], node: int) -> list[Any]:
    """The observations of the turns from the root down to ``node`` (None where a turn has no payload)."""
    return [None if turns[y] is None else turns[y].observation for y in tree.path_to(node)[1:].tolist()]


def sibling_consensus(
    tree: Any, nodes: npt.ArrayLike, *, keys: Sequence[str] | None = None
) -> npt.NDArray[np.float64]:
    """Rows float64 (n, 3) of :data:`GROUP_FEATURES` for ``nodes`` of a rollout tree (see the module doc).

    Args:
        tree: a ``RolloutTree`` (``depth``, ``reward``, ``is_replay``, ``leaves``, ``path_to``, ``turns``).
        nodes: int (n,) node ids.
        keys: optional (n,) predictor texts of the nodes: nodes with one text share one row, over the roots that
            pass through none of them (what a predictor keyed by text must get; module doc).

    Raises:
        ValueError: a node id outside the tree, or ``keys`` of another length.
    """
    counts = _consensus_counts(tree, nodes, keys)  # (n, 4): |C|, same, same rewards, C rewards
    out = np.zeros((counts.shape[0], len(GROUP_FEATURES)), dtype=np.float64)
    some = counts[:, 0] > 0
    out[some] = counts[some, 1:] / counts[some, :1]
    return out


#: Column names of :func:`prior_columns` rows, in order (the "group-prior" block of the convex predictor).
GROUP_PRIOR_FEATURES = ("same_state", "outside_success")


def prior_columns(rows: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The columns of :func:`sibling_consensus` rows that hold no outcome of the node's environment state.

    ``same_state`` (how many other roots reached the state, a share of C: a state no other root reached is
    usually a dead end) and ``outside_success = others_success - same_state_success`` (the summed rewards of the
    roots of C OUTSIDE the state, over |C|: how hard the prompt is elsewhere). A predictor that reads these as
    features can take the state's own outcomes as evidence afterwards (`same_state_outcomes`,
    ``budget.state_evidence``) without counting them twice: an empirical-Bayes split of the same tree into a prior
    (the features) and the likelihood (the outcomes), ours (docs/predictor.md).

    Args:
        rows: float (n, 3) in :data:`GROUP_FEATURES` order.

    Returns:
        float64 (n, 2) in :data:`GROUP_PRIOR_FEATURES` order, in [0, 1].

    Raises:
        ValueError: ``rows`` not of shape (n, 3).
    """
    arr = np.asarray(rows, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != len(GROUP_FEATURES):
        raise ValueError(f"prior_columns: rows must have shape (n, {len(GROUP_FEATURES)}); got {arr.shape}")
    return np.stack([arr[:, 0], np.clip(arr[:, 2] - arr[:, 1], 0.0, 1.0)], axis=1)


def same_state_outcomes(
    tree: Any, nodes: npt.ArrayLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(successes, trials) float64 (n,) of the OTHER root rollouts in each node's environment state.

    The rollouts of the module doc's ``same_state`` (identical observations through the node's depth, not through
    the node itself): samples of the success probability from the node's environment state that the tree
    already holds. Their rewards, clipped to [0, 1], are summed as successes. Depth 0 and a node without such
    rollouts get (0, 0). Used as evidence of the prefix stage's posterior (``budget.state_evidence``,
    `trace_rl.train.prefixes.anchor_evidence`), next to the rollouts below the node.

    Raises:
        ValueError: a node id outside the tree.
    """
    counts = _consensus_counts(tree, nodes)
    return counts[:, 2].copy(), counts[:, 1].copy()


def _consensus_counts(
    tree: Any, nodes: npt.ArrayLike, keys: Sequence[str] | None = None
) -> npt.NDArray[np.float64]:
    """float64 (n, 4) per node: |C|, rollouts of C in the same state, their summed rewards, C's summed rewards;
    with ``keys``, C leaves out the roots through any node of the same key, and "the same state" is the state of
    any of them (one text can stand for several states when serialization cut the history at ``max_chars``: a root
    in one member's state is then never counted outside the text's state, where the prior of ``group-prior`` would
    read it next to that member's state evidence)."""
    ids = np.asarray(nodes, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= tree.num_nodes):
        raise ValueError(f"sibling_consensus: node ids must lie in [0, {tree.num_nodes}); got {ids.tolist()}")
    if keys is not None and len(keys) != ids.size:
        raise ValueError(f"sibling_consensus: {len(keys)} keys for {ids.size} nodes")
    members: dict[Any, list[int]] = {}
    for row, node in enumerate(ids.tolist()):
        members.setdefault(row if keys is None else keys[row], []).append(node)
    leaves = tree.leaves()
    roots = leaves[~tree.is_replay[leaves]]
    reward = np.clip(tree.reward[roots], 0.0, 1.0)
    turns, depth = tree.turns, tree.depth.tolist()  # read once: tree.turns copies its list
    paths = [tree.path_to(int(leaf)).tolist() for leaf in roots]
    observed = [_observations(tree, turns, int(leaf)) for leaf in roots]
    out = np.zeros((ids.size, 4), dtype=np.float64)
    counts: dict[Any, tuple[float, float, float, float]] = {}  # per key: its nodes share one row
    for row, node in enumerate(ids.tolist()):
        if depth[node] == 0:
            continue
        key = row if keys is None else keys[row]
        if key not in counts:
            same_key = members[key]
            others = [
                i
                for i, p in enumerate(paths)
                if not any(len(p) > depth[u] and p[depth[u]] == u for u in same_key)
            ]
            states = [(depth[u], _observations(tree, turns, u)) for u in same_key]
            same = [
                i
                for i in others
                if any(observed[i][:d] == obs and len(observed[i]) >= d for d, obs in states)
            ]
            counts[key] = (len(others), len(same), float(np.sum(reward[same])), float(np.sum(reward[others])))
        out[row] = counts[key]
    return out


def examples_consensus(tree: Any, examples: Sequence[Any]) -> tuple[list[str], npt.NDArray[np.float64]]:
    """The texts and :func:`sibling_consensus` rows of a tree's training examples, keyed by text.

    Args:
        tree: the ``RolloutTree`` the examples were built from.
        examples: its `trace_rl.predictor.node_examples` (each with ``.node`` and ``.text``), the texts the
            trainer trains on: nodes of one text share one row (module doc).

    Returns:
        (texts (n,), rows float64 (n, 3)), in the examples' order.

    Raises:
        ValueError: a node id outside the tree.
    """
    texts = [e.text for e in examples]
    return texts, sibling_consensus(tree, [e.node for e in examples], keys=texts)
