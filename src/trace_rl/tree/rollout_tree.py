"""`RolloutTree`: the rollouts of one prompt as a few arrays with integer parent pointers (build and query).

Node 0 is the prompt (parent -1, depth 0). Every other node is one agent turn (thought + action + observation);
a node without children is a leaf, a final turn, and carries the terminal reward of the rollout that ends there.
Nodes are stored in creation order, so `parent[i] < i` for every non-root node: bottom-up passes are a sweep over
depth levels, from the deepest to the root, without recursion.

A root rollout is a chain of turns appended under node 0. A replay from anchor p (a turn prefix) appends a new
chain under p; its nodes are marked `is_replay`. Every non-root node lies on exactly one *chain*: the rollout or
replay that created it. Its continuation is the next node of that chain, which in a tree built by `add_rollout` /
`add_replay` is its lowest-id child with the same replay status (chains are appended in one piece, branches come
later). `from_parents` uses the same rule to recover chains from bare parent arrays.

The JSON form is `serialize.py`'s job; `to_dict` / `from_dict` / `save` / `load` delegate to it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from trace_rl.tree.serialize import load_tree, save_tree, tree_from_dict, tree_to_dict
from trace_rl.types import Anchor, Turn

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
_T = TypeVar("_T")


def _readonly(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    a.flags.writeable = False
    return a


def _finite_reward(reward: float, where: str) -> float:
    try:
        r = float(reward)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: reward must be a number, got {reward!r}") from None
    if not math.isfinite(r):
        raise ValueError(f"{where}: reward must be finite, got {r}")
    return r


REWARD_ATOL = 1e-6
"""Rewards (and value targets) closer than this are equal: for mixed groups, the effective ratio and the
advantage estimators alike (TRL's GRPO treats a group std below 1e-6 as zero the same way; verl's eps is 1e-6)."""


class RolloutTree:
    """The rollout tree of one prompt: root rollouts plus replays from their turn prefixes.

    Arrays (read-only views, n = `num_nodes`):
        parent: int64 (n,), parent node id; -1 at the root; `parent[i] < i`.
        depth: int64 (n,), number of turns from the prompt (root 0).
        reward: float64 (n,), terminal reward at leaves, NaN elsewhere.
        is_replay: bool (n,), True for nodes created by a replay (False at the root and on root rollouts).
        turns: list of n `Turn` payloads; None at the root and where no payload was given.

    Build with `RolloutTree.new()` then `add_rollout` / `add_replay`, or all at once with `from_parents`.
    """

    def __init__(
        self, *, prompt_ids: npt.ArrayLike | None = None, meta: dict[str, Any] | None = None
    ) -> None:
        self._parent: list[int] = [-1]
        self._depth: list[int] = [0]
        self._reward: list[float] = [math.nan]
        self._is_replay: list[bool] = [False]
        self._turns: list[Turn | None] = [None]
        self._children: list[list[int]] = [[]]
        self._cache: dict[str, Any] = {}
        self.prompt_ids: IntArray = np.asarray(
            [] if prompt_ids is None else prompt_ids, dtype=np.int64
        ).reshape(-1)
        """int64 (P,): token ids of the prompt context (optional; empty when unknown)."""
        self.meta: dict[str, Any] = dict(meta or {})
        """JSON-serialisable facts about the tree (task id, policy version, ...)."""

    # ----------------------------------------------------------------------------------------------- build
    @classmethod
    def new(
        cls, *, prompt_ids: npt.ArrayLike | None = None, meta: dict[str, Any] | None = None
    ) -> RolloutTree:
        """A tree holding only the prompt node 0 (parent -1, depth 0)."""
        return cls(prompt_ids=prompt_ids, meta=meta)

    def add_rollout(self, turns: Sequence[Turn | None], reward: float) -> IntArray:
        """Append a root rollout: a chain of len(turns) nodes under node 0.

        Args:
            turns: the rollout's turns in order (>= 1); None for a turn without token payload (simulators).
            reward: the rollout's terminal reward (finite), stored at the last node.

        Returns:
            int64 (len(turns),): the new node ids, the last one the leaf.

        Raises:
            ValueError: no turns, a non-finite reward, or a turn whose token arrays disagree in length.
        """
        return self._append_chain(0, turns, reward, replay=False, what="add_rollout")

    def add_replay(self, anchor: int, turns: Sequence[Turn | None], reward: float) -> IntArray:
        """Append a replay: a chain of len(turns) nodes continuing the prefix that ends at node `anchor`.

        The anchor keeps its history; the replay samples a fresh future from the same saved state. `anchor` may be
        any non-leaf node, including a replay node (deeper rounds) and the prompt (then the chain is a fresh
        rollout counted as a replay).

        Returns:
            int64 (len(turns),): the new node ids (all `is_replay`), the last one the leaf.

        Raises:
            ValueError: `anchor` is not a node or is a leaf (a final turn cannot be continued), no turns, a
                non-finite reward, or malformed turns.
        """
        a = self._check_node(anchor, "add_replay: anchor")
        if a != 0 and not self._children[a]:
            raise ValueError(
                f"add_replay: anchor {a} is a leaf (a final turn); replays start from non-leaf prefixes"
            )
        return self._append_chain(a, turns, reward, replay=True, what="add_replay")

    def _append_chain(
        self, parent: int, turns: Sequence[Turn | None], reward: float, *, replay: bool, what: str
    ) -> IntArray:
        turns = list(turns)
        if not turns:
            raise ValueError(f"{what}: a rollout needs at least one turn")
        r = _finite_reward(reward, what)
        for j, turn in enumerate(turns):
            if turn is not None:
                validate_turn(turn, f"{what}: turn {j}")
        start = len(self._parent)
        ids = np.arange(start, start + len(turns), dtype=np.int64)
        for j, turn in enumerate(turns):
            node = start + j
            self._parent.append(parent)
            self._depth.append(self._depth[parent] + 1)
            self._reward.append(r if j == len(turns) - 1 else math.nan)
            self._is_replay.append(replay)
            self._turns.append(turn)
            self._children.append([])
            self._children[parent].append(node)
            parent = node
        self._cache.clear()
        return ids

    @classmethod
    def from_parents(
        cls,
        parent: npt.ArrayLike,
        reward: npt.ArrayLike,
        turns: Sequence[Turn | None] | None = None,
        *,
        is_replay: npt.ArrayLike | None = None,
        prompt_ids: npt.ArrayLike | None = None,
        meta: dict[str, Any] | None = None,
    ) -> RolloutTree:
        """Build a tree from arrays.

        Args:
            parent: int (n,), parent[0] == -1 and 0 <= parent[i] < i for i >= 1 (parents come first).
            reward: float (n,), finite at the leaves (nodes without children, root excluded), NaN elsewhere.
            turns: optional n payloads, None at the root.
            is_replay: optional bool (n,). When omitted it is inferred: children of the root start root rollouts,
                and below them a node's lowest-id child continues its chain while every later child starts a
                replay (the order in which `add_rollout` / `add_replay` create nodes). Replays from the prompt
                itself cannot be told apart from root rollouts this way: pass `is_replay` when there are any.

        Raises:
            ValueError: the arrays are not 1-D of equal length, the parent pointers do not form a tree in
                creation order, rewards are NaN at a leaf or finite off the leaves, or `is_replay` is inconsistent
                (a root rollout must be one chain of non-replay nodes from the root to a leaf, and everything below
                a replay node is a replay).
        """
        p = np.asarray(parent)
        if p.ndim != 1 or p.shape[0] < 1:
            raise ValueError(f"parent must be a non-empty 1-D array, got shape {p.shape}")
        if p.dtype.kind not in "iu" and not (
            p.dtype.kind == "f" and np.all(np.isfinite(p)) and np.all(p == np.round(p))
        ):
            raise ValueError(f"parent must hold integers, got dtype {p.dtype}")
        n = p.shape[0]
        if p[0] != -1:
            raise ValueError(f"parent[0] must be -1 (node 0 is the prompt), got {p[0]}")
        # Range-checked before the cast to int64, so a uint64 or huge float id is reported as given.
        bad = np.flatnonzero(p[1:] >= n) + 1
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"parent[{i}] = {p[i]} must be in [0, {i}): parents must come before their children"
            )
        p = p.astype(np.int64)
        idx = np.arange(n)
        bad = np.flatnonzero((p[1:] < 0) | (p[1:] >= idx[1:])) + 1
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"parent[{i}] = {p[i]} must be in [0, {i}): parents must come before their children"
            )
        r = np.asarray(reward, dtype=np.float64)
        if r.shape != (n,):
            raise ValueError(f"reward must have shape ({n},) like parent, got {r.shape}")
        child_count = np.bincount(p[1:], minlength=n)
        leaf = child_count == 0
        leaf[0] = False
        bad = np.flatnonzero(leaf & ~np.isfinite(r))
        if bad.size:
            raise ValueError(f"leaf {int(bad[0])} has reward {r[bad[0]]}; leaves need a finite reward")
        bad = np.flatnonzero(~leaf & ~np.isnan(r))
        if bad.size:
            raise ValueError(
                f"node {int(bad[0])} is not a leaf but has reward {r[bad[0]]}; use NaN off the leaves"
            )
        if turns is None:
            turn_list: list[Turn | None] = [None] * n
        else:
            turn_list = list(turns)
            if len(turn_list) != n:
                raise ValueError(f"turns must have {n} entries like parent, got {len(turn_list)}")
            if turn_list[0] is not None:
                raise ValueError("turns[0] must be None: node 0 is the prompt, not a turn")
            for i, turn in enumerate(turn_list):
                if turn is not None:
                    validate_turn(turn, f"turns[{i}]")

        children: list[list[int]] = [[] for _ in range(n)]
        for i in range(1, n):
            children[int(p[i])].append(i)
        if is_replay is None:
            rep = np.zeros(n, dtype=bool)
            for i in range(1, n):
                par = int(p[i])
                rep[i] = bool(rep[par]) or (par != 0 and children[par][0] != i)
        else:
            rep = np.asarray(is_replay)
            if rep.shape != (n,) or rep.dtype != np.bool_:
                raise ValueError(
                    f"is_replay must be a bool array of shape ({n},), got {rep.dtype} {rep.shape}"
                )
            if rep[0]:
                raise ValueError("is_replay[0] must be False: node 0 is the prompt")
            for i in range(1, n):
                if rep[p[i]] and not rep[i]:
                    raise ValueError(f"node {i} lies below replay node {p[i]} so it must be a replay node")
            for i in range(1, n):
                if not rep[i] and children[i]:
                    own = sum(1 for c in children[i] if not rep[c])
                    if own != 1:
                        raise ValueError(
                            f"root-rollout node {i} has {own} non-replay children; a root rollout is one chain"
                        )

        tree = cls(prompt_ids=prompt_ids, meta=meta)
        depth = np.zeros(n, dtype=np.int64)
        for i in range(1, n):
            depth[i] = depth[p[i]] + 1
        tree._parent = [int(x) for x in p]
        tree._depth = [int(x) for x in depth]
        tree._reward = [float(x) for x in r]
        tree._is_replay = [bool(x) for x in rep]
        tree._turns = turn_list
        tree._children = children
        return tree

    # ----------------------------------------------------------------------------------------------- arrays
    def _cached(self, name: str, make: Callable[[], _T]) -> _T:
        if name not in self._cache:
            self._cache[name] = make()
        value: _T = self._cache[name]
        return value

    @property
    def num_nodes(self) -> int:
        """Number of nodes n, the prompt included."""
        return len(self._parent)

    def __len__(self) -> int:
        return len(self._parent)

    @property
    def parent(self) -> IntArray:
        """int64 (n,): parent node ids, -1 at the root."""
        return self._cached("parent", lambda: _readonly(np.asarray(self._parent, dtype=np.int64)))

    @property
    def depth(self) -> IntArray:
        """int64 (n,): turns between the prompt and the node (root 0)."""
        return self._cached("depth", lambda: _readonly(np.asarray(self._depth, dtype=np.int64)))

    @property
    def reward(self) -> FloatArray:
        """float64 (n,): terminal reward at the leaves, NaN elsewhere."""
        return self._cached("reward", lambda: _readonly(np.asarray(self._reward, dtype=np.float64)))

    @property
    def is_replay(self) -> BoolArray:
        """bool (n,): node created by a replay."""
        return self._cached("is_replay", lambda: _readonly(np.asarray(self._is_replay, dtype=np.bool_)))

    @property
    def turns(self) -> list[Turn | None]:
        """The n turn payloads (a copy of the list; None at the root)."""
        return list(self._turns)

    def turn(self, node: int) -> Turn | None:
        """The payload of one node (None at the root or where none was given)."""
        return self._turns[self._check_node(node, "turn")]

    def is_leaf(self) -> BoolArray:
        """bool (n,): nodes without children (a final turn); the root is never a leaf."""

        def make() -> BoolArray:
            m = np.asarray([not c for c in self._children], dtype=np.bool_)
            m[0] = False
            return _readonly(m)

        return self._cached("is_leaf", make)

    def leaves(self) -> IntArray:
        """int64 (L,): leaf node ids in increasing order (one per rollout or replay)."""
        return self._cached("leaves", lambda: _readonly(np.flatnonzero(self.is_leaf()).astype(np.int64)))

    @property
    def num_leaves(self) -> int:
        return int(self.leaves().shape[0])

    def children(self, node: int) -> IntArray:
        """int64 (c,): children of `node` in increasing id order."""
        return np.asarray(self._children[self._check_node(node, "children")], dtype=np.int64)

    def num_children(self) -> IntArray:
        """int64 (n,): number of children of every node."""
        return self._cached(
            "num_children", lambda: _readonly(np.asarray([len(c) for c in self._children], dtype=np.int64))
        )

    def path_to(self, node: int) -> IntArray:
        """int64 (depth[node] + 1,): node ids from the root (0) down to `node`."""
        i = self._check_node(node, "path_to")
        out = [i]
        while i != 0:
            i = self._parent[i]
            out.append(i)
        return np.asarray(out[::-1], dtype=np.int64)

    def paths(self) -> Iterator[IntArray]:
        """Root-to-leaf paths, one int64 array per leaf (in `leaves()` order), each starting at node 0."""
        for leaf in self.leaves():
            yield self.path_to(int(leaf))

    def ancestor_at_depth(self, nodes: npt.ArrayLike, depth: int) -> IntArray:
        """int64 (k,): the ancestor at `depth` of every node in `nodes` (a node is its own ancestor).

        Raises:
            ValueError: a node is shallower than `depth`.
        """
        anc = np.asarray(nodes, dtype=np.int64).reshape(-1).copy()
        d = self.depth[anc]
        if anc.size and d.min() < depth:
            raise ValueError(
                f"ancestor_at_depth: node {int(anc[np.argmin(d)])} is shallower than depth {depth}"
            )
        parent = self.parent
        for _ in range(int(d.max()) - depth if anc.size else 0):
            deeper = d > depth
            anc[deeper] = parent[anc[deeper]]
            d[deeper] -= 1
        return anc

    def leaves_below(self, node: int) -> IntArray:
        """int64 (k,): the leaves in the subtree of `node` (the node itself when it is a leaf), increasing ids."""
        i = self._check_node(node, "leaves_below")
        leaves = self.leaves()
        if i == 0:
            return leaves.copy()
        cand: IntArray = leaves[(leaves >= i) & (self.depth[leaves] >= self.depth[i])]
        inside: BoolArray = self.ancestor_at_depth(cand, int(self.depth[i])) == i
        return cand[inside]

    def subtree(self, node: int) -> IntArray:
        """int64 (k,): `node` and all its descendants, increasing ids."""
        i = self._check_node(node, "subtree")
        inside = np.zeros(self.num_nodes, dtype=bool)
        inside[i] = True
        for j in range(i + 1, self.num_nodes):
            inside[j] = inside[self._parent[j]]
        return np.flatnonzero(inside).astype(np.int64)

    # ----------------------------------------------------------------------------------------------- chains
    def continuation(self) -> IntArray:
        """int64 (n,): the next node of each node's own chain (-1 at leaves and at the root).

        For a root-rollout node that is its unique non-replay child; for a replay node (all of whose children are
        replay nodes) its lowest-id child, the node appended right after it by `add_replay`.
        """

        def make() -> IntArray:
            nxt = np.full(self.num_nodes, -1, dtype=np.int64)
            for i in range(1, self.num_nodes):
                kids = self._children[i]
                if not kids:
                    continue
                if self._is_replay[i]:
                    nxt[i] = kids[0]
                else:
                    nxt[i] = next(c for c in kids if not self._is_replay[c])
            return _readonly(nxt)

        return self._cached("continuation", make)

    def chain_leaf(self) -> IntArray:
        """int64 (n,): the leaf that ends the rollout or replay each node lies on (-1 at the root)."""

        def make() -> IntArray:
            nxt = self.continuation()
            out = np.full(self.num_nodes, -1, dtype=np.int64)
            for i in range(self.num_nodes - 1, 0, -1):  # continuation ids are larger: fill from the end
                out[i] = i if nxt[i] < 0 else out[nxt[i]]
            return _readonly(out)

        return self._cached("chain_leaf", make)

    def replay_starts(self) -> IntArray:
        """int64 (R,): the first node of every replay chain (R = number of replays); its parent is the anchor."""

        def make() -> IntArray:
            nxt = self.continuation()
            starts = [
                i
                for i in range(1, self.num_nodes)
                if self._is_replay[i] and (not self._is_replay[self._parent[i]] or nxt[self._parent[i]] != i)
            ]
            return _readonly(np.asarray(starts, dtype=np.int64))

        return self._cached("replay_starts", make)

    @property
    def num_root_rollouts(self) -> int:
        """Number of root rollouts (leaves not created by a replay)."""
        return int(np.count_nonzero(~self.is_replay[self.leaves()]))

    @property
    def num_replays(self) -> int:
        """Number of replays (leaves created by a replay)."""
        return int(np.count_nonzero(self.is_replay[self.leaves()]))

    # ----------------------------------------------------------------------------------------------- targets
    def _bottom_up(self, values: FloatArray, ufunc: np.ufunc) -> FloatArray:
        """Reduce `values` (given at the leaves) over every subtree with `ufunc`, deepest level first."""
        out = values.copy()
        depth, parent = self.depth, self.parent
        for d in range(int(depth.max()), 0, -1):
            idx = np.flatnonzero(depth == d)
            ufunc.at(out, parent[idx], out[idx])
        return out

    def leaf_counts(self) -> IntArray:
        """int64 (n,): n_y, the number of leaves below each node (1 at a leaf; all leaves at the root)."""

        def make() -> IntArray:
            ones = self.is_leaf().astype(np.float64)
            return _readonly(self._bottom_up(ones, np.add).astype(np.int64))

        return self._cached("leaf_counts", make)

    def value_targets(self) -> FloatArray:
        """float64 (n,): V^(y), the mean terminal reward of the leaves below each node.

        Equals the paper's bottom-up target V^(y) = (1/n_y) sum_{c child of y} n_c V^(c), V^(leaf) = r(leaf)
        (TRACE, arXiv 2606.11119, predictor targets; same recursion as TreeRPO, arXiv 2506.05183, Sec. 3).
        NaN only at a root without children.
        """

        def make() -> FloatArray:
            leaf = self.is_leaf()
            sums = self._bottom_up(np.where(leaf, self.reward, 0.0), np.add)
            counts = self.leaf_counts()
            with np.errstate(invalid="ignore", divide="ignore"):
                v = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
            # Where every leaf below shares one reward the target is that reward exactly (no division residue), so
            # an unmixed subtree never yields a spurious spread.
            lo, hi = self.leaf_reward_range()
            same = counts > 0
            same &= lo == hi
            v[same] = lo[same]
            return _readonly(v)

        return self._cached("value_targets", make)

    def leaf_reward_range(self) -> tuple[FloatArray, FloatArray]:
        """(min, max), float64 (n,) each: the smallest and largest leaf reward below each node (NaN if none)."""

        def make() -> tuple[FloatArray, FloatArray]:
            leaf = self.is_leaf()
            lo = self._bottom_up(np.where(leaf, self.reward, np.inf), np.minimum)
            hi = self._bottom_up(np.where(leaf, self.reward, -np.inf), np.maximum)
            empty = self.leaf_counts() == 0
            lo[empty] = np.nan
            hi[empty] = np.nan
            return _readonly(lo), _readonly(hi)

        return self._cached("leaf_reward_range", make)

    def mixed(self) -> BoolArray:
        """bool (n,): the leaves below the node do not all share one reward (binary: both a success and a failure).

        Rewards within ``REWARD_ATOL`` (1e-6) of each other count as one reward, as in the advantage estimators
        (`trace_rl.advantages.group_normalize`), so a tree is mixed exactly when its advantages are not all 0.
        """
        lo, hi = self.leaf_reward_range()
        return np.asarray(hi - lo > REWARD_ATOL, dtype=np.bool_)

    def anchors(self, *, include_replays: bool = False) -> list[Anchor]:
        """Turn prefixes that replays may start from, in node order.

        The non-root, non-leaf nodes of root rollouts, each with the terminal reward r of the root rollout it lies
        on (TRACE prefix expansion: q = r V + (1 - r)(1 - V)). With `include_replays`, non-leaf replay nodes are
        added too, each with the reward of its own replay (for deeper expansion rounds).
        """
        leaf = self.is_leaf()
        chain_leaf = self.chain_leaf()
        out: list[Anchor] = []
        for i in range(1, self.num_nodes):
            if leaf[i] or (self._is_replay[i] and not include_replays):
                continue
            out.append(Anchor(node=i, depth=self._depth[i], reward=self._reward[int(chain_leaf[i])]))
        return out

    # ----------------------------------------------------------------------------------------------- io
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN rewards become null; numpy values in ``meta`` become Python ones) that
        `from_dict` inverts exactly. Raises ValueError when ``meta`` is not JSON-representable
        (`serialize.tree_to_dict`)."""
        return tree_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutTree:
        """Inverse of `to_dict`. Raises ValueError for a record of another format or version, or invalid arrays
        (`serialize.tree_from_dict`, then `from_parents`)."""
        return tree_from_dict(data, cls)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the tree as one JSON document (UTF-8), atomically: a temp file, then a rename
        (`serialize.save_tree`). Raises ValueError when ``meta`` is not JSON-representable."""
        save_tree(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RolloutTree:
        """Read a tree written by `save` (`serialize.load_tree`). Raises ValueError for invalid JSON or a record
        that is not a RolloutTree."""
        return load_tree(path, cls)

    # ----------------------------------------------------------------------------------------------- misc
    def _check_node(self, node: int, what: str) -> int:
        if isinstance(node, bool) or not isinstance(node, int | np.integer):
            raise ValueError(f"{what}: node must be an integer id, got {node!r}")
        i = int(node)
        if not 0 <= i < len(self._parent):
            raise ValueError(f"{what}: node {i} does not exist (tree has {len(self._parent)} nodes)")
        return i

    def __repr__(self) -> str:
        return (
            f"RolloutTree(nodes={self.num_nodes}, root_rollouts={self.num_root_rollouts}, "
            f"replays={self.num_replays}, max_depth={int(self.depth.max())})"
        )


def validate_turn(turn: Turn, where: str) -> None:
    """Check that a turn's token arrays agree in length.

    Raises:
        ValueError: the three arrays differ in length, or the loss mask holds values other than 0 and 1.
    """
    if not isinstance(turn, Turn):
        raise ValueError(f"{where}: expected a trace_rl.types.Turn, got {type(turn).__name__}")
    n = turn.token_ids.shape[0]
    if turn.loss_mask.shape != (n,) or turn.logprobs.shape != (n,):
        raise ValueError(
            f"{where}: token_ids, loss_mask and logprobs must have the same length, got "
            f"{turn.token_ids.shape}, {turn.loss_mask.shape}, {turn.logprobs.shape}"
        )
    if n and not np.isin(turn.loss_mask, (0, 1)).all():
        raise ValueError(f"{where}: loss_mask must hold only 0 and 1")
