"""TRACE-lite inside TRL's GRPOTrainer: tiny policy, math_python tasks, 2 steps on CPU (docs/integrations.md).

Run from the repository root after `make trl`:  .venv-trl/bin/python examples/trl/grpo_rollout_func.py
"""

import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from datasets import Dataset

from trace_rl.envs import load_tasks, make_env
from trace_rl.integrations.trl import TraceSettings, tasks_dataset_rows
from trace_rl.integrations.trl.rollout_func import (
    trace_advantage_reward,
    trace_env_reward,
    trace_rollout_func,
)
from trace_rl.policy import load_policy
from trl import GRPOConfig, GRPOTrainer

policy = load_policy("tiny")
tasks = load_tasks("math_python", "train", limit=32)
settings = TraceSettings(continuations=1, max_turns=2, max_new_tokens=24)  # N = 1 replay per root
rollout = trace_rollout_func(
    tasks, policy, lambda: make_env("math_python", max_turns=2), settings, root_budget=4
)
args = GRPOConfig(
    output_dir="runs/trl_grpo",
    max_steps=2,
    per_device_train_batch_size=12,
    num_generations=4,  # 3 prompts a step
    scale_rewards="none",
    reward_weights=[1.0, 0.0],
    gradient_checkpointing=False,
    use_cpu=True,
    bf16=False,
    report_to="none",
    save_strategy="no",
)
trainer = GRPOTrainer(
    model=policy.model,
    processing_class=policy.tokenizer,
    args=args,
    rollout_func=rollout,
    reward_funcs=[
        trace_advantage_reward,
        trace_env_reward,
    ],  # tree advantages (weight 1), env reward logged (0)
    train_dataset=Dataset.from_list(tasks_dataset_rows(tasks)),
)
trainer.train()
for r in rollout.records:
    print(
        f"step {r['step']}: {r['allocation']} roots {r['root_rollouts']} replays {r['replays']} "
        f"active {r['active_prompts']}/3 budget {r['budget_spent']:g}"
    )
