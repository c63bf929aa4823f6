"""TRACE's per-prompt stage, the one copy every rollout driver calls: roots in, anchors scored, replays out, the tree.

`expand_prompt` runs one prompt from its root plan to its finished `RolloutTree` (DESIGN.md section 1, step 3):

1. run the prompt's m root rollouts (sessions 0..m-1);
2. build its tree (node 0 the prompt, one chain per root) and take its anchors: the non-root, non-leaf turn
   prefixes of the roots, each with its rollout's reward and save point (token prefix + environment snapshot);
   with ``fresh_anchor`` the prompt itself is offered first as the depth-0 anchor (no save point: a "replay"
   from it is a fresh rollout, charged one rollout-equivalent), but only while its roots all share one reward
   (`roots_mixed`): once they are mixed the tree already has its contrast, and a fresh rollout adds none;
3. hand the anchors and the prompt's integer budget to a `ReplayAllocator` (for TRACE: predictor scores V_j,
   q_j = r_j V_j + (1 - r_j)(1 - V_j), then the method's `PrefixStrategy`, e.g. `allocate_prefixes`;
   `trace_rl.train.prefixes.replay_allocator` builds it), which returns k_j replays per anchor and their costs;
4. run the k_j replays of each anchor from its save point (sessions m, m+1, ...), append them under their
   anchors, and account the spend exactly.

A prompt whose roots yield no turn prefix (every episode ended after one turn) has nothing to replay: its whole
budget buys fresh rollouts of the prompt instead, floor(budget in rollout-equivalents) of them, each one more
root rollout charged 1 (docs/rollout.md, "Prompts without anchors"); what is left (< 1 rollout-equivalent) is
reported as ``unspent``. Not when its roots sampled no token at all (the prompt alone fills the context): fresh
rollouts of it would fail the same way, so its budget stays unspent.

What it takes: the `Task`; m; ``run_sessions``, an async callable that runs a batch of `Session` objects
concurrently and returns one trace-rl `Episode` per session in order (the native scheduler wraps
`run_episode` on a generation backend, the verl worker wraps verl's ``_run_agent_loop``, a TRL worker wraps
its own generation); the `ReplayAllocator`; the budget in integer units and what one unit is worth in
rollout-equivalents. What it returns: a `PromptResult` (tree, episodes, k, costs, spend, tokens, timings, and
for every node the session that sampled it).

Budget units: with ``unit = replay_cost`` the budget counts replays (the paper's N m_i, each replay one unit);
with ``unit = 1 / units_per_rollout(replay_cost)`` it is in integer cost units (token-aware accounting and the
fresh anchor, `trace_rl.allocation.units_per_rollout`). The spend is roots + unit * sum_j cost_j k_j over the
turn-prefix anchors, exactly what the allocator was told the replays cost.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.allocation import PrefixStrategy
from trace_rl.rollout.agent import Episode, SavePoint
from trace_rl.tree import REWARD_ATOL, RolloutTree
from trace_rl.types import Anchor, Task, Turn

__all__ = [
    "PrefixChoice",
    "PrefixStrategy",
    "PromptResult",
    "ReplayAllocator",
    "RunSessions",
    "Session",
    "default_tree_factory",
    "expand_prompt",
    "fresh_anchor_reward",
    "prompt_seed",
    "roots_mixed",
    "session_seed",
]

SESSION_BITS = 20  # sessions per prompt and prompts per plan: < 2**20 each (collision-free seeds)


def prompt_seed(plan_seed: int, prompt: int) -> int:
    """The seed of candidate ``prompt`` (its index in the pool) in a plan seeded with ``plan_seed`` >= 0:
    plan_seed * 2**20 + prompt. Distinct prompts of one plan never share a seed.

    Raises:
        ValueError: a negative seed or a prompt index outside [0, 2**20).
    """
    if plan_seed < 0 or not 0 <= prompt < 2**SESSION_BITS:
        raise ValueError(f"need plan_seed >= 0 and 0 <= prompt < 2**20; got {plan_seed}, {prompt}")
    return (plan_seed << SESSION_BITS) + prompt


def session_seed(seed: int, session: int) -> int:
    """The episode seed of session ``session`` (0-based; roots first, then replays) of a prompt seeded with
    ``seed``: seed * 2**20 + session. Distinct sessions of distinct prompts of one plan never share a seed, and
    neither do their turns (`trace_rl.rollout.agent.turn_seed` is injective in the episode seed mod 2**63).

    Raises:
        ValueError: a negative seed or a session outside [0, 2**20).
    """
    if seed < 0 or not 0 <= session < 2**SESSION_BITS:
        raise ValueError(f"need seed >= 0 and 0 <= session < 2**20; got {seed}, {session}")
    return (seed << SESSION_BITS) + session


@dataclass(frozen=True)
class Session:
    """One episode of a prompt for ``run_sessions`` to run.

    Attributes:
        index: session number within the prompt: roots 0..m-1, then replays and fresh rollouts in launch order.
        anchor: -1 for a root rollout, 0 for a fresh rollout bought by the prefix budget, else the anchor node
            a replay continues.
        start: the anchor's save point (token context + env snapshot); None for roots and fresh rollouts.
        seed: the episode seed (`session_seed`).
        prefix_turns: the turns from the prompt down to the anchor (empty unless a replay), oldest first.
        prefix_sessions: the session that sampled each of ``prefix_turns``.
    """

    index: int
    anchor: int
    start: SavePoint | None
    seed: int
    prefix_turns: tuple[Turn, ...] = ()
    prefix_sessions: tuple[int, ...] = ()


RunSessions = Callable[[Sequence[Session]], Awaitable[Sequence[Episode]]]
"""run_sessions(sessions) -> one Episode per session, same order; runs them concurrently. An exception fails the
whole prompt (the driver decides what that means: the native trainer stops, the verl worker tags the uid
``failure``)."""


@dataclass(frozen=True)
class PrefixChoice:
    """A `ReplayAllocator`'s answer for one prompt's anchors.

    Attributes:
        k: int64 (J,) replays per anchor, >= 0.
        cost: int64 (J,) budget units one replay from each anchor costs (>= 1); None = 1 each. A depth-0 anchor
            (a fresh rollout) must cost one rollout-equivalent: cost * unit == 1.
        values: float64 (J,) the predictor's success estimate V_j used for each anchor (NaN where none).
    """

    k: npt.NDArray[np.int64]
    cost: npt.NDArray[np.int64] | None = None
    values: npt.NDArray[np.float64] | None = None


ReplayAllocator = Callable[
    [Task, RolloutTree, Sequence[Anchor], Sequence[SavePoint | None], int],
    "PrefixChoice | npt.ArrayLike | Awaitable[PrefixChoice | npt.ArrayLike]",
]
"""allocator(task, tree, anchors, save_points, budget) -> `PrefixChoice` (or just k, unit costs), or an awaitable
of one. ``tree`` holds the prompt's root rollouts (a predictor reads each anchor's history from it);
save_points[j] is the boundary of anchors[j] (None for the depth-0 anchor); ``budget`` is in integer units
(module doc). It must keep sum_j cost_j k_j <= budget."""


def default_tree_factory(prompt_ids: npt.ArrayLike, meta: dict[str, Any]) -> RolloutTree:
    """`RolloutTree.new(prompt_ids=..., meta=...)`."""
    return RolloutTree.new(prompt_ids=prompt_ids, meta=meta)


def roots_mixed(roots: Sequence[Episode]) -> bool:
    """True when the rollouts' rewards are not all equal (within ``REWARD_ATOL``, as `RolloutTree.mixed`)."""
    rewards = [float(e.reward) for e in roots]
    return bool(rewards) and max(rewards) - min(rewards) > REWARD_ATOL


def fresh_anchor_reward(roots: Sequence[Episode]) -> float:
    """Reward the depth-0 anchor carries: the majority outcome of the prompt's roots (1.0 on a tie)."""
    wins = sum(float(e.reward) >= 0.5 for e in roots)
    return float(2 * wins >= len(roots))


@dataclass
class PromptResult:
    """One active prompt's rollouts.

    Attributes:
        task: the prompt.
        tree: its rollout tree (roots under node 0, replays under their anchors).
        roots: root episodes, in order (fresh rollouts bought by the prefix budget last); replays: (anchor node,
            episode) pairs. fresh: how many of ``roots`` the prefix budget bought.
        k: int64 (A,) replays allocated per anchor (``anchors`` order); cost: int64 (A,) units per replay;
            values: float64 (A,) the allocator's V_j (NaN where it gave none).
        anchors: the anchors offered to the allocator (the depth-0 anchor first when offered).
        budget: the prompt's prefix budget in integer units; unit: rollout-equivalents per unit.
        spent: budget spent in rollout-equivalents: roots + unit * sum of replay costs (DESIGN.md section 2).
        unspent: prefix budget left unspent, in rollout-equivalents (>= 0).
        anchorless: the roots gave no turn prefix and the budget was positive, so it bought fresh rollouts.
        node_session: int64 (n,) the session that sampled each tree node (-1 at node 0).
        sampled_tokens: model tokens sampled (roots + replays); context_tokens: tokens of all turns appended.
        roots_done_s, done_s: seconds from ``t0`` until the roots / everything returned.
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
    cost: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    values: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, np.float64))
    anchors: list[Anchor] = field(default_factory=list)
    budget: int = 0
    unit: float = 1.0
    unspent: float = 0.0
    anchorless: bool = False
    node_session: npt.NDArray[np.int64] = field(default_factory=lambda: np.full(1, -1, np.int64))


def _choice(raw: Any, n: int, budget: int) -> PrefixChoice:
    """Normalise and check an allocator's answer (PrefixChoice or bare k) for n anchors."""
    choice = raw if isinstance(raw, PrefixChoice) else PrefixChoice(np.asarray(raw, dtype=np.int64))
    k = np.asarray(choice.k, dtype=np.int64).reshape(-1)
    cost = (
        np.ones(n, np.int64) if choice.cost is None else np.asarray(choice.cost, dtype=np.int64).reshape(-1)
    )
    values = (
        np.full(n, np.nan) if choice.values is None else np.asarray(choice.values, np.float64).reshape(-1)
    )
    if k.shape != (n,) or cost.shape != (n,) or values.shape != (n,):
        raise ValueError(f"prefix strategy returned k {k.tolist()}, cost {cost.tolist()} for {n} anchors")
    if (k < 0).any() or (cost < 1).any() or int((cost * k).sum()) > budget:
        raise ValueError(
            f"prefix strategy returned k {k.tolist()} at costs {cost.tolist()} (total "
            f"{int((cost * k).sum())}) for a budget of {budget} units"
        )
    return PrefixChoice(k, cost, values)


async def expand_prompt(
    task: Task,
    roots: int,
    run_sessions: RunSessions,
    allocator: ReplayAllocator,
    budget: int,
    *,
    unit: float,
    fresh_anchor: bool = False,
    anchorless_fresh: bool = True,
    seed: int = 0,
    tree_factory: Callable[[npt.ArrayLike, dict[str, Any]], RolloutTree] = default_tree_factory,
    meta: dict[str, Any] | None = None,
    t0: float | None = None,
) -> PromptResult:
    """Run one prompt's TRACE stage: m roots, anchors, replay allocation, replays (module doc).

    Args:
        task: the prompt.
        roots: m >= 1 root rollouts.
        run_sessions: runs a batch of `Session` objects concurrently, one `Episode` each, in order.
        allocator: the `ReplayAllocator` (called once, after the roots, only when the prompt has anchors and a
            positive budget).
        budget: the prompt's prefix budget in integer units (>= 0).
        unit: rollout-equivalents per budget unit (> 0): ``replay_cost`` when the budget counts replays,
            1 / units_per_rollout when it is in cost units.
        fresh_anchor: offer the prompt as a depth-0 anchor whose replays are fresh rollouts, while its roots are
            not mixed.
        anchorless_fresh: a prompt without turn prefixes spends its budget on fresh rollouts (module doc);
            False leaves it unspent (measurement scripts that give a huge budget and want replays only).
        seed: the prompt's seed (`prompt_seed`); session i runs with `session_seed(seed, i)`.
        meta: the tree's meta (default ``{"task_id": task.id}``).
        t0: `time.perf_counter()` origin of the timings (default: the call).

    Returns:
        The prompt's `PromptResult`.

    Raises:
        ValueError: roots < 1, budget < 0, unit <= 0, a bad allocation (wrong length, negative, over budget, a
            depth-0 anchor not priced at one rollout-equivalent), or ``run_sessions`` returning the wrong count.
    """
    if roots < 1 or budget < 0 or not unit > 0:
        raise ValueError(f"need roots >= 1, budget >= 0 and unit > 0; got {roots}, {budget}, {unit}")
    start = time.perf_counter() if t0 is None else t0

    async def run(sessions: list[Session]) -> list[Episode]:
        episodes = list(await run_sessions(sessions)) if sessions else []
        if len(episodes) != len(sessions):
            raise ValueError(f"run_sessions returned {len(episodes)} episodes for {len(sessions)} sessions")
        return episodes

    root_eps = await run([Session(i, -1, None, session_seed(seed, i)) for i in range(roots)])
    roots_done = time.perf_counter() - start
    tree = tree_factory(root_eps[0].prompt_ids, dict(meta) if meta is not None else {"task_id": task.id})
    origin = [-1]  # node -> session that sampled it
    save_of: dict[int, SavePoint] = {}
    for s, ep in enumerate(root_eps):
        if not ep.turns:  # a driver whose episodes can be empty: nothing to add to the tree
            continue
        nodes = tree.add_rollout(ep.turns, ep.reward)
        origin += [s] * len(nodes)
        save_of.update({int(n): sp for n, sp in zip(nodes[:-1], ep.save_points, strict=False)})
    anchors = [a for a in tree.anchors() if a.node in save_of]
    points: list[SavePoint | None] = [save_of[a.node] for a in anchors]
    fresh_cost = 1.0 / unit  # budget units of one fresh rollout
    # a prompt whose roots sampled no token at all (its prompt alone fills the context) cannot produce anything
    # on a fresh rollout either: its budget stays unspent (and reported) rather than buying doomed rollouts
    sampled = any(ep.sampled_tokens > 0 for ep in root_eps)
    anchorless = not anchors and budget > 0 and anchorless_fresh and sampled
    if (fresh_anchor and not roots_mixed(root_eps)) or anchorless:
        anchors.insert(0, Anchor(node=0, depth=0, reward=fresh_anchor_reward(root_eps)))
        points.insert(0, None)
    n = len(anchors)
    if budget <= 0 or n == 0:
        choice = PrefixChoice(np.zeros(n, np.int64), np.ones(n, np.int64), np.full(n, np.nan))
    elif n == 1 and anchors[0].node == 0:  # no turn prefix: the budget buys fresh rollouts (module doc)
        count = math.floor(budget * unit + 1e-9)
        choice = PrefixChoice(
            np.array([count], np.int64), np.array([max(round(fresh_cost), 1)], np.int64), np.full(1, np.nan)
        )
    else:
        raw = allocator(task, tree, anchors, points, budget)
        if inspect.isawaitable(raw):
            raw = await raw
        choice = _choice(raw, n, budget)
        if anchors[0].node == 0 and choice.cost is not None and abs(choice.cost[0] * unit - 1.0) > 1e-9:
            raise ValueError(
                f"a fresh rollout costs one rollout-equivalent ({fresh_cost:g} units), not {choice.cost[0]} units"
            )
    k = np.asarray(choice.k, np.int64)
    cost = np.ones(n, np.int64) if choice.cost is None else np.asarray(choice.cost, np.int64)
    jobs, job_anchor = _replay_sessions(tree, anchors, points, k, origin, roots, seed)
    replay_eps = await run(jobs)
    result = PromptResult(
        task, tree, list(root_eps), [], k, roots_done_s=roots_done, cost=cost, anchors=anchors,
        values=np.asarray(choice.values, np.float64), budget=int(budget), unit=float(unit),
    )  # fmt: skip
    replay_units = 0
    for job, j, ep in zip(jobs, job_anchor, replay_eps, strict=True):
        if job.anchor == 0:  # a fresh rollout bought by the prefix budget: one more root rollout
            if ep.turns:
                origin += [job.index] * len(tree.add_rollout(ep.turns, ep.reward))
            result.roots.append(ep)
            result.fresh += 1
        else:
            origin += [job.index] * len(tree.add_replay(job.anchor, ep.turns, ep.reward))
            result.replays.append((job.anchor, ep))
            replay_units += int(cost[j])
    every = root_eps + replay_eps
    result.spent = len(result.roots) + unit * replay_units
    result.unspent = max(budget * unit - (result.fresh + unit * replay_units), 0.0)
    result.anchorless = anchorless
    result.node_session = np.asarray(origin, np.int64)
    result.sampled_tokens = sum(e.sampled_tokens for e in every)
    result.context_tokens = sum(int(t.token_ids.size) for e in every for t in e.turns)
    result.done_s = time.perf_counter() - start
    return result


def _replay_sessions(
    tree: RolloutTree,
    anchors: Sequence[Anchor],
    points: Sequence[SavePoint | None],
    k: np.ndarray,
    origin: Sequence[int],
    roots: int,
    seed: int,
) -> tuple[list[Session], list[int]]:
    """The ``k[j]`` replay sessions of each anchor j, numbered after the ``roots`` root sessions, and the index j
    of each one's anchor (``origin``: the session that sampled each tree node)."""
    jobs: list[Session] = []
    job_anchor: list[int] = []
    for j, a in enumerate(anchors):
        path = [int(y) for y in tree.path_to(a.node)[1:]]
        turns = tuple(t for t in (tree.turn(y) for y in path) if t is not None)
        sessions = tuple(origin[y] for y in path)
        for _ in range(int(k[j])):
            index = roots + len(jobs)
            jobs.append(Session(index, a.node, points[j], session_seed(seed, index), turns, sessions))
            job_anchor.append(j)
    return jobs, job_anchor


def gather_sessions(episode: Callable[[Session], Awaitable[Episode]]) -> RunSessions:
    """A `RunSessions` that runs ``episode(session)`` for every session with `asyncio.gather`."""

    async def run(sessions: Sequence[Session]) -> list[Episode]:
        return list(await asyncio.gather(*[episode(s) for s in sessions]))

    return run
