"""Toy arithmetic env, SFT data layout and schedule, spread metrics (hand-computed numbers)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from trace_rl.policy.sft import SFTConfig, build_sft_examples, lr_at
from trace_rl.rollout import toy_env
from trace_rl.rollout.evaluate import spread_metrics


def test_safe_eval_and_tool():
    assert toy_env.safe_eval("2 + 3 * 4") == 14  # precedence: 3*4 = 12, + 2
    assert toy_env.safe_eval("-(7 - 10) * 2") == 6
    assert toy_env.run_code("print(12 - 5)") == "7"
    assert toy_env.run_code("__import__('os')").startswith("Error: unsupported")
    assert toy_env.run_code("print(1 +)").startswith("Error: syntax error")
    with pytest.raises(ValueError, match="too large"):
        toy_env.safe_eval("999999999999999 * 2")


def test_env_episode_snapshot_restore():
    (task,) = toy_env.load_tasks("train", 1, seed=3)
    env = toy_env.make_env(max_turns=3)
    assert env.reset(task) == task.prompt
    gold = toy_env.gold_trajectory(task)
    r1 = env.step(gold[0])
    assert (r1.observation, r1.done, r1.reward) == (task.answer, False, 0.0)
    snap = env.snapshot()
    r2 = env.step("<answer>-123456</answer>")
    assert r2.done and r2.reward == 0.0
    env.restore(snap)  # back to the boundary after turn 1: the gold answer now wins
    r3 = env.step(gold[1])
    assert r3.done and r3.reward == 1.0
    with pytest.raises(ValueError, match="after the episode ended"):
        env.step("x")


def test_env_malformed_turns_and_turn_limit():
    (task,) = toy_env.load_tasks("train", 1)
    env = toy_env.make_env(max_turns=2)
    env.reset(task)
    r = env.step("I think the answer is 4")
    assert r.observation.startswith("Error: no <tool_call>") and not r.done
    r = env.step('<tool_call>{"name": "python", "arguments": {}}</tool_call>')
    assert r.observation.startswith("Error: bad tool call") and r.done and r.reward == 0.0


def test_parity_env_scores_the_last_turn_by_its_length_and_keeps_the_arithmetic_episode():
    (task,) = toy_env.load_tasks("train", 1, seed=3)
    env = toy_env.ParityToolEnv(max_turns=2)
    env.reset(task)
    r1 = env.step("ab")  # not the last turn: no reward whatever its length, the arithmetic env's observation
    assert r1.observation.startswith("Error: no <tool_call>") and not r1.done and r1.reward == 0.0
    snap = env.snapshot()
    r2 = env.step("abcd")  # the turn limit: 4 characters, even
    assert r2.done and r2.reward == 1.0 and r2.info["parity_reward"] is True
    env.restore(snap)
    r3 = env.step("abc")  # same state, 3 characters
    assert r3.done and r3.reward == 0.0 and r3.info["parity_reward"] is False
    env.restore(snap)
    assert env.step("<answer>-1</answer>").reward == 0.0  # 19 characters, wrong answer
    env.restore(snap)
    gold = toy_env.gold_trajectory(task)[1]
    assert env.step(gold + "x" * (len(gold) % 2 == 0)).reward == 1.0  # odd length, correct answer still wins
    env.reset(task)
    assert env.step(toy_env.gold_trajectory(task)[0]).observation == task.answer  # the tool still runs


def test_tasks_are_deterministic():
    a = toy_env.load_tasks("train", 5, seed=1)
    assert a == toy_env.load_tasks("train", 5, seed=1)
    assert a != toy_env.load_tasks("train", 5, seed=2)
    assert all(t.answer == str(toy_env.safe_eval(str(t.metadata["expression"]))) for t in a)


def test_sft_examples_mask_model_tokens_only(tiny_policy):
    tok = tiny_policy.tokenizer
    tasks = toy_env.load_tasks("train", 2)
    gold = [toy_env.gold_trajectory(t) for t in tasks]
    (ex, _) = build_sft_examples(tasks, gold, toy_env.make_env, tok)
    text_model = tok.decode(ex.ids[ex.loss_mask == 1].tolist(), skip_special_tokens=False)
    # the model tokens are exactly the two gold turns, each closed by <|im_end|>
    assert text_model == gold[0][0] + "<|im_end|>" + gold[0][1] + "<|im_end|>"
    full = tok.decode(ex.ids.tolist(), skip_special_tokens=False)
    assert f"<tool_response>\n{tasks[0].answer}\n</tool_response>" in full
    with pytest.raises(ValueError, match="2 tasks but 1"):
        build_sft_examples(tasks, gold[:1], toy_env.make_env, tok)


def test_lr_schedule_hand_numbers():
    cfg = SFTConfig(steps=100, lr=1e-3, warmup_steps=10, decay_frac=0.2, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(1e-4)  # (0+1)/10 * 1e-3
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(79, cfg) == pytest.approx(1e-3)  # plateau until step 80 = 100 - ceil(0.2*100)
    assert lr_at(90, cfg) == pytest.approx(1e-3 * (1 - 0.9 * 0.5))  # halfway through the decay: 5.5e-4
    with pytest.raises(ValueError):
        SFTConfig(steps=0)


def test_spread_metrics_hand_numbers():
    r = np.array([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0]], float)
    m = spread_metrics(r)
    # successes 3 + 0 + 4 + 1 = 8 of 16; mixed rows 0 and 3; all-solved row 2; all-failed row 1
    assert m == {"mean_success": 0.5, "mixed_share": 0.5, "all_solved_share": 0.25, "all_failed_share": 0.25}
    with pytest.raises(ValueError, match="shape"):
        spread_metrics(np.zeros(3))


def test_train_sft_lowers_loss(tiny_policy):
    import copy

    from trace_rl.policy.sft import train_sft

    model = copy.deepcopy(tiny_policy.model)
    tasks = toy_env.load_tasks("train", 8)
    exs = build_sft_examples(
        tasks, [toy_env.gold_trajectory(t) for t in tasks], toy_env.make_env, tiny_policy.tokenizer
    )
    seen = []

    def evaluate(step):
        seen.append(step)
        time.sleep(0.05)  # a probe's wall time, which the result reports apart from the steps'
        return {}

    res = train_sft(
        model,
        exs,
        SFTConfig(steps=30, batch_size=4, lr=3e-3, warmup_steps=5, eval_every=15),
        pad_id=int(tiny_policy.tokenizer.pad_token_id),
        evaluate=evaluate,
    )
    assert seen == [15, 30]
    assert res.history[0]["step"] == 15.0
    assert all(h["eval_s"] >= 0.05 for h in res.history)
    assert res.eval_seconds == pytest.approx(sum(h["eval_s"] for h in res.history))
    assert 0.1 <= res.eval_seconds < res.seconds
    # random init starts near ln(512) = 6.24; 30 steps on 8 repeated examples must get well below it
    assert res.final_loss < 5.0


def test_train_sft_stops_at_the_first_probe_meeting_the_rule(tiny_policy):
    import copy

    from trace_rl.policy.sft import train_sft

    model = copy.deepcopy(tiny_policy.model)
    tasks = toy_env.load_tasks("train", 4)
    exs = build_sft_examples(
        tasks, [toy_env.gold_trajectory(t) for t in tasks], toy_env.make_env, tiny_policy.tokenizer
    )
    cfg = SFTConfig(steps=40, batch_size=2, lr=1e-3, warmup_steps=2, eval_every=5, min_steps=15)
    pad = int(tiny_policy.tokenizer.pad_token_id)
    # the probe "succeeds" from step 10 on; no probe (so no stop) before min_steps = 15
    res = train_sft(
        model,
        exs,
        cfg,
        pad_id=pad,
        evaluate=lambda s: {"mean_success": float(s >= 10)},
        stop=lambda m: m["mean_success"] >= 0.5,
    )
    assert res.stopped and res.steps == 15 and [h["step"] for h in res.history] == [15.0]
    never = train_sft(
        copy.deepcopy(tiny_policy.model),
        exs,
        SFTConfig(steps=10, batch_size=2, eval_every=5),
        pad_id=pad,
        evaluate=lambda s: {"mean_success": 0.0},
        stop=lambda m: m["mean_success"] >= 0.5,
    )
    assert not never.stopped and never.steps == 10
