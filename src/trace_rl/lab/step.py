"""One sampling step of an allocation method on the lab, shaped exactly like the trainer's step (DESIGN.md 1).

candidate pool -> predictor v -> method.roots(v, shape, rng) -> root rollouts of the active prompts
-> per prompt: anchors, V_j = predictor(anchor_j), q_j = repeat_probability(r_j, V_j),
   k = method.prefixes(q, N * m_i, rng, None) -> k_j replays from anchor j -> one tree per active prompt
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trace_rl.allocation import BudgetShape, Method, repeat_probability, tail_anchors
from trace_rl.lab.predictors import Predictor, prefix_query, prompt_queries
from trace_rl.lab.simulator import Pool, add_replays, rollout_trees
from trace_rl.metrics import effective_ratio
from trace_rl.tree import RolloutTree
from trace_rl.types import RootPlan

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class StepResult:
    """What one step produced.

    Attributes:
        plan: the root plan over the pool (rollouts m_i, replay budgets).
        v: float64 (P,), the predictor's prompt estimates (0.5 everywhere for methods without a predictor).
        prompts: int64 (A,), the active prompts, in the order of `trees`.
        trees: one `RolloutTree` per active prompt.
        replays: int64 (A,), replays spent per active prompt.
    """

    plan: RootPlan
    v: FloatArray
    prompts: IntArray
    trees: list[RolloutTree]
    replays: IntArray

    @property
    def effective_ratio(self) -> float:
        """Share of active prompts whose tree holds both a success and a failure (NaN if none is active)."""
        return effective_ratio(self.trees)

    def spent(self, shape: BudgetShape) -> float:
        """Rollout-equivalents spent: root rollouts + replay_cost * replays."""
        return shape.spent(self.plan.root_rollouts, float(self.replays.sum()))


def method_step(
    method: Method, predictor: Predictor, pool: Pool, shape: BudgetShape, rng: np.random.Generator
) -> StepResult:
    """Run one step of `method` on the candidate `pool` with success estimates from `predictor`.

    Methods that do not use a predictor (`method.uses_predictor` False) never call it; their strategies ignore
    v and q, which are then 1/2.

    Args:
        method: a `trace_rl.allocation.Method` (root and prefix strategies).
        predictor: answers prompt and prefix queries (`trace_rl.lab.predictors`).
        pool: the candidate prompts (at least `shape.batch_size` of them).
        shape: the budget shape (M, N, n, replay cost).
        rng: the step's generator (allocation tie-breaks and the simulator's randomness).

    Raises:
        ValueError: from the strategies (e.g. a pool smaller than the batch) or the predictor.
    """
    p = len(pool)
    if method.uses_predictor:
        v = np.asarray(predictor.predict(prompt_queries(pool.tasks)), dtype=np.float64)
    else:
        v = np.full(p, 0.5)
    plan = method.roots(v, shape, rng)
    active = plan.active
    trees = rollout_trees(pool, active, plan.rollouts[active], rng)
    replays = np.zeros(active.shape[0], dtype=np.int64)
    for a, (i, tree) in enumerate(zip(active.tolist(), trees, strict=True)):
        budget = int(plan.replay_budget[i])
        anchors = tree.anchors()
        if budget <= 0 or not anchors:
            continue
        nodes = np.asarray([x.node for x in anchors], dtype=np.int64)
        r = np.asarray([x.reward for x in anchors], dtype=np.float64)
        if method.uses_predictor:
            queries = [prefix_query(pool.tasks[i], tree, int(n)) for n in nodes]
            big_v = np.asarray(predictor.predict(queries), dtype=np.float64)
        else:
            big_v = np.full(nodes.shape[0], 0.5)
        q = repeat_probability(r, big_v)
        if method.tail_prefixes is not None:  # tail branching (branpo): where the anchors lie, not q
            k = method.tail_prefixes(tail_anchors(tree, nodes.tolist()), budget, rng, None)
        else:
            k = method.prefixes(q, budget, rng, None)
        add_replays(tree, pool, nodes, k, rng)
        replays[a] = int(k.sum())
    return StepResult(plan=plan, v=v, prompts=active, trees=trees, replays=replays)
