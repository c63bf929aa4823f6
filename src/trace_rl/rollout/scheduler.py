"""The rollout scheduler: root rollouts with bounded concurrency, then per-prompt prefix expansion.

For each active prompt of a `RootPlan`, `run_plan` runs TRACE's per-prompt stage,
`trace_rl.rollout.expansion.expand_prompt` (the same function the verl worker calls): the prompt's m_i root
rollouts run concurrently (at most `max_concurrency` episodes in flight over all prompts), and as soon as that
prompt's roots have returned (not the whole batch's) its anchors go to the replay allocator (for TRACE: score
anchors with the predictor, q_j = r_j V_j + (1 - r_j)(1 - V_j), then `allocate_prefixes(q, budget)`), and the
k_j replays from each anchor's save point start at once. The result is one rollout tree per active prompt with
budget and token accounting (DESIGN.md sections 1-2).

With ``fresh_anchor=True`` the prompt itself is offered to the allocator as the first anchor (node 0, depth 0,
reward = the majority outcome of its roots, no save point): a "replay" from it is a fresh rollout, added to the
tree as one more root rollout and charged 1 rollout-equivalent. It is offered only while the prompt's roots all
share one reward: once they are mixed the tree already has its contrast, and a fresh rollout adds none.

The scheduler takes the allocator as an argument; it imports no allocation rule of its own.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.rollout.agent import ChatCodec, EnvLike, Episode, SavePoint, run_episode
from trace_rl.rollout.backends import GenerationBackend, SamplingParams
from trace_rl.rollout.expansion import (
    PromptResult,
    ReplayAllocator,
    Session,
    default_tree_factory,
    expand_prompt,
    gather_sessions,
    prompt_seed,
    roots_mixed,
)
from trace_rl.tree import RolloutTree
from trace_rl.types import Anchor, RootPlan, Task

__all__ = [
    "PromptResult",
    "default_tree_factory",
    "no_replays",
    "roots_mixed",
    "run_plan",
    "uniform_prefixes",
]


def uniform_prefixes(
    task: Task,
    tree: RolloutTree,
    anchors: Sequence[Anchor],
    save_points: Sequence[SavePoint | None],
    budget: int,
) -> npt.NDArray[np.int64]:
    """Spread the budget as evenly as possible over the anchors (earliest anchors get the remainder):
    the uniform-prefix baseline of the paper's ablation."""
    k = np.zeros(len(anchors), np.int64)
    if anchors and budget > 0:
        k[:] = budget // len(anchors)
        k[: budget % len(anchors)] += 1
    return k


def no_replays(
    task: Task,
    tree: RolloutTree,
    anchors: Sequence[Anchor],
    save_points: Sequence[SavePoint | None],
    budget: int,
) -> npt.NDArray[np.int64]:
    """No prefix expansion (GRPO, PCL, root-only baselines)."""
    return np.zeros(len(anchors), np.int64)


async def run_plan(
    plan: RootPlan,
    pool: Sequence[Task],
    backend: GenerationBackend,
    env_factory: Callable[[], EnvLike],
    codec: ChatCodec,
    sampling: SamplingParams,
    strategy: ReplayAllocator,
    *,
    max_turns: int = 8,
    max_concurrency: int = 64,
    replay_cost: float = 0.5,
    unit: float | None = None,
    seed: int = 0,
    tree_factory: Callable[[npt.ArrayLike, dict[str, Any]], RolloutTree] = default_tree_factory,
    fresh_anchor: bool = False,
    anchorless_fresh: bool = True,
) -> list[PromptResult]:
    """Run a root plan over a candidate pool; returns one `PromptResult` per active prompt (plan order).

    Args:
        plan: rollouts (P,) root counts m_i and replay_budget (P,) prefix budgets (floored to integer units).
        pool: the P candidate tasks.
        strategy: the replay allocator (`trace_rl.rollout.expansion.ReplayAllocator`), called once per prompt as
            soon as its roots return.
        max_concurrency: episodes in flight at once over all prompts (>= 1).
        replay_cost: rollout-equivalents charged per replay when the budget counts replays (paper: 0.5).
        unit: rollout-equivalents per budget unit (default ``replay_cost``: the budget counts replays); pass
            1 / units_per_rollout when ``plan.replay_budget`` is in cost units (token accounting, fresh anchor).
        seed: plan seed (>= 0); prompt i's session s runs with episode seed ``session_seed(prompt_seed(seed, i), s)``.
        fresh_anchor: offer the prompt as a depth-0 anchor whose replays are fresh rollouts, when its roots are
            not mixed (module doc, `expand_prompt`).
        anchorless_fresh: a prompt whose roots give no turn prefix spends its budget on fresh rollouts
            (`expand_prompt`; False: left unspent).

    Raises:
        ValueError: plan and pool sizes differ, bad concurrency, or a strategy returning a bad allocation
            (wrong length, negative, or costing more than the prompt's budget).
    """
    if plan.rollouts.shape != (len(pool),) or plan.replay_budget.shape != (len(pool),):
        raise ValueError(f"plan covers {plan.rollouts.shape} prompts but the pool has {len(pool)}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    gate = asyncio.Semaphore(max_concurrency)
    t0 = time.perf_counter()

    async def prompt(i: int) -> PromptResult:
        task = pool[i]

        async def episode(s: Session) -> Episode:
            async with gate:
                return await run_episode(
                    backend,
                    env_factory(),
                    codec,
                    task,
                    sampling,
                    max_turns=max_turns,
                    seed=s.seed,
                    start=s.start,
                )

        return await expand_prompt(
            task,
            int(plan.rollouts[i]),
            gather_sessions(episode),
            strategy,
            math.floor(float(plan.replay_budget[i]) + 1e-9),
            unit=replay_cost if unit is None else unit,
            fresh_anchor=fresh_anchor,
            anchorless_fresh=anchorless_fresh,
            seed=prompt_seed(seed, i),
            tree_factory=tree_factory,
            t0=t0,
        )

    return list(await asyncio.gather(*[prompt(int(i)) for i in plan.active]))
