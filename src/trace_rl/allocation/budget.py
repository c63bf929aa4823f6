"""Budget accounting that makes every method comparable (DESIGN.md section 2).

Units are rollout-equivalents: a root rollout costs 1, a replay from a turn prefix costs ``replay_cost``
(default 0.5, the paper's accounting: M roots with N continuations per root cost M (1 + N/2), so the shapes
(1024, 2) and (512, 6) both cost 2048). Token-aware accounting (beyond the paper) prices a replay by its
expected remaining tokens relative to a full rollout, quantised to integer units for `allocate_prefixes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.validation import IntArray


@dataclass(frozen=True)
class BudgetShape:
    """The per-step sampling budget of a method, and the equal-cost shape of the flat baselines.

    Attributes:
        roots: M, root rollouts per step of the tree methods (TRACE, TreePO and the ablations).
        continuations: N, replays per root rollout (each active prompt gets a local budget of N * m_i).
        group_size: n, rollouts per prompt of the uniform methods (GRPO, PCL, TreePO roots).
        replay_cost: cost of one replay in rollout-equivalents (paper: 0.5).
        min_rollouts: smallest group of an active prompt for the allocating methods (paper: 2).
        max_rollouts: cap on rollouts per prompt for the allocating methods (None: no cap).

    Raises:
        ValueError: on construction, when a field is out of range.
    """

    roots: int
    continuations: int = 2
    group_size: int = 8
    replay_cost: float = 0.5
    min_rollouts: int = 2
    max_rollouts: int | None = None

    def __post_init__(self) -> None:
        if self.roots < 1:
            raise ValueError(f"roots (M) must be at least 1; got {self.roots}")
        if self.continuations < 0:
            raise ValueError(f"continuations (N) must be >= 0; got {self.continuations}")
        if self.group_size < 2:
            raise ValueError(
                f"group_size (n) must be at least 2 for group-relative methods; got {self.group_size}"
            )
        if self.roots % self.group_size:
            raise ValueError(
                f"roots (M={self.roots}) must be a multiple of group_size (n={self.group_size}) so that the "
                "uniform-root methods give every prompt n rollouts"
            )
        if not (0.0 < self.replay_cost <= 1.0) or not math.isfinite(self.replay_cost):
            raise ValueError(f"replay_cost must lie in (0, 1]; got {self.replay_cost}")
        if self.min_rollouts < 1:
            raise ValueError(f"min_rollouts must be at least 1; got {self.min_rollouts}")
        if self.max_rollouts is not None and self.max_rollouts < self.min_rollouts:
            raise ValueError(
                f"max_rollouts ({self.max_rollouts}) must be >= min_rollouts ({self.min_rollouts})"
            )

    @property
    def total(self) -> float:
        """Cost of one step in rollout-equivalents: M (1 + N * replay_cost)."""
        return self.roots * (1.0 + self.continuations * self.replay_cost)

    @property
    def batch_size(self) -> int:
        """Prompts per step of the flat baselines (GRPO, PCL): floor(total / n); the cap on distinct prompts
        (max_active) for every method."""
        return math.floor(self.total / self.group_size + 1e-9)

    @property
    def flat_rollouts(self) -> int:
        """Root rollouts of the flat baselines at equal cost: batch_size * n (<= total)."""
        return self.batch_size * self.group_size

    @property
    def tree_batch(self) -> int:
        """Prompts per step of the uniform-root tree methods (TreePO): M / n."""
        return self.roots // self.group_size

    def spent(self, root_rollouts: int, replays: float) -> float:
        """Rollout-equivalents of a step: roots + replay_cost * replays (replays may be fractional units)."""
        return float(root_rollouts) + self.replay_cost * float(replays)


UNITS_PER_ROLLOUT = (
    8  # token-aware accounting: integer cost units per full rollout (the default quantisation)
)


def units_per_rollout(replay_cost: float, *, base: int = UNITS_PER_ROLLOUT) -> int:
    """Integer cost units per rollout-equivalent in which ``replay_cost`` is exact: the least common multiple of
    ``base`` and the denominator of replay_cost as a fraction (0.5 -> 8, 0.25 -> 8, 0.3 -> 40, 1/3 -> 24).

    A replay from a turn prefix then costs ``replay_cost * units`` units exactly and a fresh rollout ``units``,
    so a prefix budget priced in units and the rollout-equivalents charged for it always agree.

    Raises:
        ValueError: replay_cost outside (0, 1], or not a fraction with denominator <= 1000 (within 1e-9).
    """
    if not (0.0 < replay_cost <= 1.0) or not math.isfinite(replay_cost):
        raise ValueError(f"replay_cost must lie in (0, 1]; got {replay_cost}")
    frac = Fraction(replay_cost).limit_denominator(1000)
    if abs(float(frac) - replay_cost) > 1e-9:
        raise ValueError(
            f"replay_cost {replay_cost} is not a fraction with denominator <= 1000, so no integer cost unit "
            "prices it exactly; use e.g. 0.5, 0.25 or 0.3"
        )
    return math.lcm(base, frac.denominator)


def token_aware_costs(
    remaining_tokens: npt.ArrayLike, mean_rollout_tokens: float, *, units_per_rollout: int = 8
) -> IntArray:
    """Integer replay costs from the expected tokens a replay still has to generate.

    cost_j = max(1, ceil(units_per_rollout * remaining_tokens_j / mean_rollout_tokens)); a full rollout costs
    ``units_per_rollout`` units. Pair with `token_aware_budget` for the matching budget.

    Args:
        remaining_tokens: expected tokens generated by a replay from each anchor, shape (J,), >= 0.
        mean_rollout_tokens: mean generated tokens of a full rollout, > 0.
        units_per_rollout: quantisation, integer units per rollout-equivalent, >= 1.

    Returns:
        int64 array of shape (J,), each >= 1.

    Raises:
        ValueError: negative or non-finite tokens, non-positive mean, units_per_rollout < 1.
    """
    tokens = np.asarray(remaining_tokens, dtype=np.float64)
    if tokens.ndim != 1 or not np.all(np.isfinite(tokens)) or (tokens < 0).any():
        raise ValueError("remaining_tokens must be a 1-D array of finite, non-negative token counts")
    if not (mean_rollout_tokens > 0 and math.isfinite(mean_rollout_tokens)):
        raise ValueError(f"mean_rollout_tokens must be positive; got {mean_rollout_tokens}")
    if units_per_rollout < 1:
        raise ValueError(f"units_per_rollout must be at least 1; got {units_per_rollout}")
    units = np.ceil(units_per_rollout * tokens / mean_rollout_tokens - 1e-9)
    return np.maximum(units, 1).astype(np.int64)


def token_aware_budget(replays: float, replay_cost: float = 0.5, *, units_per_rollout: int = 8) -> int:
    """Integer budget, in the units of `token_aware_costs`, worth ``replays`` replays at ``replay_cost``.

    budget = round(units_per_rollout * replays * replay_cost), e.g. N * m_i = 16 replays at 0.5 -> 64 units.
    """
    if replays < 0 or replay_cost <= 0:
        raise ValueError("replays must be >= 0 and replay_cost > 0")
    return round(units_per_rollout * replays * replay_cost)


def uniform_batch(p: int, size: int, rng: np.random.Generator) -> IntArray:
    """The flat baselines' prompt draw: ``size`` distinct prompts of a pool of ``p``, uniformly, sorted; int64 (size,).

    Raises:
        ValueError: size > p.
    """
    if size > p:
        raise ValueError(f"the candidate pool has {p} prompts, fewer than the batch size {size}")
    return np.sort(rng.choice(p, size=size, replace=False)).astype(np.int64)
