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
| trace_fresh       | `allocate_roots`                        | `allocate_prefixes` over the turn prefixes AND the prompt (depth-0 anchor: a fresh rollout, cost 1) | ours (docs/allocation.md) |
| dapo              | random batches of n each, drawn until batch_size mixed groups or a cap of draws; unmixed groups dropped | none | Yu et al. 2025 (DAPO, Sec. 3.2); verl's recipe |

``trace_fresh`` keeps the paper's budget shape but never forces a prompt's local budget onto decided prefixes:
the prompt itself is one more anchor, whose "replay" is a fresh rollout costing 1 instead of ``replay_cost``, and
the exact solver spends the budget where flips per cost are likeliest (TRACE's seed: prompts are depth-zero
anchors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.budget import BudgetShape
from trace_rl.allocation.objectives import FloatArray, IntArray, _as_probability, mixed_probability
from trace_rl.allocation.solvers import allocate_prefixes, allocate_roots, knapsack_dp
from trace_rl.types import RootPlan

RootStrategy = Callable[[FloatArray, BudgetShape, np.random.Generator], RootPlan]
PrefixStrategy = Callable[[FloatArray, int, np.random.Generator, IntArray | None], IntArray]


def _pool(v: npt.ArrayLike) -> FloatArray:
    arr = _as_probability(v, "v")
    if arr.ndim != 1:
        raise ValueError(f"v must be a 1-D array of success estimates; got shape {arr.shape}")
    return arr


def _random_batch(p: int, size: int, rng: np.random.Generator) -> IntArray:
    if size > p:
        raise ValueError(f"the candidate pool has {p} prompts, fewer than the batch size {size}")
    return np.sort(rng.choice(p, size=size, replace=False)).astype(np.int64)


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
    p = _pool(v).shape[0]
    return _plan(p, _random_batch(p, shape.batch_size, rng), shape.group_size, shape, "grpo", replays=False)


def pcl_roots(v: FloatArray, shape: BudgetShape, rng: np.random.Generator) -> RootPlan:
    """PCL-style: the ``batch_size`` prompts whose estimate is nearest v = 1/2 (ties at random), n each."""
    probs = _pool(v)
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
    probs = _pool(v)
    p = probs.shape[0]
    chosen = _random_batch(p, shape.batch_size, rng)
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
    p = _pool(v).shape[0]
    chosen = _random_batch(p, shape.tree_batch, rng)
    return _plan(p, chosen, shape.group_size, shape, "uniform_tree", replays=True)


def trace_roots(v: FloatArray, shape: BudgetShape, rng: np.random.Generator) -> RootPlan:
    """TRACE root allocation: `allocate_roots(v, M, max_active=batch_size)`, N * m_i replays per prompt."""
    probs = _pool(v)
    m = allocate_roots(
        probs,
        shape.roots,
        min_rollouts=shape.min_rollouts,
        max_rollouts=shape.max_rollouts,
        max_active=shape.batch_size,
    )
    return _plan(probs.shape[0], np.arange(probs.shape[0], dtype=np.int64), m, shape, "trace", replays=True)


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

    @property
    def has_replays(self) -> bool:
        return self.prefixes is not no_prefixes


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
        Method("dapo", grpo_roots, no_prefixes, uses_predictor=False, dynamic_sampling=True),
    )
}


def get_method(name: str) -> Method:
    """The method registered under ``name``; ValueError listing the known names otherwise."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}") from None
