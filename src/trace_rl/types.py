"""Frozen records shared across the parts of trace-rl (shapes in field comments).

Records here are plain dataclasses over numpy arrays so that every part (allocation, trees, rollout, training)
can exchange them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class RootPlan:
    """Root allocation for one step over a candidate pool of P prompts.

    Attributes:
        rollouts: int64 (P,): root rollouts m_i per candidate; 0 = the prompt is skipped this step.
        replay_budget: float64 (P,): continuation budget of each prompt for prefix expansion, in replays
            (the paper's N * m_i; 0 for methods without replays).
        method: name of the strategy that produced the plan.
    """

    rollouts: npt.NDArray[np.int64]  # (P,)
    replay_budget: npt.NDArray[np.float64]  # (P,)
    method: str
    info: dict[str, float] = field(default_factory=dict)

    @property
    def active(self) -> npt.NDArray[np.int64]:
        """Indices of the prompts that get at least one rollout, shape (A,)."""
        return np.flatnonzero(self.rollouts > 0).astype(np.int64)

    @property
    def num_active(self) -> int:
        return int(np.count_nonzero(self.rollouts))

    @property
    def root_rollouts(self) -> int:
        return int(self.rollouts.sum())
