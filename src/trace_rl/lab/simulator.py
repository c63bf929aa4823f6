"""A synthetic multi-turn task family with known success probabilities (the law is in docs/lab.md).

Each prompt has a latent success martingale over turns: V_0 = v0, V_t ~ Beta(c V_{t-1}, c (1 - V_{t-1})) at every
turn (E[V_t | V_{t-1}] = V_{t-1}), a number of turns T drawn independently of the path, and a terminal reward
R ~ Bernoulli(V_T). Hence V_t = E[R | first t turns] exactly: the state of a node is the true success
probability of its prefix. Root rollouts and replays from any turn prefix sample fresh futures from the right
conditional law; both come back as `RolloutTree` objects with `Turn` payloads carrying the state in `info`.

Simulation is vectorised: `simulate_futures` advances many chains at once with numpy; only the conversion to
`Turn` records and tree nodes is a Python loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trace_rl.tree import RolloutTree
from trace_rl.types import Task, Turn

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_NO_TOKENS = np.zeros(0, dtype=np.int64)
_NO_MASK = np.zeros(0, dtype=np.int8)
_NO_LOGPROBS = np.zeros(0, dtype=np.float32)
for _a in (_NO_TOKENS, _NO_MASK, _NO_LOGPROBS):
    _a.flags.writeable = False

# Observable progress messages: the change of logit V over a turn, in five buckets (edges in logit units).
_PROGRESS_EDGES = np.array([-1.0, -0.25, 0.25, 1.0])
_PROGRESS_TEXT = ("setback", "slight setback", "no change", "slight progress", "progress")


@dataclass(frozen=True)
class TaskFamily:
    """Parameters of the lab's task family (docs/lab.md gives the reasoning; defaults are the project's choice).

    Attributes:
        difficulty_a, difficulty_b: v0 ~ Beta(a, b), the initial success probability of a prompt.
        concentration_low, concentration_high: c ~ log-uniform on [low, high]; one turn resolves a share
            1 / (c + 1) of the remaining uncertainty E[V (1 - V)].
        length_low, length_high: typical length L ~ uniform on {low, ..., high} turns.
        length_spread: a rollout's turns T ~ uniform on {L - spread, ..., L + spread}.

    Raises:
        ValueError: a parameter out of range (non-positive Beta parameters or concentrations, low > high, or a
            shortest possible rollout under 2 turns, which would leave no anchor).
    """

    difficulty_a: float = 0.4
    difficulty_b: float = 0.4
    concentration_low: float = 3.0
    concentration_high: float = 30.0
    length_low: int = 5
    length_high: int = 10
    length_spread: int = 2

    def __post_init__(self) -> None:
        if not (self.difficulty_a > 0 and self.difficulty_b > 0):
            raise ValueError("difficulty_a and difficulty_b must be positive (Beta parameters)")
        if not (0 < self.concentration_low <= self.concentration_high):
            raise ValueError("need 0 < concentration_low <= concentration_high")
        if self.length_spread < 0 or self.length_low > self.length_high:
            raise ValueError("need length_low <= length_high and length_spread >= 0")
        if self.length_low - self.length_spread < 2:
            raise ValueError("the shortest rollout (length_low - length_spread) must have at least 2 turns")


@dataclass(frozen=True)
class Pool:
    """A candidate pool of P lab prompts (arrays of latent parameters plus the `Task` records).

    Attributes:
        v0: float64 (P,), true initial success probability of each prompt.
        concentration: float64 (P,), c_i (inverse volatility).
        length: int64 (P,), typical length L_i in turns.
        spread: rollouts of prompt i have L_i - spread .. L_i + spread turns.
        tasks: P `Task` records (env "lab"), latent parameters in `metadata`.
    """

    v0: FloatArray
    concentration: FloatArray
    length: IntArray
    spread: int
    tasks: tuple[Task, ...]

    def __len__(self) -> int:
        return int(self.v0.shape[0])


def make_pool(
    v0: npt.ArrayLike,
    concentration: npt.ArrayLike,
    length: npt.ArrayLike,
    *,
    spread: int = 2,
    name: str = "lab",
) -> Pool:
    """Build a pool from explicit latent parameters (tests and hand-made examples).

    Args:
        v0: (P,) initial success probabilities in [0, 1].
        concentration: (P,) positive concentrations, or a scalar.
        length: (P,) typical lengths, or a scalar; length - spread must be >= 2.
        spread: half-width of the per-rollout length range.
        name: prefix of the task ids.

    Raises:
        ValueError: shapes disagree, v0 outside [0, 1] or NaN, a non-positive concentration, or too short a length.
    """
    v = np.asarray(v0, dtype=np.float64).reshape(-1)
    p = v.shape[0]
    c = np.broadcast_to(np.asarray(concentration, dtype=np.float64), (p,)).copy()
    length_arr = np.broadcast_to(np.asarray(length), (p,)).astype(np.int64)
    if np.isnan(v).any() or ((v < 0) | (v > 1)).any():
        raise ValueError("v0 must hold probabilities in [0, 1]")
    if not (np.all(np.isfinite(c)) and np.all(c > 0)):
        raise ValueError("concentration must be positive and finite")
    if spread < 0 or (length_arr - spread < 2).any():
        raise ValueError("every rollout needs at least 2 turns: length - spread must be >= 2")
    tasks = tuple(
        Task(
            id=f"{name}-{i}",
            env="lab",
            prompt=f"lab task {name}-{i}",
            metadata={"v0": float(v[i]), "concentration": float(c[i]), "length": int(length_arr[i])},
        )
        for i in range(p)
    )
    return Pool(v0=v, concentration=c, length=length_arr, spread=int(spread), tasks=tasks)


def sample_pool(family: TaskFamily, size: int, rng: np.random.Generator, *, name: str = "lab") -> Pool:
    """Draw `size` prompts from the task family (v0, c, L independent; see `TaskFamily`).

    Raises:
        ValueError: size < 1.
    """
    if size < 1:
        raise ValueError(f"a pool needs at least one prompt; got size {size}")
    v0 = rng.beta(family.difficulty_a, family.difficulty_b, size)
    log_c = rng.uniform(np.log(family.concentration_low), np.log(family.concentration_high), size)
    length = rng.integers(family.length_low, family.length_high + 1, size)
    return make_pool(v0, np.exp(log_c), length, spread=family.length_spread, name=name)


def beta_step(v: FloatArray, c: FloatArray, rng: np.random.Generator) -> FloatArray:
    """One turn of the success martingale: V' ~ Beta(c V, c (1 - V)); 0 and 1 are absorbing.

    E[V' | V] = V and Var[V' | V] = V (1 - V) / (c + 1). Shapes: v and c (n,), returns (n,). A probability so
    close to 0 or 1 that c V or c (1 - V) underflows to 0 is treated as absorbed (numpy's Beta needs both > 0).
    """
    out = v.copy()
    live = (c * v > 0.0) & (c * (1.0 - v) > 0.0)
    if live.any():
        out[live] = rng.beta(c[live] * v[live], c[live] * (1.0 - v[live]))
    return out


@dataclass(frozen=True)
class Futures:
    """Simulated futures of n chains, each continuing from a start state for `steps[i]` turns.

    Attributes:
        states: float64 (n, S), V after each new turn (NaN past a chain's end); S = max(steps).
        steps: int64 (n,), number of new turns of each chain (>= 1).
        reward: float64 (n,), terminal reward in {0, 1}.
        progress: int64 (n, S), observable progress bucket of each turn (0 setback .. 4 progress; -1 past the end).
    """

    states: FloatArray
    steps: IntArray
    reward: FloatArray
    progress: IntArray

    def final(self) -> FloatArray:
        """float64 (n,): V_T, the state after each chain's last turn."""
        out: FloatArray = self.states[np.arange(self.steps.shape[0]), self.steps - 1]
        return out


def simulate_futures(
    start: FloatArray, concentration: FloatArray, steps: IntArray, rng: np.random.Generator
) -> Futures:
    """Advance n chains from their start states (vectorised over chains).

    Args:
        start: float64 (n,), V at the prefix each chain continues from.
        concentration: float64 (n,), c of each chain's prompt.
        steps: int64 (n,) >= 1, new turns of each chain.

    Returns:
        `Futures` with the states after each turn and R ~ Bernoulli(V_T).

    Raises:
        ValueError: shapes disagree or a chain has fewer than one step.
    """
    n = start.shape[0]
    if concentration.shape != (n,) or steps.shape != (n,):
        raise ValueError("start, concentration and steps must have the same shape (n,)")
    if n and steps.min() < 1:
        raise ValueError("every chain needs at least one turn")
    width = int(steps.max()) if n else 0
    states = np.full((n, width), np.nan)
    v = start.astype(np.float64).copy()
    for s in range(width):
        alive = steps > s
        v[alive] = beta_step(v[alive], concentration[alive], rng)
        states[alive, s] = v[alive]
    steps = steps.astype(np.int64)
    final = states[np.arange(n), steps - 1] if n else np.zeros(0)
    reward = (rng.random(n) < final).astype(np.float64)
    return Futures(states=states, steps=steps, reward=reward, progress=_progress(start, states))


def remaining_turns(pool: Pool, prompts: IntArray, depth: IntArray, rng: np.random.Generator) -> IntArray:
    """New turns of a future from a prefix of `depth` turns: T - depth with T ~ uniform{L-s..L+s} | T > depth.

    depth 0 is a fresh root rollout. Shapes: prompts and depth (n,), returns int64 (n,), each >= 1.

    Raises:
        ValueError: a prefix at or beyond the longest possible rollout (it cannot be a non-leaf prefix).
    """
    lo = pool.length[prompts] - pool.spread
    hi = pool.length[prompts] + pool.spread
    if (depth >= hi).any():
        raise ValueError(
            "a prefix is at least as long as the longest rollout of its prompt: it has no future"
        )
    first = np.maximum(lo, depth + 1)
    total = first + np.floor(rng.random(prompts.shape[0]) * (hi - first + 1)).astype(np.int64)
    out: IntArray = (total - depth).astype(np.int64)
    return out


def _logit(v: FloatArray) -> FloatArray:
    x = np.clip(v, 1e-12, 1.0 - 1e-12)
    out: FloatArray = np.log(x) - np.log1p(-x)
    return out


def _progress(start: FloatArray, states: FloatArray) -> IntArray:
    """Progress bucket of every turn: the change of logit V over it, cut at `_PROGRESS_EDGES` (-1 past the end)."""
    if states.size == 0:
        return np.zeros(states.shape, dtype=np.int64)
    with np.errstate(invalid="ignore"):
        path = _logit(np.concatenate([start[:, None], states], axis=1))
        delta = np.diff(path, axis=1)
    out: IntArray = np.searchsorted(_PROGRESS_EDGES, np.nan_to_num(delta)).astype(np.int64)
    out[np.isnan(states)] = -1
    return out


def _turns(states: FloatArray, progress: IntArray, first_turn: int) -> list[Turn | None]:
    return [
        Turn(
            token_ids=_NO_TOKENS,
            loss_mask=_NO_MASK,
            logprobs=_NO_LOGPROBS,
            text=f"turn {first_turn + j}",
            observation=_PROGRESS_TEXT[b],
            info={"v": v, "turn": first_turn + j},
        )
        for j, (v, b) in enumerate(zip(states.tolist(), progress.tolist(), strict=True))
    ]


def node_state(tree: RolloutTree, node: int) -> float:
    """The true success probability of the prefix ending at `node` (v0 at the prompt, node 0).

    Raises:
        ValueError: the tree does not come from the lab (no state in the payload or tree meta).
    """
    if node == 0:
        if "v0" not in tree.meta:
            raise ValueError("not a lab tree: its meta has no 'v0'")
        return float(tree.meta["v0"])
    turn = tree.turn(node)
    if turn is None or "v" not in turn.info:
        raise ValueError(f"node {node} carries no lab state (Turn.info['v'])")
    return float(turn.info["v"])  # type: ignore[arg-type]


def rollout_trees(
    pool: Pool, prompts: Sequence[int] | IntArray, counts: Sequence[int] | IntArray, rng: np.random.Generator
) -> list[RolloutTree]:
    """Root rollouts: `counts[i]` fresh rollouts of prompt `prompts[i]`, one tree per prompt.

    Args:
        pool: the candidate pool.
        prompts: (A,) prompt indices into the pool.
        counts: (A,) rollouts per prompt, each >= 1.

    Returns:
        A trees; tree.meta holds {"task_id", "prompt", "v0"}.

    Raises:
        ValueError: lengths disagree, an index is outside the pool or a count is < 1.
    """
    idx = np.asarray(prompts, dtype=np.int64).reshape(-1)
    cnt = np.asarray(counts, dtype=np.int64).reshape(-1)
    if idx.shape != cnt.shape:
        raise ValueError("prompts and counts must have the same length")
    if idx.size and (idx.min() < 0 or idx.max() >= len(pool)):
        raise ValueError("a prompt index is outside the pool")
    if (cnt < 1).any():
        raise ValueError("every listed prompt needs at least one rollout")
    owner = np.repeat(idx, cnt)
    steps = remaining_turns(pool, owner, np.zeros(owner.shape[0], dtype=np.int64), rng)
    fut = simulate_futures(pool.v0[owner], pool.concentration[owner], steps, rng)
    trees: list[RolloutTree] = []
    row = 0
    for i, m in zip(idx.tolist(), cnt.tolist(), strict=True):
        v0 = float(pool.v0[i])
        tree = RolloutTree.new(meta={"task_id": pool.tasks[i].id, "prompt": i, "v0": v0})
        for _ in range(m):
            s = int(fut.steps[row])
            tree.add_rollout(_turns(fut.states[row, :s], fut.progress[row, :s], 1), float(fut.reward[row]))
            row += 1
        trees.append(tree)
    return trees


def add_replays(
    tree: RolloutTree,
    pool: Pool,
    anchors: Sequence[int] | IntArray,
    counts: Sequence[int] | IntArray,
    rng: np.random.Generator,
) -> IntArray:
    """Replay `counts[j]` fresh futures from each anchor node `anchors[j]` of a lab tree (in place).

    Each replay keeps the anchor's history and state V_t and samples a new remaining length (T | T > t) and new
    martingale steps, exactly the conditional law of a root rollout given that prefix.

    Returns:
        int64 (R,): the leaf of every new replay, R = sum(counts).

    Raises:
        ValueError: lengths disagree, a negative count, or an anchor that is not a non-leaf node of this tree.
    """
    nodes = np.asarray(anchors, dtype=np.int64).reshape(-1)
    cnt = np.asarray(counts, dtype=np.int64).reshape(-1)
    if nodes.shape != cnt.shape:
        raise ValueError("anchors and counts must have the same length")
    if (cnt < 0).any():
        raise ValueError("replay counts must be >= 0")
    keep = cnt > 0
    nodes, cnt = nodes[keep], cnt[keep]
    if nodes.size == 0:
        return np.zeros(0, dtype=np.int64)
    prompt = int(tree.meta["prompt"])
    start = np.repeat(np.asarray([node_state(tree, int(a)) for a in nodes]), cnt)
    depth = np.repeat(tree.depth[nodes], cnt)
    owner = np.full(start.shape[0], prompt, dtype=np.int64)
    steps = remaining_turns(pool, owner, depth, rng)
    fut = simulate_futures(start, pool.concentration[owner], steps, rng)
    anchor_of = np.repeat(nodes, cnt)
    leaves = np.zeros(start.shape[0], dtype=np.int64)
    for r in range(start.shape[0]):
        s = int(fut.steps[r])
        turns = _turns(fut.states[r, :s], fut.progress[r, :s], int(depth[r]) + 1)
        ids = tree.add_replay(int(anchor_of[r]), turns, float(fut.reward[r]))
        leaves[r] = ids[-1]
    return leaves
