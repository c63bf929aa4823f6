"""Allocation strategies for every method the trainer compares, as small pure functions.

A method is a pair of strategies:

* a root strategy ``(v, shape, rng) -> RootPlan`` over the candidate pool's success estimates v (shape (P,)),
  deciding rollouts per prompt and each prompt's replay budget;
* a prefix strategy ``(q, budget, rng, cost) -> k`` deciding replays per anchor of one prompt (q: repeat
  probabilities of its anchors, shape (J,); budget and cost in integer units, cost None = 1 per replay).

Every method spends the same budget (see `BudgetShape`): the flat baselines spend floor(M (1 + N c) / n) * n
root rollouts; the tree methods spend M roots plus N * m_i replays per prompt at cost c each. No method trains
on more distinct prompts per step than the flat baselines' batch size.

| method            | roots                                   | prefixes                         | source |
|-------------------|-----------------------------------------|----------------------------------|--------|
| grpo              | random batch, n each                    | none                             | Shao et al. 2024 |
| pcl               | batch nearest v = 1/2, n each           | none                             | Gao et al. 2025 (PCL) |
| knapsack          | random batch, exact knapsack of P_mix*p(1-p)^2 | none                      | Li et al. 2025 (Knapsack RL) |
| treepo            | random batch of M/n, n each             | uniformly random anchors         | TreePO baseline of TRACE |
| trace             | `allocate_roots` (max_active = batch)   | `allocate_prefixes`              | Zou et al. 2026 |
| trace_root_only   | `allocate_roots`                        | uniformly random anchors         | TRACE ablation |
| trace_prefix_only | random batch of M/n, n each             | `allocate_prefixes`              | TRACE ablation |
| trace_adaptive    | exact solve of the expected contrastive value (m-1) E[P_mix] under the predictor's measured uncertainty, a coverage floor of uniform prompts, all-roots when replays do not pay | `allocate_prefixes` on steps with replays | ours (issue 58; `trace_rl.allocation.adaptive`, docs/allocation.md) |
| trace_fresh       | `allocate_roots`                        | `allocate_prefixes` over the turn prefixes AND the prompt (depth-0 anchor: a fresh rollout, cost 1) | ours (docs/allocation.md) |
| dapo              | random batches of n each, drawn until batch_size mixed groups or a cap of draws; unmixed groups dropped | none | Yu et al. 2025 (DAPO, Sec. 3.2); verl's recipe |
| branpo            | random batch of M/n, n each             | the last 1-2 turn prefixes of each rollout, by BranPO's accuracy tiers, scaled to the budget | Zhao et al. 2026 (BranPO, arXiv 2602.03719); docs/allocation.md |
| prefix_sampling   | random batch of M/n, n each             | turn prefixes of the minority outcome's rollouts (passing ones in a mostly-failing group, failing ones in a mostly-passing group), toward a 1/2 pass rate | Zhu et al. 2026 (Prefix Sampling, arXiv 2605.05112); docs/allocation.md |

``trace_fresh`` keeps the paper's budget shape but never forces a prompt's local budget onto decided prefixes:
the prompt itself is one more anchor, whose "replay" is a fresh rollout costing 1 instead of ``replay_cost``, and
the exact solver spends the budget where flips per cost are likeliest (TRACE's seed: prompts are depth-zero
anchors).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.adaptive import AdaptiveState, adaptive_roots
from trace_rl.allocation.budget import BudgetShape, uniform_batch
from trace_rl.allocation.contrast import allocate_contrast
from trace_rl.allocation.knapsack import knapsack_dp
from trace_rl.allocation.objectives import mixed_probability
from trace_rl.allocation.prefixes import allocate_prefixes
from trace_rl.allocation.roots import allocate_roots
from trace_rl.allocation.validation import FloatArray, IntArray, as_probability_vector
from trace_rl.types import RootPlan

RootStrategy = Callable[[FloatArray, BudgetShape, np.random.Generator], RootPlan]
PrefixStrategy = Callable[[FloatArray, int, np.random.Generator, IntArray | None], IntArray]


def _plan(
    p: int, chosen: IntArray, counts: IntArray | int, shape: BudgetShape, method: str, replays: bool
) -> RootPlan:
    m = np.zeros(p, dtype=np.int64)
    m[chosen] = counts
    budget = m.astype(np.float64) * (shape.continuations if replays else 0)
    return RootPlan(rollouts=m, replay_budget=budget, method=method)


# ------------------------------------------------------------------------------------------ root strategies
def grpo_roots(v: FloatArray, shape: BudgetShape, rng: np.random.Generator) -> RootPlan:
    """GRPO: a uniformly random batch of ``shape.batch_size`` prompts, n rollouts each, no replays."""
    p = as_probability_vector(v, "v").shape[0]
    return _plan(p, uniform_batch(p, shape.batch_size, rng), shape.group_size, shape, "grpo", replays=False)


def pcl_roots(v: FloatArray, shape: BudgetShape, rng: np.random.Generator) -> RootPlan:
    """PCL-style: the ``batch_size`` prompts whose estimate is nearest v = 1/2 (ties at random), n each."""
    probs = as_probability_vector(v, "v")
    p = probs.shape[0]
    if shape.batch_size > p:
        raise ValueError(f"the candidate pool has {p} prompts, fewer than the batch size {shape.batch_size}")
    order = np.lexsort((rng.permutation(p), np.abs(probs - 0.5)))
    chosen = np.sort(order[: shape.batch_size]).astype(np.int64)
    return _plan(p, chosen, shape.group_size, shape, "pcl", replays=False)


def knapsack_roots(v: FloatArray, shape: BudgetShape, rng: np.random.Generator) -> RootPlan:
    """Knapsack-RL-style: a random batch, then the exact knapsack of its n * batch rollouts over the batch.

    Value of m rollouts (Li et al. 2025, Knapsack RL): P_mix(p, m) * p (1 - p)^2, m in {0} U [2, cap]; the
    whole budget goes to roots (no replays).
    """
    probs = as_probability_vector(v, "v")
    p = probs.shape[0]
    chosen = uniform_batch(p, shape.batch_size, rng)
    budget = shape.flat_rollouts
    cap = budget if shape.max_rollouts is None else min(shape.max_rollouts, budget)
    ms = np.arange(cap + 1)
    pc = probs[chosen]
    table = mixed_probability(pc[:, None], ms[None, :]) * (pc * (1.0 - pc) ** 2)[:, None]
    table[:, 1 : shape.min_rollouts] = -np.inf
    counts = knapsack_dp(table, budget, exact=True)
    return _plan(p, chosen, counts, shape, "knapsack", replays=False)


def uniform_tree_roots(v: FloatArray, shape: BudgetShape, rng: np.random.Generator) -> RootPlan:
    """TreePO / uniform roots: a random batch of M / n prompts, n rollouts each, N * n replays each."""
    p = as_probability_vector(v, "v").shape[0]
    chosen = uniform_batch(p, shape.tree_batch, rng)
    return _plan(p, chosen, shape.group_size, shape, "uniform_tree", replays=True)


def trace_roots(v: FloatArray, shape: BudgetShape, rng: np.random.Generator) -> RootPlan:
    """TRACE root allocation: `allocate_roots(v, M, max_active=batch_size)`, N * m_i replays per prompt."""
    probs = as_probability_vector(v, "v")
    m = allocate_roots(
        probs,
        shape.roots,
        min_rollouts=shape.min_rollouts,
        max_rollouts=shape.max_rollouts,
        max_active=shape.batch_size,
    )
    return _plan(probs.shape[0], np.arange(probs.shape[0], dtype=np.int64), m, shape, "trace", replays=True)


def adaptive_roots_once(v: FloatArray, shape: BudgetShape, rng: np.random.Generator) -> RootPlan:
    """`trace_adaptive`'s root allocation from the prior state: no outcomes measured yet, so the ranking test
    cannot pass and the plan is GRPO's (`adaptive_roots`); the trainer calls `adaptive_roots` with the run's
    `AdaptiveState` instead."""
    return adaptive_roots(v, shape, rng, AdaptiveState())


# ---------------------------------------------------------------------------------------- prefix strategies
def no_prefixes(
    q: FloatArray, budget: int, rng: np.random.Generator, cost: IntArray | None = None
) -> IntArray:
    """No replays (flat methods)."""
    return np.zeros(np.asarray(q).shape[0], dtype=np.int64)


def random_prefixes(
    q: FloatArray, budget: int, rng: np.random.Generator, cost: IntArray | None = None
) -> IntArray:
    """Uniform branching (TreePO): each replay starts from an anchor drawn uniformly at random.

    With unequal integer costs, anchors are drawn uniformly among those still affordable until none is.
    """
    j = np.asarray(q).shape[0]
    k = np.zeros(j, dtype=np.int64)
    if j == 0 or budget <= 0:
        return k
    if cost is None or np.all(np.asarray(cost) == np.asarray(cost).ravel()[0]):
        unit = 1 if cost is None else int(np.asarray(cost).ravel()[0])
        return rng.multinomial(budget // unit, np.full(j, 1.0 / j)).astype(np.int64)
    costs = np.asarray(cost, dtype=np.int64)
    left = int(budget)
    while True:
        ok = np.flatnonzero(costs <= left)
        if ok.size == 0:
            return k
        pick = int(rng.choice(ok))
        k[pick] += 1
        left -= int(costs[pick])


def trace_prefixes(
    q: FloatArray, budget: int, rng: np.random.Generator, cost: IntArray | None = None
) -> IntArray:
    """TRACE prefix expansion: `allocate_prefixes(q, budget, cost=cost)` (exact)."""
    return allocate_prefixes(q, budget, cost=cost)


#: The prefix objectives of the methods whose prefix strategy is `trace_prefixes` (``budget.prefix_objective``):
#: "paper" = TRACE's sum_j 1 - q_j^k_j (`allocate_prefixes`); "contrast" = `contrast_value` (`contrast_prefixes`).
PREFIX_OBJECTIVES = ("paper", "contrast")
#: Default weight of the sibling terms of the contrast objective: 1 makes it the expected number of sibling groups
#: (the root group included) that become mixed under TreeRPO (docs/allocation.md, "The contrast objective").
SIBLING_WEIGHT = 1.0


def contrast_prefixes(
    q: FloatArray,
    budget: int,
    rng: np.random.Generator,
    cost: IntArray | None = None,
    *,
    unanimous: bool,
    sibling: npt.NDArray[np.bool_] | None = None,
    weight: float = SIBLING_WEIGHT,
    max_per_prefix: int | None = None,
) -> IntArray:
    """TRACE's prefix stage under the contrast objective (ours; docs/allocation.md): `allocate_contrast` (exact).

    A `PrefixStrategy` plus what the objective needs besides q: whether the prompt's roots are unanimous and which
    anchors have a sibling group (not the depth-0 anchor of ``trace_fresh``). ``rng`` is unused (deterministic).
    """
    return allocate_contrast(
        q,
        budget,
        unanimous=unanimous,
        sibling=sibling,
        weight=weight,
        cost=cost,
        max_per_prefix=max_per_prefix,
    )


# ------------------------------------------------------------------------------- tail branching (BranPO)
@dataclass(frozen=True)
class TailAnchors:
    """Where a prompt's anchors lie on its root rollouts: the input of tail-branching strategies.

    Attributes:
        rollout: int64 (J,) index in 0..R-1 of the root rollout each anchor lies on.
        from_end: int64 (J,) turns from the anchor to its rollout's end (1: the last turn prefix, the rollout
            truncated by one turn).
        reward: float64 (R,) terminal reward of every root rollout of the prompt (also those without anchors).
        turns: int64 (R,) turns of every root rollout.
    """

    rollout: IntArray
    from_end: IntArray
    reward: FloatArray
    turns: IntArray

    def __post_init__(self) -> None:
        j, r = np.shape(self.rollout), np.shape(self.reward)
        if np.shape(self.from_end) != j or np.shape(self.turns) != r or len(j) != 1 or len(r) != 1:
            raise ValueError("TailAnchors: rollout and from_end must be (J,), reward and turns (R,)")
        if j[0] and (np.min(self.rollout) < 0 or np.max(self.rollout) >= r[0] or np.min(self.from_end) < 1):
            raise ValueError("TailAnchors: rollout must index 0..R-1 and from_end must be >= 1")


TailStrategy = Callable[[TailAnchors, int, np.random.Generator, IntArray | None], IntArray]


class _RolloutTreeLike(Protocol):
    """The parts of `trace_rl.tree.RolloutTree` that `tail_anchors` reads (allocation does not import tree)."""

    @property
    def depth(self) -> IntArray: ...
    @property
    def reward(self) -> FloatArray: ...
    @property
    def is_replay(self) -> npt.NDArray[np.bool_]: ...
    def paths(self) -> Iterator[IntArray]: ...
    def chain_leaf(self) -> IntArray: ...


def tail_anchors(tree: _RolloutTreeLike, nodes: Sequence[int]) -> TailAnchors:
    """Where each turn-prefix anchor (a node of ``tree``) lies on its root rollout, and every root's reward and turns.

    ``tree`` holds one prompt's rollouts (a `trace_rl.tree.RolloutTree`); the prefix strategy is called before any
    replay, so its root rollouts are its non-replay paths.

    Raises:
        ValueError: a node is the prompt (0) or does not lie on a root rollout.
    """
    chain_leaf = tree.chain_leaf()
    leaves = [int(p[-1]) for p in tree.paths() if not tree.is_replay[int(p[-1])]]
    index = {leaf: r for r, leaf in enumerate(leaves)}
    depth = np.asarray(tree.depth, dtype=np.int64)
    ends = [int(chain_leaf[int(x)]) if int(x) > 0 else -1 for x in nodes]
    if any(e not in index for e in ends):
        raise ValueError("tail anchors are turn prefixes of root rollouts (not the prompt, not replays)")
    return TailAnchors(
        rollout=np.asarray([index[e] for e in ends], dtype=np.int64),
        from_end=np.asarray(
            [depth[e] - depth[int(x)] for e, x in zip(ends, nodes, strict=True)], dtype=np.int64
        ),
        reward=np.asarray([float(tree.reward[leaf]) for leaf in leaves], dtype=np.float64),
        turns=np.asarray([depth[leaf] for leaf in leaves], dtype=np.int64),
    )


#: BranPO counts a rollout as solved at reward >= 0.8 (rLLM fork, rllm/engine/agent_branch_engine.py).
BRANPO_SOLVED = 0.8


def branpo_tiers(reward: npt.ArrayLike, turns: npt.ArrayLike) -> tuple[IntArray, IntArray]:
    """BranPO's hand-set tiers (Zhao et al. 2026, arXiv 2602.03719; rLLM fork, agent_branch_engine.py).

    With a = the share of the prompt's rollouts with reward >= 0.8 and L-bar = the mean turns of those solved,
    a rollout with reward r and L turns gets (replays, branch point b = turns cut from its end):

    - 1/2 < a < 1, solved, L - L-bar >= 0.1 (a solved rollout longer than usual):   5 replays, b = 2
    - a = 1:                                                                           1 replay,  b = 1
    - a < 1/2, failed:                                                                 2 replays, b = 1
    - otherwise a <= 3/4 or failed:                                                    2 replays, b = 1
    - otherwise (a solved rollout of an easy prompt, no longer than usual):            0

    (BranPO's num_branches counts the original rollout: 6, 2, 3, 3, 1.)

    Returns:
        (replays int64 (R,), branch point int64 (R,) >= 1).
    """
    r = np.asarray(reward, dtype=np.float64)
    n = np.asarray(turns, dtype=np.int64)
    if r.ndim != 1 or n.shape != r.shape:
        raise ValueError(f"reward and turns must be 1-D of one length; got {r.shape} and {n.shape}")
    solved = r >= BRANPO_SOLVED
    acc = float(solved.mean()) if r.size else 0.0
    mean_turns = float(n[solved].mean()) if solved.any() else 0.0
    replays = np.zeros(r.size, dtype=np.int64)
    point = np.ones(r.size, dtype=np.int64)
    for i in range(r.size):
        if 0.5 < acc < 1 and solved[i] and n[i] - mean_turns >= 0.1:
            replays[i], point[i] = 5, 2
        elif acc == 1:
            replays[i] = 1
        elif (acc < 0.5 and not solved[i]) or acc <= 0.75 or not solved[i]:
            replays[i] = (
                2  # BranPO then retries 1 (a >= 1/2) or 2 (a < 1/2) turns further back: no retries here
            )
    return replays, point


def apportion(weights: npt.ArrayLike, budget: int, cost: IntArray | None = None) -> IntArray:
    """Spend ``budget`` in proportion to ``weights`` (largest remainders; ties to the earlier index).

    k_j = floor(B w_j / (c_j sum w)) first, then one more replay at a time to the largest remainder that is still
    affordable. All-zero weights spread the budget evenly.

    Args:
        weights: (J,) >= 0. budget: integer units. cost: (J,) integer units per replay (None = 1).

    Returns:
        int64 (J,) with sum(cost * k) <= budget (== budget with unit costs and J > 0).
    """
    w = np.asarray(weights, dtype=np.float64)
    j = w.shape[0]
    c = np.ones(j, dtype=np.int64) if cost is None else np.asarray(cost, dtype=np.int64)
    if j == 0 or budget <= 0:
        return np.zeros(j, dtype=np.int64)
    if (w < 0).any() or not np.all(np.isfinite(w)) or c.shape != (j,) or (c < 1).any():
        raise ValueError("weights must be finite and >= 0, cost integers >= 1 of the same length")
    if w.sum() <= 0:
        w = np.ones(j)
    share = budget * w / w.sum() / c  # replays each anchor would get with fractional replays
    k: IntArray = np.floor(share).astype(np.int64)
    left = budget - int((c * k).sum())
    rest = share - k
    while True:
        ok = np.flatnonzero((c <= left) & (w > 0))
        if ok.size == 0:
            return k
        pick = int(ok[np.argmax(rest[ok])])  # argmax takes the first of equal remainders
        k[pick] += 1
        left -= int(c[pick])
        rest[pick] -= 1.0


def branpo_prefixes(
    tails: TailAnchors, budget: int, rng: np.random.Generator, cost: IntArray | None = None
) -> IntArray:
    """BranPO tail branching at equal budget: replays from each root rollout's last turn prefixes by its tier.

    Each rollout's tier (:func:`branpo_tiers`) names a count and a branch point b; its anchor b turns before its
    end (the shallowest turn prefix when the rollout is shorter than b + 1 turns) gets that count as a weight, and
    the prompt's budget is spent in proportion to the weights (:func:`apportion`), so every method spends the same
    budget. BranPO itself samples its branches one at a time, keeps the first whose outcome differs from the
    original and retries one or two turns further back when none does; one expansion round here has no retries.

    Returns:
        int64 (J,) replays per anchor.
    """
    j = tails.rollout.shape[0]
    weights = np.zeros(j, dtype=np.float64)
    counts, point = branpo_tiers(tails.reward, tails.turns)
    for r in np.flatnonzero(counts > 0):
        mine = np.flatnonzero(tails.rollout == r)
        if mine.size == 0:
            continue
        depth_from_end = tails.from_end[mine]
        target = min(int(point[r]), int(depth_from_end.max()))  # clamp to the shallowest turn prefix
        weights[mine[depth_from_end == target]] += counts[r]
    return apportion(weights, budget, cost)


# --------------------------------------------------------------------- pass-rate control (Prefix Sampling)
#: Prefix Sampling's success threshold: a rollout with reward >= 1/2 counts as a pass (binary rewards; ours, the
#: paper states binary rewards only).
PS_SOLVED = 0.5


def prefix_sampling_sources(reward: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """Which root rollouts Prefix Sampling replays from (Zhu et al. 2026, arXiv 2605.05112, "pass-rate control").

    With a = the share of the group's rollouts with reward >= `PS_SOLVED`: a mostly-failing group (0 < a < 1/2)
    continues from its passing rollouts' prefixes (a head start), a mostly-passing group (1/2 < a < 1) from its
    failing rollouts' prefixes (a handicap), both steering the group toward a 1/2 pass rate. A balanced group
    (a = 1/2) or a unanimous one (a in {0, 1}: no rollout of the other outcome to start from) has no source.

    Args:
        reward: (R,) terminal rewards of the group's root rollouts.

    Returns:
        bool (R,): True for the rollouts whose turn prefixes seed the replays.

    Raises:
        ValueError: ``reward`` is not 1-D or not finite.
    """
    r = np.asarray(reward, dtype=np.float64)
    if r.ndim != 1 or not np.all(np.isfinite(r)):
        raise ValueError(f"reward must be a 1-D array of finite rewards; got shape {r.shape}")
    passed = r >= PS_SOLVED
    a = float(passed.mean()) if r.size else 0.0
    if 0.0 < a < 0.5:
        return passed
    if 0.5 < a < 1.0:
        return ~passed
    return np.zeros(r.size, dtype=bool)


def prefix_sampling_prefixes(
    tails: TailAnchors, budget: int, rng: np.random.Generator, cost: IntArray | None = None
) -> IntArray:
    """Prefix Sampling (arXiv 2605.05112) at equal budget: replays from the minority outcome's turn prefixes.

    The source rollouts are `prefix_sampling_sources` of the group. Each replay picks a source rollout uniformly at
    random (every minority trajectory seeds the group equally), then one of its turn prefixes uniformly at random
    (the paper's prefix length is adaptive and unpublished in detail: every depth equally likely is our reading),
    while one is affordable; what is left when none is (token-priced budgets) and the whole budget of a group
    without a source (balanced, unanimous, or whose source rollouts have no turn prefix) is spent as `random_prefixes`
    (TreePO's uniform branching over all anchors): the paper leaves such groups alone, but equal budget must go
    somewhere, and uniform branching is the neutral choice (docs/allocation.md, "prefix_sampling").

    Args:
        tails: where each anchor lies on the group's root rollouts and every root's reward (`tail_anchors`).
        budget: the prompt's replay budget in integer units. rng: the step's generator.
        cost: (J,) integer units per replay from each anchor (None = 1).

    Returns:
        int64 (J,) replays per anchor, with sum(cost * k) <= budget.
    """
    j = tails.rollout.shape[0]
    k = np.zeros(j, dtype=np.int64)
    if j == 0 or budget <= 0:
        return k
    costs = np.ones(j, dtype=np.int64) if cost is None else np.asarray(cost, dtype=np.int64)
    if costs.shape != (j,) or (costs < 1).any():
        raise ValueError(f"cost must be {j} integers >= 1, one per anchor")
    source = prefix_sampling_sources(tails.reward)
    eligible = source[tails.rollout]
    if not eligible.any():
        return random_prefixes(np.zeros(j), budget, rng, cost)
    left = int(budget)
    while True:
        ok = eligible & (costs <= left)
        rollouts = np.unique(tails.rollout[ok])
        if rollouts.size == 0:
            break
        r = int(rng.choice(rollouts))
        pick = int(rng.choice(np.flatnonzero(ok & (tails.rollout == r))))
        k[pick] += 1
        left -= int(costs[pick])
    # token-priced budgets: what no source anchor can pay for still goes to uniform branching over all anchors
    return k + random_prefixes(np.zeros(j), left, rng, costs)


# -------------------------------------------------------------------------------------------- the methods
@dataclass(frozen=True)
class Method:
    """A named pair (root strategy, prefix strategy)."""

    name: str
    roots: RootStrategy
    prefixes: PrefixStrategy
    uses_predictor: bool
    fresh: bool = False  # the prefix budget may also buy fresh rollouts of the prompt (the depth-0 anchor)
    # DAPO dynamic sampling: the root strategy is drawn again over not-yet-drawn prompts until the batch holds
    # batch_size mixed groups (or a cap of draws); only mixed groups are trained on (trace_rl.train.step)
    dynamic_sampling: bool = False
    # tail branching (branpo): replays decided from where anchors lie on their rollouts instead of from q; the
    # step builds the `TailAnchors` of each prompt and calls this instead of ``prefixes``
    tail_prefixes: TailStrategy | None = None
    # trace_adaptive: the root strategy reads what the run measured on earlier steps (an `AdaptiveState` the
    # trainer owns and checkpoints, `trace_rl.allocation.adaptive.adaptive_roots`); ``roots`` is its one-step form
    # from the prior state, for callers without a run (the lab's single steps)
    adaptive: bool = False

    @property
    def has_replays(self) -> bool:
        return self.prefixes is not no_prefixes or self.tail_prefixes is not None


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("grpo", grpo_roots, no_prefixes, uses_predictor=False),
        Method("pcl", pcl_roots, no_prefixes, uses_predictor=True),
        Method("knapsack", knapsack_roots, no_prefixes, uses_predictor=True),
        Method("treepo", uniform_tree_roots, random_prefixes, uses_predictor=False),
        Method("trace", trace_roots, trace_prefixes, uses_predictor=True),
        Method("trace_root_only", trace_roots, random_prefixes, uses_predictor=True),
        Method("trace_prefix_only", uniform_tree_roots, trace_prefixes, uses_predictor=True),
        Method("trace_fresh", trace_roots, trace_prefixes, uses_predictor=True, fresh=True),
        Method("trace_adaptive", adaptive_roots_once, trace_prefixes, uses_predictor=True, adaptive=True),
        Method("dapo", grpo_roots, no_prefixes, uses_predictor=False, dynamic_sampling=True),
        Method(
            "branpo", uniform_tree_roots, no_prefixes, uses_predictor=False, tail_prefixes=branpo_prefixes
        ),
        Method(
            "prefix_sampling",
            uniform_tree_roots,
            no_prefixes,
            uses_predictor=False,
            tail_prefixes=prefix_sampling_prefixes,
        ),
    )
}


def get_method(name: str) -> Method:
    """The method registered under ``name``; ValueError listing the known names otherwise."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}") from None
