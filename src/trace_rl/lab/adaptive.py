"""`trace_adaptive` on the lab: runs of several steps in which its `AdaptiveState` carries what earlier steps
measured, next to uniform allocation (GRPO) and TRACE, on the same pools (issue 58).

The claims of `trace_rl.lab.claims` run one step at a time, which suits stateless methods; `trace_adaptive` fits
its predictor's concentration on the outcomes of earlier steps and measures its replays' flips, so it needs runs.
Per step and arm it records, over the trees it generated at equal budget:

- ``effective_ratio``: share of mixed trees (TRACE's own currency);
- ``mixed_groups``: the number of mixed trees;
- ``contrastive_dof``: the squared-advantage mass a GRPO update over the tree's leaves receives,
  ``sum_trees (leaves - 1) [tree mixed]`` (a mixed group of g leaves has sum A^2 = g - 1 with the unbiased std),
  the quantity `trace_rl.allocation.adaptive.contrastive_value` maximises in expectation.

Predictors are the lab's known-truth ones (`trace_rl.lab.predictors`): the oracle, noisy oracles of n
pseudo-rollouts, and n = 0 (a constant 1/2: a predictor that ranks nothing).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trace_rl.allocation import METHODS, AdaptiveState, BudgetShape, RootStrategy, adaptive_roots
from trace_rl.allocation.adaptive import COVERAGE
from trace_rl.lab.claims import POOL_FACTOR, SHAPES, _make_predictor
from trace_rl.lab.simulator import TaskFamily, sample_pool
from trace_rl.lab.step import StepResult, method_step
from trace_rl.metrics import is_effective
from trace_rl.metrics.intervals import Interval, mean_ci
from trace_rl.tree import RolloutTree
from trace_rl.types import RootPlan

FloatArray = npt.NDArray[np.float64]

__all__ = ["ADAPTIVE_ARMS", "AdaptiveLabResult", "contrastive_dof", "run_adaptive_lab", "tree_flips"]

ADAPTIVE_ARMS = ("grpo", "trace", "trace_adaptive", "trace_adaptive_dof")
"""Arms of `run_adaptive_lab`: ``trace_adaptive_dof`` is `trace_adaptive` with the ``"dof"`` root objective."""
STATEFUL = {"trace_adaptive": "mixed", "trace_adaptive_dof": "dof"}
METRICS = ("effective_ratio", "mixed_groups", "contrastive_dof")


def contrastive_dof(trees: list[RolloutTree]) -> float:
    """sum over trees of (number of leaves - 1) where the tree is mixed (module docstring)."""
    return float(sum(len(t.leaves()) - 1 for t in trees if is_effective(t)))


def tree_flips(tree: RolloutTree) -> tuple[int, int]:
    """(replays, flips) of one tree: replay chains, and those whose leaf reward differs from the leaf of the chain
    they branched from."""
    replay = np.asarray(tree.is_replay, dtype=bool)
    parent = np.asarray(tree.parent, dtype=np.int64)
    leaf = tree.chain_leaf()
    starts = [i for i in range(1, tree.num_nodes) if replay[i] and not replay[parent[i]]]
    flips = sum(abs(float(tree.reward[leaf[i]]) - float(tree.reward[leaf[parent[i]]])) > 1e-6 for i in starts)
    return len(starts), int(flips)


def _observe(state: AdaptiveState, res: StepResult) -> None:
    """Feed one lab step's outcomes to ``state`` as `trace_rl.train.selection.observe_adaptive` does in training."""
    v, rewards = [], []
    replays = flips = 0
    for i, tree in zip(res.prompts.tolist(), res.trees, strict=True):
        v.append(float(res.v[i]))
        rewards.append(
            [float(tree.reward[int(p[-1])]) for p in tree.paths() if not tree.is_replay[int(p[-1])]]
        )
        r, f = tree_flips(tree)
        replays, flips = replays + r, flips + f
    state.observe_rewards(v, rewards, replays=replays, flips=flips, estimates_used=True)


def _with_state(state: AdaptiveState, objective: str, coverage: float) -> RootStrategy:
    """`adaptive_roots` bound to one run's state, objective and coverage, as a `RootStrategy`."""

    def roots(v: FloatArray, shape: BudgetShape, rng: np.random.Generator) -> RootPlan:
        return adaptive_roots(v, shape, rng, state, coverage=coverage, objective=objective)

    return roots


@dataclass(frozen=True)
class AdaptiveLabResult:
    """Per (predictor, arm, metric): the per-seed means over steps, float64 (seeds,)."""

    shape: str
    steps: int
    values: dict[tuple[str, str, str], npt.NDArray[np.float64]]

    def interval(self, predictor: str, arm: str, metric: str) -> Interval:
        return mean_ci(self.values[predictor, arm, metric].tolist())

    def difference(self, predictor: str, arm: str, other: str, metric: str) -> Interval:
        """Paired over seeds: ``arm`` - ``other``."""
        diff = self.values[predictor, arm, metric] - self.values[predictor, other, metric]
        return mean_ci(diff.tolist())


def run_adaptive_lab(
    *,
    predictors: tuple[str, ...] = ("oracle", "noisy:8", "noisy:2", "noisy:0"),
    shape: str = "64x2",
    seeds: int = 5,
    steps: int = 20,
    family: TaskFamily | None = None,
    coverage: float = COVERAGE,
) -> AdaptiveLabResult:
    """Run `ADAPTIVE_ARMS` for ``steps`` steps on common pools per seed (pool j of seed s drawn from
    (s, j)), one `AdaptiveState` per (seed, predictor, stateful arm), the stateful arms at ``coverage``.

    Raises:
        ValueError: seeds or steps < 1, an unknown shape or predictor.
    """
    if seeds < 1 or steps < 1:
        raise ValueError("seeds and steps must be at least 1")
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose one of {', '.join(SHAPES)}")
    fam = family or TaskFamily()
    budget: BudgetShape = SHAPES[shape]
    size = POOL_FACTOR * budget.batch_size
    values = {
        (p, a, m): np.zeros(seeds, dtype=np.float64)
        for p in predictors
        for a in ADAPTIVE_ARMS
        for m in METRICS
    }
    for pi, spec in enumerate(predictors):
        for s in range(seeds):
            states = {arm: AdaptiveState() for arm in STATEFUL}
            stateful = {
                arm: dataclasses.replace(
                    METHODS["trace_adaptive"], roots=_with_state(states[arm], objective, coverage)
                )
                for arm, objective in STATEFUL.items()
            }
            for j in range(steps):
                pool = sample_pool(fam, size, np.random.default_rng((s, j, size)))
                for arm in ADAPTIVE_ARMS:
                    method = stateful.get(arm) or METHODS[arm]
                    predictor = _make_predictor(spec, seed=(s * 7919 + j) * 104729 + pi)
                    res = method_step(method, predictor, pool, budget, np.random.default_rng((s, j, size, 1)))
                    if arm in states:
                        _observe(states[arm], res)
                    values[spec, arm, "effective_ratio"][s] += res.effective_ratio / steps
                    values[spec, arm, "mixed_groups"][s] += sum(is_effective(t) for t in res.trees) / steps
                    values[spec, arm, "contrastive_dof"][s] += contrastive_dof(res.trees) / steps
    return AdaptiveLabResult(shape=shape, steps=steps, values=values)
