"""Scheduler: per-prompt expansion without waiting for other prompts; trees and budget accounting."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("torch")

from trace_rl.rollout import toy_env
from trace_rl.rollout.agent import ChatCodec
from trace_rl.rollout.backends import Completion, SamplingParams
from trace_rl.rollout.engine import LocalEngine
from trace_rl.rollout.expansion import PrefixChoice
from trace_rl.rollout.scheduler import run_plan, uniform_prefixes
from trace_rl.types import RootPlan


def plan(rollouts, budgets):  # type: ignore[no-untyped-def]
    return RootPlan(np.asarray(rollouts, np.int64), np.asarray(budgets, np.float64), "test")


def test_tiny_engine_trees_and_accounting(tiny_policy):
    tasks = toy_env.load_tasks("train", 3, seed=4)
    engine = LocalEngine(tiny_policy, max_batch=16)
    codec = ChatCodec(tiny_policy.tokenizer)
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0)
    # prompt 1 is skipped (m = 0); prompts 0 and 2 get 2 and 3 roots and 3 and 4 replays
    results = asyncio.run(
        run_plan(
            plan([2, 0, 3], [3, 0, 4.5]),
            tasks,
            engine,
            lambda: toy_env.make_env(max_turns=5),
            codec,
            sampling,
            uniform_prefixes,
            max_turns=3,
            max_concurrency=4,
        )
    )
    assert [r.task.id for r in results] == [tasks[0].id, tasks[2].id]
    for r, m, b in zip(results, [2, 3], [3, 4], strict=True):
        # random-init policy: every rollout runs 3 turns, so each root has 2 anchors
        assert len(r.roots) == m and all(len(e.turns) == 3 for e in r.roots)
        assert r.k.size == 2 * m and int(r.k.sum()) == b and len(r.replays) == b
        assert r.spent == m + 0.5 * b  # a replay costs half a rollout
        assert r.sampled_tokens == sum(e.sampled_tokens for e in r.roots) + sum(
            e.sampled_tokens for _, e in r.replays
        )
        for node, ep in r.replays:
            anchor = next(a for a in r.tree.anchors() if a.node == node)
            assert ep.start_depth == anchor.depth and len(ep.turns) == 3 - anchor.depth
        assert r.roots_done_s <= r.done_s


def test_prompt_expands_as_soon_as_its_roots_return():
    """Prompt 0's roots are fast and prompt 1's slow: prompt 0's replays must run before prompt 1's roots end."""
    events: list[tuple[str, int]] = []
    prompt_of = {}

    class ScriptedBackend:
        async def generate(self, prompt_token_ids, sampling, n=1):  # type: ignore[no-untyped-def]
            who = prompt_of[prompt_token_ids[0]]
            replay = len(prompt_token_ids) > 1  # save points carry more than the first token
            await asyncio.sleep(0.2 if who == 1 else 0.01)
            events.append(("replay" if replay else "root", who))
            return [Completion(np.asarray([5], np.int64), np.asarray([-1.0], np.float32), "stop")]

    class TwoTurnEnv:
        def reset(self, task):  # type: ignore[no-untyped-def]
            self.turn = 0
            return task.prompt

        def step(self, text):  # type: ignore[no-untyped-def]
            self.turn += 1
            return toy_env.StepResult("obs", 1.0, self.turn >= 2, {})

        def snapshot(self):  # type: ignore[no-untyped-def]
            return self.turn

        def restore(self, state):  # type: ignore[no-untyped-def]
            self.turn = state

    class Codec:
        end_of_turn = 0

        def prompt_ids(self, first, tools):  # type: ignore[no-untyped-def]
            ident = 100 + int(first[-1])
            prompt_of[ident] = int(first[-1])
            return [ident]

        def observation_ids(self, obs):  # type: ignore[no-untyped-def]
            return [9]

        def turn_text(self, ids, stop_ids=()):  # type: ignore[no-untyped-def]
            return "t"

    tasks = [
        toy_env.load_tasks("train", 1)[0].__class__(id=f"p{i}", env="x", prompt=f"p{i}") for i in range(2)
    ]
    results = asyncio.run(
        run_plan(
            plan([2, 2], [2, 2]),
            tasks,
            ScriptedBackend(),
            TwoTurnEnv,
            Codec(),
            SamplingParams(),
            uniform_prefixes,
            max_turns=2,
            max_concurrency=8,
        )
    )
    first_replay_0 = events.index(("replay", 0))
    last_root_1 = max(i for i, e in enumerate(events) if e == ("root", 1))
    assert first_replay_0 < last_root_1
    assert results[0].done_s < results[1].roots_done_s


def test_bad_strategy_and_plan_raise(tiny_policy):
    tasks = toy_env.load_tasks("train", 1)
    engine = LocalEngine(tiny_policy)
    codec = ChatCodec(tiny_policy.tokenizer)
    sp = SamplingParams(max_new_tokens=4)
    greedy = lambda task, tree, anchors, points, budget: np.full(len(anchors), budget + 1)  # noqa: E731
    with pytest.raises(ValueError, match="prefix strategy returned"):
        asyncio.run(run_plan(plan([2], [1]), tasks, engine, toy_env.make_env, codec, sp, greedy, max_turns=2))
    with pytest.raises(ValueError, match="pool has 1"):
        asyncio.run(run_plan(plan([2, 2], [1, 1]), tasks, engine, toy_env.make_env, codec, sp, greedy))


def test_fresh_anchor_buys_root_rollouts_at_cost_one(tiny_policy):
    """With fresh_anchor the prompt is offered first (node 0, depth 0); its "replays" become root rollouts."""
    tasks = toy_env.load_tasks("train", 2, seed=5)
    engine = LocalEngine(tiny_policy, max_batch=16)
    codec = ChatCodec(tiny_policy.tokenizer)
    seen: list[list[tuple[int, int]]] = []

    def strategy(task, tree, anchors, points, budget):  # type: ignore[no-untyped-def]
        seen.append([(a.node, a.depth) for a in anchors])
        assert points[0] is None and all(p is not None for p in points[1:])
        k = np.zeros(len(anchors), np.int64)
        k[0], k[1] = 2, 1  # two fresh rollouts and one replay from the first turn prefix
        cost = np.ones(len(anchors), np.int64)
        cost[0] = 2  # the budget counts replays at 0.5: a fresh rollout is worth two of them
        return PrefixChoice(k, cost)

    results = asyncio.run(
        run_plan(
            plan([2, 3], [5, 5]),
            tasks,
            engine,
            lambda: toy_env.make_env(max_turns=5),
            codec,
            SamplingParams(max_new_tokens=6, temperature=1.0),
            strategy,
            max_turns=3,
            fresh_anchor=True,
        )
    )
    for r, m in zip(results, [2, 3], strict=True):
        assert seen and all(s[0] == (0, 0) for s in seen)
        assert r.fresh == 2 and len(r.roots) == m + 2 and len(r.replays) == 1
        assert r.spent == (m + 2) + 0.5 * 1  # a fresh rollout costs 1, a replay 0.5
        assert int((r.tree.parent == 0).sum()) == m + 2  # fresh rollouts hang under the prompt
        assert not r.tree.is_replay[r.tree.parent == 0].any()
