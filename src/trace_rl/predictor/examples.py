"""Training records for the predictor, cut from rollout trees.

A tree node y (the prompt at depth 0, or a turn prefix at depth t) becomes one :class:`NodeExample` whose text
is the serialized anchor and whose target is the paper's bottom-up value V^(y) = mean reward of the leaves below
y (TRACE, arXiv 2606.11119, predictor targets; ``RolloutTree.value_targets()``).

:func:`node_examples` reads a tree by duck typing (``parent``, ``depth``, ``turns``, ``value_targets()``), so it
depends on no tree class.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from trace_rl.predictor.serialize import serialize_anchor


@dataclass(frozen=True)
class NodeExample:
    """One (text, target) pair for the predictor.

    Attributes:
        text: serialized anchor (prompt plus history up to the node).
        target: success rate of the leaves below the node, in [0, 1].
        depth: number of turns in the prefix (0 = prompt level).
        weight: loss weight (1, or the number of leaves below the node).
        node: node id in its tree (-1 when not from a tree).
    """

    text: str
    target: float
    depth: int
    weight: float = 1.0
    node: int = -1

    @property
    def is_prefix(self) -> bool:
        """True for turn prefixes (depth >= 1), False for prompt-level examples."""
        return self.depth > 0


def leaf_counts(parent: npt.NDArray[np.int64], depth: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Number of leaves in the subtree of every node (a leaf counts itself), int64 (n,).

    Args:
        parent: int64 (n,) parent ids, -1 at the root.
        depth: int64 (n,) node depths (children deeper than parents).
    """
    n = parent.shape[0]
    has_child = np.zeros(n, dtype=bool)
    has_child[parent[parent >= 0]] = True
    counts = (~has_child).astype(np.int64)
    for node in np.argsort(-depth, kind="stable"):  # deepest first: children before their parents
        p = parent[node]
        if p >= 0:
            counts[p] += counts[node]
    return counts


def node_examples(
    tree: Any,
    prompt: str,
    *,
    max_chars: int = 4096,
    include_leaves: bool = False,
    weighting: Literal["uniform", "leaves"] = "uniform",
    text_of: Callable[[str, Sequence[Any]], str] | None = None,
) -> list[NodeExample]:
    """Cut predictor examples from a rollout tree.

    Args:
        tree: a ``trace_rl.tree.RolloutTree`` or anything with ``parent`` int64 (n,) (-1 at the root),
            ``depth`` int64 (n,), ``turns`` (n,) of Turn or None (None at the root, each Turn with ``text``
            and ``observation``) and ``value_targets()`` -> float64 (n,).
        prompt: the task prompt (``Task.prompt``).
        max_chars: serialization budget (use the predictor's ``max_chars``).
        include_leaves: also emit leaves (target = their own reward). Off by default: the predictor is only
            ever queried at prompts and at anchors, which are non-leaf nodes.
        weighting: "uniform" (weight 1 per node) or "leaves" (weight = leaves below the node, i.e. every leaf
            outcome counts once per ancestor; lowers the weight of noisy single-leaf targets).
        text_of: the text of (prompt, turns up to the node); default ``serialize_anchor(prompt, turns,
            max_chars=max_chars)``. An adapter passes the function it also scores with, so that the predictor
            learns from exactly the texts it is asked about (`trace_rl.integrations.verl.predictor.predictor_text`).

    Returns:
        Examples in node order: the root (depth 0) first, then every selected non-root node.

    Raises:
        ValueError: inconsistent arrays, a non-root node without a turn, or targets outside [0, 1] / NaN at a
            selected node.
    """
    if weighting not in ("uniform", "leaves"):
        raise ValueError(f"weighting must be 'uniform' or 'leaves'; got {weighting!r}")
    parent = np.asarray(tree.parent, dtype=np.int64)
    depth = np.asarray(tree.depth, dtype=np.int64)
    turns = list(tree.turns)
    targets = np.asarray(tree.value_targets(), dtype=np.float64)
    n = parent.shape[0]
    if n == 0:
        raise ValueError("tree has no nodes")
    if depth.shape != (n,) or targets.shape != (n,) or len(turns) != n:
        raise ValueError(
            f"tree arrays disagree in length: parent {n}, depth {depth.shape}, targets {targets.shape}, "
            f"turns {len(turns)}"
        )
    if parent[0] != -1 or (parent[1:] < 0).any() or (parent >= n).any():
        raise ValueError("tree.parent must be -1 at node 0 (the prompt) and a valid node id elsewhere")
    counts = leaf_counts(parent, depth)
    is_leaf = np.ones(n, dtype=bool)
    is_leaf[parent[parent >= 0]] = False
    is_leaf[0] = False  # the root is always a prompt-level example, even in a tree with no rollouts
    selected = [i for i in range(n) if include_leaves or not is_leaf[i]]
    out: list[NodeExample] = []
    for node in selected:
        y = float(targets[node])
        if not np.isfinite(y) or not 0.0 <= y <= 1.0:
            raise ValueError(f"target of node {node} must be a success rate in [0, 1]; got {y!r}")
        path: list[Any] = []
        cur = node
        while cur != 0:
            turn = turns[cur]
            if turn is None:
                raise ValueError(f"node {cur} is not the root but has no turn")
            path.append(turn)
            cur = int(parent[cur])
            if len(path) > n:
                raise ValueError("tree.parent has a cycle")
        path.reverse()
        out.append(
            NodeExample(
                text=text_of(prompt, path)
                if text_of is not None
                else serialize_anchor(prompt, path, max_chars=max_chars),
                target=y,
                depth=int(depth[node]),
                weight=float(counts[node]) if weighting == "leaves" else 1.0,
                node=node,
            )
        )
    return out


def split_by_level(examples: Sequence[NodeExample]) -> tuple[list[NodeExample], list[NodeExample]]:
    """(prompt-level examples, prefix examples) of a list, order kept."""
    prompts = [e for e in examples if not e.is_prefix]
    prefixes = [e for e in examples if e.is_prefix]
    return prompts, prefixes
