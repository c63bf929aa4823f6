"""The tiny policy through the agent loop on a real (toy arithmetic) environment, with replays."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("torch")

from trace_rl.rollout import toy_env
from trace_rl.rollout.agent import ChatCodec, run_episode
from trace_rl.rollout.backends import SamplingParams
from trace_rl.rollout.engine import LocalEngine


class RecordingEnv(toy_env.ArithmeticToolEnv):
    """Toy env that records the state it holds when each step starts (to compare replays with originals)."""

    def __init__(self, log: list[object], max_turns: int = 5):
        super().__init__(max_turns=max_turns)
        self.log = log

    def step(self, assistant_text: str):  # type: ignore[no-untyped-def]
        self.log.append(self.snapshot())
        return super().step(assistant_text)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_episode_bookkeeping_and_replay_from_save_point(tiny_policy):
    engine = LocalEngine(tiny_policy, max_batch=8)
    codec = ChatCodec(tiny_policy.tokenizer)
    (task,) = toy_env.load_tasks("train", 1, seed=5)
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0)
    log: list[object] = []
    ep = run(run_episode(engine, RecordingEnv(log), codec, task, sampling, max_turns=3, seed=11))
    # a random-init policy never answers: the agent loop's limit (3 < the env's 5) ends it with reward 0
    assert ep.finish == "max_turns" and ep.reward == 0.0 and len(ep.turns) == 3
    assert len(ep.save_points) == 2 and [sp.depth for sp in ep.save_points] == [1, 2]
    context = ep.token_ids()
    assert np.array_equal(context[: ep.prompt_ids.size], codec.prompt_ids(task.prompt, task.tools))
    pos = ep.prompt_ids.size
    for i, turn in enumerate(ep.turns):
        n_model = int(turn.loss_mask.sum())
        # model tokens first (mask 1, real logprobs), then template/observation tokens (mask 0, logprob 0)
        assert turn.loss_mask[:n_model].all() and not turn.loss_mask[n_model:].any()
        assert (turn.logprobs[:n_model] < 0).all() and (turn.logprobs[n_model:] == 0).all()
        assert turn.info["span"] == [pos, pos + turn.token_ids.size]
        pos += turn.token_ids.size
        if i < 2:
            obs_text = tiny_policy.tokenizer.decode(
                turn.token_ids[n_model:].tolist(), skip_special_tokens=False
            )
            assert f"<tool_response>\n{turn.observation}\n</tool_response>" in obs_text
            assert np.array_equal(ep.save_points[i].token_ids, context[:pos])
    # replays from the save point after turn 1 see exactly the state the original saw at turn 2
    replay_log: list[object] = []
    sp = ep.save_points[0]

    async def replay_all():  # type: ignore[no-untyped-def]
        return await asyncio.gather(
            *[
                run_episode(
                    engine,
                    RecordingEnv(replay_log),
                    codec,
                    task,
                    sampling,
                    max_turns=3,
                    seed=100 + j,
                    start=sp,
                )
                for j in range(3)
            ]
        )

    engine.reset_stats()
    replays = run(replay_all())
    # the save point's context came from the cache: no replay recomputed more than its last prompt token
    assert engine.stats.prefill_tokens < engine.stats.reused_tokens
    for r in replays:
        assert r.start_depth == 1 and len(r.turns) == 2
        assert np.array_equal(r.prompt_ids, sp.token_ids)
    original_turn2_state = log[1]
    first_steps = [s for s in replay_log if s["turn"] == 1]  # type: ignore[index]
    assert len(first_steps) == 3 and all(s == original_turn2_state for s in first_steps)
    # the replays' first turns differ from each other (fresh futures), and the prefix was not recomputed
    assert len({r.turns[0].text for r in replays}) > 1


def test_same_seeds_reproduce_episodes(tiny_policy):
    codec = ChatCodec(tiny_policy.tokenizer)
    tasks = toy_env.load_tasks("train", 3, seed=2)
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=0.95)

    async def batch(engine):  # type: ignore[no-untyped-def]
        return await asyncio.gather(
            *[
                run_episode(engine, toy_env.make_env(max_turns=2), codec, t, sampling, max_turns=2, seed=i)
                for i, t in enumerate(tasks)
            ]
        )

    a = run(batch(LocalEngine(tiny_policy)))
    b = run(batch(LocalEngine(tiny_policy)))
    assert [e.token_ids().tolist() for e in a] == [e.token_ids().tolist() for e in b]


def test_gold_turns_reach_reward_one(tiny_policy):
    """A backend that replays the gold turns token by token drives the loop to reward 1."""
    from trace_rl.rollout.backends import Completion

    tok = tiny_policy.tokenizer
    (task,) = toy_env.load_tasks("train", 1, seed=9)
    gold = toy_env.gold_trajectory(task)

    class GoldBackend:
        def __init__(self) -> None:
            self.turn = 0

        async def generate(self, prompt_token_ids, sampling, n=1):  # type: ignore[no-untyped-def]
            ids = [*tok.encode(gold[self.turn], add_special_tokens=False), tiny_policy.stop_ids[0]]
            self.turn += 1
            return [Completion(np.asarray(ids, np.int64), np.full(len(ids), -0.5, np.float32), "stop")]

    ep = run(
        run_episode(GoldBackend(), toy_env.make_env(), ChatCodec(tok), task, SamplingParams(), max_turns=4)
    )
    assert ep.finish == "done" and ep.reward == 1.0 and len(ep.turns) == 2
    assert ep.turns[0].observation == task.answer and ep.turns[1].observation == ""


class Recording:
    """Wraps any Env and records its snapshot at the start of every step."""

    def __init__(self, env, log):  # type: ignore[no-untyped-def]
        self.env, self.log = env, log

    def reset(self, task):  # type: ignore[no-untyped-def]
        return self.env.reset(task)

    def step(self, text):  # type: ignore[no-untyped-def]
        self.log.append(self.env.snapshot())
        return self.env.step(text)

    def snapshot(self):  # type: ignore[no-untyped-def]
        return self.env.snapshot()

    def restore(self, state):  # type: ignore[no-untyped-def]
        self.env.restore(state)


def test_tiny_policy_on_math_python_with_replay(tiny_policy):
    envs = pytest.importorskip("trace_rl.envs")
    (task,) = envs.load_tasks("math_python", "train", 1, 0)
    engine = LocalEngine(tiny_policy, max_batch=4)
    codec = ChatCodec(tiny_policy.tokenizer)
    sampling = SamplingParams(max_new_tokens=10, temperature=1.0)
    log: list[object] = []
    ep = run(
        run_episode(
            engine,
            Recording(envs.make_env("math_python", max_turns=5), log),
            codec,
            task,
            sampling,
            max_turns=3,
            seed=1,
        )
    )
    assert ep.finish == "max_turns" and len(ep.turns) == 3 and len(ep.save_points) == 2
    # the tool schema is rendered into the prompt
    assert '"name": "python"' in tiny_policy.tokenizer.decode(ep.prompt_ids.tolist())
    replay_log: list[object] = []
    sp = ep.save_points[1]
    r = run(
        run_episode(
            engine,
            Recording(envs.make_env("math_python", max_turns=5), replay_log),
            codec,
            task,
            sampling,
            max_turns=3,
            seed=2,
            start=sp,
        )
    )
    assert r.start_depth == 2 and len(r.turns) == 1
    assert repr(replay_log[0]) == repr(log[2])  # the replay's env is in the state the original saw at turn 3
    assert repr(log[1]) != repr(log[2])  # (states differ between turns, so the check can fail)


def test_prompt_longer_than_the_context_is_one_failed_turn_not_a_lost_rollout(tiny_policy):
    # found on the bfcl preset: a prompt with more tokens than max_context gave an episode with no turns, a tree
    # whose root had no children, and a NaN predictor target that ended the run
    from trace_rl.tree import RolloutTree

    engine = LocalEngine(tiny_policy, max_batch=8)
    codec = ChatCodec(tiny_policy.tokenizer)
    (task,) = toy_env.load_tasks("train", 1, seed=5)
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0)
    prompt_len = len(codec.prompt_ids(task.prompt, task.tools))
    ep = run(
        run_episode(
            engine, RecordingEnv([]), codec, task, sampling, max_turns=3, seed=1, max_context=prompt_len
        )
    )
    assert ep.finish == "context" and ep.reward == 0.0 and len(ep.turns) == 1
    turn = ep.turns[0]
    assert turn.token_ids.size == turn.loss_mask.size == turn.logprobs.size == 0 and turn.text == ""
    tree = RolloutTree()
    tree.add_rollout(ep.turns, ep.reward)
    assert tree.value_targets()[0] == 0.0 and np.isfinite(tree.value_targets()).all()
