"""The per-prompt expansion (`trace_rl.rollout.expansion`) through the scheduler and the training step, with a
scripted backend and environment (no model): budget spent exactly, costs checked, seeds distinct."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from trace_rl.allocation import BudgetShape, get_method, units_per_rollout
from trace_rl.predictor.capabilities import NO_CAPABILITIES
from trace_rl.rollout.backends import Completion, SamplingParams
from trace_rl.rollout.expansion import PrefixChoice, Session, expand_prompt, session_seed
from trace_rl.rollout.scheduler import run_plan, uniform_prefixes
from trace_rl.types import RootPlan, Task


class ScriptedBackend:
    """One token per turn; records every request's seed and whether it continued a save point."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, int]] = []  # (seed, context length)

    async def generate(self, prompt_token_ids: Any, sampling: Any, n: int = 1) -> list[Completion]:
        self.requests.append((int(sampling.seed), len(prompt_token_ids)))
        return [Completion(np.asarray([5], np.int64), np.asarray([-1.0], np.float32), "stop")]


class TurnsEnv:
    """Ends after ``turns`` turns; reward ``win``, or 1 on even-numbered episodes (mixed groups) when None."""

    made = 0

    def __init__(self, turns: int, win: float | None = None) -> None:
        self.turns = turns
        TurnsEnv.made += 1
        self.win = float(TurnsEnv.made % 2 == 0) if win is None else win

    def reset(self, task: Task) -> str:
        self.turn = 0
        return task.prompt

    def step(self, text: str) -> Any:
        self.turn += 1
        return SimpleNamespace(observation="obs", reward=self.win, done=self.turn >= self.turns, info={})

    def snapshot(self) -> object:
        return self.turn

    def restore(self, state: object) -> None:
        self.turn = int(state)  # type: ignore[call-overload]


class Codec:
    end_of_turn = 0

    def prompt_ids(self, first: str, tools: Any) -> list[int]:
        return [100 + len(first)]

    def observation_ids(self, obs: str) -> list[int]:
        return [9]

    def turn_text(self, ids: Any, stop_ids: Any = ()) -> str:
        return "t"


def tasks(n: int) -> list[Task]:
    return [Task(id=f"p{i}", env="x", prompt=f"prompt {i}") for i in range(n)]


def plan(rollouts: list[int], budgets: list[float]) -> RootPlan:
    return RootPlan(np.asarray(rollouts, np.int64), np.asarray(budgets, np.float64), "test")


def run(
    p: RootPlan, turns: int, strategy: Any, win: float | None = None, **kw: Any
) -> tuple[list[Any], ScriptedBackend]:
    backend = ScriptedBackend()
    out = asyncio.run(
        run_plan(
            p,
            tasks(p.rollouts.size),
            backend,
            lambda: TurnsEnv(turns, win),
            Codec(),
            SamplingParams(),
            strategy,
            max_turns=4,
            **kw,
        )
    )
    return out, backend


def test_one_turn_prompts_spend_their_prefix_budget_on_fresh_rollouts() -> None:
    """Every episode ends after one turn: no anchor, so N m_i replays at 0.5 buy N m_i / 2 fresh rollouts."""
    (r,), _ = run(plan([4], [8]), 1, uniform_prefixes)
    assert r.anchorless and r.fresh == 4 and len(r.roots) == 8 and not r.replays
    assert r.spent == 4 + 8 * 0.5 and r.unspent == 0.0
    assert int((r.tree.parent == 0).sum()) == 8  # fresh rollouts are root rollouts of the tree
    # an odd budget leaves half a rollout-equivalent unspent, and says so
    (r,), _ = run(plan([2], [3]), 1, uniform_prefixes)
    assert r.fresh == 1 and r.spent == 3.0 and r.unspent == 0.5


def test_replays_are_checked_by_cost_not_count() -> None:
    """A fresh rollout costs 2 replay units at replay_cost 0.5: k = [2, 1] costs 5 units, over a budget of 4."""

    def strategy(task, tree, anchors, points, budget):  # type: ignore[no-untyped-def]
        k = np.zeros(len(anchors), np.int64)
        k[0], k[1] = 2, 1
        return k

    with pytest.raises(ValueError, match="one rollout-equivalent"):
        run(plan([2], [4]), 2, strategy, win=0.0, fresh_anchor=True)  # unanimous roots: fresh anchor offered
    cost = lambda task, tree, anchors, points, budget: PrefixChoice(  # noqa: E731
        np.array([0, 3]), np.array([2, 2])
    )
    with pytest.raises(ValueError, match="prefix strategy returned"):
        run(plan([2], [5]), 2, cost)


def test_replay_seeds_never_collide_across_anchors_or_prompts() -> None:
    """98 replays from one anchor and one from the next (the old seeds base + 5000 + 97 j + r collided there),
    and many prompts: every episode's first request has its own seed."""

    def strategy(task, tree, anchors, points, budget):  # type: ignore[no-untyped-def]
        k = np.zeros(len(anchors), np.int64)
        k[0], k[1] = 98, 1
        return k

    _, backend = run(plan([2, 2], [99, 99]), 2, strategy, max_concurrency=256)
    first_turn = [s for s, length in backend.requests]  # every request is a distinct (episode, depth)
    assert len(first_turn) == 2 * (2 * 2 + 99)
    assert len(set(first_turn)) == len(first_turn)
    seeds = {session_seed((7 << 20) + p, s) for p in range(64) for s in range(300)}
    assert len(seeds) == 64 * 300


def test_expand_prompt_reports_sessions_and_prefixes() -> None:
    """Replay sessions carry the anchor's prefix turns and the sessions that sampled them (what verl needs)."""
    seen: list[Session] = []

    async def run_sessions(sessions):  # type: ignore[no-untyped-def]
        from trace_rl.rollout.agent import run_episode

        seen.extend(sessions)
        return [
            await run_episode(
                ScriptedBackend(),
                TurnsEnv(3),
                Codec(),
                tasks(1)[0],
                SamplingParams(),
                seed=s.seed,
                start=s.start,
            )
            for s in sessions
        ]

    r = asyncio.run(
        expand_prompt(tasks(1)[0], 2, run_sessions, uniform_prefixes, 3, unit=0.5, seed=session_seed(1, 0))
    )
    replays = [s for s in seen if s.anchor > 0]
    assert [s.index for s in seen] == list(range(5)) and len(replays) == 3
    for s in replays:
        assert len(s.prefix_turns) == len(s.prefix_sessions) == s.start.depth  # type: ignore[union-attr]
        assert set(s.prefix_sessions) <= {0, 1}
    assert r.node_session.shape == (r.tree.num_nodes,) and r.node_session[0] == -1
    assert sorted(set(r.node_session[1:].tolist())) == [0, 1, 2, 3, 4]
    assert r.spent == 2 + 0.5 * 3


def test_units_price_any_reasonable_replay_cost_exactly() -> None:
    assert units_per_rollout(0.5) == 8 and units_per_rollout(0.3) == 40 and units_per_rollout(1 / 3) == 24
    with pytest.raises(ValueError, match="denominator"):
        units_per_rollout(0.123456789)


# --------------------------------------------------------------------------------------- the training step
class FlatPredictor:
    is_warm = True
    max_chars = 2048
    capabilities = NO_CAPABILITIES

    def predict(self, texts: Any) -> np.ndarray:
        return np.full(len(texts), 0.5)


def step_record(method: str, turns: int, replay_cost: float = 0.5) -> dict[str, Any]:
    from trace_rl.spec import TraceSpec
    from trace_rl.train.step import StepParts, training_step

    parts = StepParts(
        backend=ScriptedBackend(),
        env_factory=lambda: TurnsEnv(turns),
        codec=Codec(),
        sampling=SamplingParams(),
        predictor=FlatPredictor(),
        online=SimpleNamespace(observe_step=lambda ex: {}),
        update_policy=lambda trees: {},
        spec=TraceSpec(max_turns=4),
    )
    shape = BudgetShape(roots=8, continuations=2, group_size=4, replay_cost=replay_cost)
    record, _ = training_step(0, tasks(8), get_method(method), shape, parts, np.random.default_rng(0))
    return record


@pytest.mark.parametrize("method", ["trace", "treepo", "trace_fresh"])
def test_tree_methods_spend_the_whole_budget_on_one_turn_tasks(method: str) -> None:
    rec = step_record(method, turns=1)
    assert rec["budget_spent"] == pytest.approx(rec["budget_total"])
    assert rec["budget_unspent"] == 0.0 and rec["fresh_rollouts"] == 8 and rec["replays"] == 0


def test_fresh_anchor_prices_a_replay_cost_off_the_eighths_exactly() -> None:
    """replay_cost 0.3 is priced in 40ths of a rollout: never more spent than the budget (0.3 used to be priced
    as 2/8 and charged 0.3)."""
    rec = step_record("trace_fresh", turns=3, replay_cost=0.3)
    assert rec["budget_spent"] <= rec["budget_total"] + 1e-9
    assert rec["budget_spent"] + rec["budget_unspent"] == pytest.approx(rec["budget_total"])


def test_a_prompt_that_fills_the_context_keeps_its_budget_unspent() -> None:
    """Roots that sampled no token (the prompt alone fills the context) end as one empty failed turn each: fresh
    rollouts would fail the same way, so the budget is reported unspent instead of buying them."""
    from trace_rl.rollout.agent import Episode
    from trace_rl.types import Turn

    empty = np.zeros(0, np.int64)

    async def run_sessions(sessions):  # type: ignore[no-untyped-def]
        turn = Turn(empty, empty.astype(np.int8), empty.astype(np.float32), "", "", {})
        return [Episode(tasks(1)[0], 0, np.arange(5), [turn], 0.0, [], "context") for _ in sessions]

    r = asyncio.run(expand_prompt(tasks(1)[0], 2, run_sessions, uniform_prefixes, 4, unit=0.5))
    assert not r.anchorless and r.fresh == 0 and len(r.roots) == 2
    assert r.spent == 2 and r.unspent == 2.0
