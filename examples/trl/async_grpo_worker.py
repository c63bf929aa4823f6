"""TRACE inside TRL's AsyncGRPOTrainer: tiny policy, math_python tasks, 2 steps on CPU (docs/integrations.md).

Run from the repository root after `make trl`:  .venv-trl/bin/python examples/trl/async_grpo_worker.py
"""

import torch
from datasets import Dataset
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

from trace_rl.envs import load_tasks, make_env
from trace_rl.integrations.trl import TraceSettings, tasks_dataset_rows
from trace_rl.integrations.trl.cpu import enable_cpu_async_grpo
from trace_rl.integrations.trl.worker import TraceRolloutWorker
from trace_rl.policy import load_policy

folder = "runs/trl_async/policy"
load_policy("tiny").save(folder)  # AsyncGRPOTrainer loads its model from a folder; the generator is a copy
tasks = load_tasks("math_python", "train", limit=32)
settings = TraceSettings(continuations=2, max_turns=2, max_new_tokens=24, estimator="tree_grpo")
worker = TraceRolloutWorker(
    tasks,
    load_policy(folder),
    lambda: make_env("math_python", max_turns=2),
    settings,
    roots=8,
    group_size=4,
    pool_size=8,
)  # M = 8 roots over 8 candidates per step
args = AsyncGRPOConfig(
    output_dir="runs/trl_async",
    max_steps=2,
    per_device_train_batch_size=8,
    token_budget=0,
    gradient_checkpointing=False,
    bf16=False,
    use_cpu=True,
    report_to="none",
    save_strategy="no",
)
if not torch.cuda.is_available():
    enable_cpu_async_grpo()  # TRL's MFU lookup and tree attention (a hub kernel) need CUDA: torch versions
trainer = AsyncGRPOTrainer(
    model=folder,
    args=args,
    train_dataset=Dataset.from_list(tasks_dataset_rows(tasks)),
    rollout_worker=worker,
    weight_transfer=worker.weight_transfer(),
)
trainer.train()
for h in worker.history:
    print(
        f"step {h.step} (policy v{h.version}): {h.record['allocation']} roots {h.record['root_rollouts']} "
        f"replays {h.record['replays']} samples {len(h.samples)}"
    )
