"""The rollout scheduler: root rollouts with bounded concurrency, then per-prompt prefix expansion.

For each active prompt of a `RootPlan`, its m_i root rollouts run concurrently (at most `max_concurrency`
episodes in flight over all prompts). As soon as that prompt's roots have returned (not the whole batch's),
its anchors (non-root, non-leaf turn prefixes, each with its rollout's reward) go to the prefix strategy
(for TRACE: score anchors with the predictor, q_j = r_j V_j + (1 - r_j)(1 - V_j), then
`allocate_prefixes(q, budget)`), and the k_j replays from each anchor's save point start at once. The result is
one rollout tree per active prompt with budget and token accounting (DESIGN.md sections 1-2).

With ``fresh_anchor=True`` the prompt itself is offered to the strategy as the first anchor (node 0, depth 0,
reward = the majority outcome of its roots, no save point): a "replay" from it is a fresh rollout, added to the
tree as one more root rollout and charged 1 rollout-equivalent. It is offered only while the prompt's roots all
share one reward: once they are mixed the tree already has its contrast, and a fresh rollout adds none.

The scheduler takes the strategy as an argument; it imports no allocation rule of its own.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.rollout.agent import ChatCodec, EnvLike, Episode, SavePoint, run_episode
from trace_rl.rollout.backends import GenerationBackend, SamplingParams
from trace_rl.tree import REWARD_ATOL, RolloutTree
from trace_rl.types import Anchor, RootPlan, Task


def default_tree_factory(prompt_ids: npt.ArrayLike, meta: dict[str, Any]) -> RolloutTree:
    """`RolloutTree.new(prompt_ids=..., meta=...)`."""
    return RolloutTree.new(prompt_ids=prompt_ids, meta=meta)


PrefixStrategy = Callable[
    [Task, RolloutTree, Sequence[Anchor], Sequence[SavePoint | None], int], npt.ArrayLike
]
"""strategy(task, tree, anchors, save_points, budget) -> k (one count per anchor, sum(k) <= budget).

``tree`` holds the prompt's root rollouts (a predictor reads each anchor's history from it); save_points[j] is
the boundary of anchors[j] (token prefix + env snapshot), None for the prompt's depth-0 anchor."""


def uniform_prefixes(
    task: Task, tree: RolloutTree, anchors: Sequence[Anchor], save_points: Sequence[SavePoint], budget: int
) -> npt.NDArray[np.int64]:
    """Spread the budget as evenly as possible over the anchors (earliest anchors get the remainder):
    the uniform-prefix baseline of the paper's ablation."""
    k = np.zeros(len(anchors), np.int64)
    if anchors and budget > 0:
        k[:] = budget // len(anchors)
        k[: budget % len(anchors)] += 1
    return k


def no_replays(
    task: Task, tree: RolloutTree, anchors: Sequence[Anchor], save_points: Sequence[SavePoint], budget: int
) -> npt.NDArray[np.int64]:
    """No prefix expansion (GRPO, PCL, root-only baselines)."""
    return np.zeros(len(anchors), np.int64)


def roots_mixed(roots: Sequence[Episode]) -> bool:
    """True when the rollouts' rewards are not all equal (within ``REWARD_ATOL``, as `RolloutTree.mixed`)."""
    rewards = [float(e.reward) for e in roots]
    return bool(rewards) and max(rewards) - min(rewards) > REWARD_ATOL


@dataclass
class PromptResult:
    """One active prompt's rollouts.

    Attributes:
        task: the prompt.
        tree: its rollout tree (roots under node 0, replays under their anchors).
        roots: root episodes, in order (fresh rollouts bought by the prefix budget last); replays: (anchor node,
            episode) pairs. fresh: how many of ``roots`` the prefix budget bought (``fresh_anchor``).
        k: int64 (A,) replays allocated per anchor (anchor order of `tree.anchors()` at expansion time).
        spent: budget spent in rollout-equivalents: roots + replay_cost * replays (DESIGN.md section 2).
        sampled_tokens: model tokens sampled (roots + replays); context_tokens: tokens of all turns appended.
        roots_done_s, done_s: seconds from the start of the plan until the roots / everything returned.
    """

    task: Task
    tree: RolloutTree
    roots: list[Episode]
    replays: list[tuple[int, Episode]] = field(default_factory=list)
    k: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    spent: float = 0.0
    fresh: int = 0
    sampled_tokens: int = 0
    context_tokens: int = 0
    roots_done_s: float = 0.0
    done_s: float = 0.0


async def run_plan(
    plan: RootPlan,
    pool: Sequence[Task],
    backend: GenerationBackend,
    env_factory: Callable[[], EnvLike],
    codec: ChatCodec,
    sampling: SamplingParams,
    strategy: PrefixStrategy,
    *,
    max_turns: int = 8,
    max_concurrency: int = 64,
    replay_cost: float = 0.5,
    seed: int = 0,
    tree_factory: Callable[[npt.ArrayLike, dict[str, Any]], RolloutTree] = default_tree_factory,
    fresh_anchor: bool = False,
) -> list[PromptResult]:
    """Run a root plan over a candidate pool; returns one `PromptResult` per active prompt (plan order).

    Args:
        plan: rollouts (P,) root counts m_i and replay_budget (P,) continuation budgets (floored to integers).
        pool: the P candidate tasks.
        strategy: prefix allocation callback, called once per prompt as soon as its roots return.
        max_concurrency: episodes in flight at once over all prompts (>= 1).
        replay_cost: rollout-equivalents charged per replay (paper: 0.5).
        fresh_anchor: offer the prompt as a depth-0 anchor whose replays are fresh rollouts, when its roots are
            not mixed (module doc).

    Raises:
        ValueError: plan and pool sizes differ, bad concurrency, or a strategy returning a bad allocation
            (wrong length, negative, or over the prompt's budget).
    """
    if plan.rollouts.shape != (len(pool),) or plan.replay_budget.shape != (len(pool),):
        raise ValueError(f"plan covers {plan.rollouts.shape} prompts but the pool has {len(pool)}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    gate = asyncio.Semaphore(max_concurrency)
    t0 = time.perf_counter()

    async def episode(task: Task, ep_seed: int, start: SavePoint | None = None) -> Episode:
        async with gate:
            return await run_episode(
                backend, env_factory(), codec, task, sampling, max_turns=max_turns, seed=ep_seed, start=start
            )

    async def prompt(i: int) -> PromptResult:
        task = pool[i]
        base = seed * 1_000_003 + i * 10_007
        roots = list(await asyncio.gather(*[episode(task, base + j) for j in range(int(plan.rollouts[i]))]))
        roots_done = time.perf_counter() - t0
        tree = tree_factory(roots[0].prompt_ids, {"task_id": task.id})
        save_of: dict[int, SavePoint] = {}
        for ep in roots:
            if not ep.turns:  # the prompt alone filled the context: nothing to add to the tree
                continue
            nodes = tree.add_rollout(ep.turns, ep.reward)
            for node, sp in zip(nodes[:-1], ep.save_points, strict=False):
                save_of[int(node)] = sp
        anchors = [a for a in tree.anchors() if a.node in save_of]
        points: list[SavePoint | None] = [save_of[a.node] for a in anchors]
        if fresh_anchor and roots and not roots_mixed(roots):
            wins = sum(float(e.reward) >= 0.5 for e in roots)
            anchors.insert(0, Anchor(node=0, depth=0, reward=float(2 * wins >= len(roots))))
            points.insert(0, None)
        budget = math.floor(float(plan.replay_budget[i]) + 1e-9)
        k = (
            np.asarray(strategy(task, tree, anchors, points, budget), dtype=np.int64).reshape(-1)
            if anchors
            else np.zeros(0, np.int64)
        )
        if k.shape != (len(anchors),) or (k < 0).any() or int(k.sum()) > budget:
            raise ValueError(
                f"prefix strategy returned {k.tolist()} for {len(anchors)} anchors and budget {budget}"
            )
        jobs = [
            (a.node, points[j], base + 5_000 + 97 * j + r)
            for j, a in enumerate(anchors)
            for r in range(int(k[j]))
        ]
        replays = list(await asyncio.gather(*[episode(task, s, start=sp) for _, sp, s in jobs]))
        result = PromptResult(task, tree, list(roots), [], k, roots_done_s=roots_done)
        for (node, _, _), ep in zip(jobs, replays, strict=True):
            if node == 0:  # a fresh rollout bought by the prefix budget: one more root rollout
                if ep.turns:
                    tree.add_rollout(ep.turns, ep.reward)
                result.roots.append(ep)
                result.fresh += 1
            else:
                tree.add_replay(node, ep.turns, ep.reward)
                result.replays.append((node, ep))
        every = roots + replays
        result.spent = len(result.roots) + replay_cost * len(result.replays)
        result.sampled_tokens = sum(e.sampled_tokens for e in every)
        result.context_tokens = sum(int(t.token_ids.size) for e in every for t in e.turns)
        result.done_s = time.perf_counter() - t0
        return result

    return list(await asyncio.gather(*[prompt(int(i)) for i in plan.active]))
