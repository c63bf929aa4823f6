#!/usr/bin/env bash
# One real TRACE training step inside verl on one GPU (issue 15, item 5). Nothing in CI depends on it, and it has
# NOT been run: no session of this project had a machine it can run on.
#
# NEEDS (all of it on the GPU machine; nothing is downloaded):
# - one CUDA GPU with about 24 GiB or more (an estimate for a 0.6 B model at these settings, not a measurement:
#   FSDP actor with Adam states in fp32 plus vLLM's share gpu_memory_utilization=0.4);
# - a Python (VERL_PYTHON, default `python`) with CUDA torch, verl 0.9.1, vLLM and Ray (verl's own pins), and
#   trace-rl installed in it: `pip install -e '.[verl]'` without constraints.txt (which pins the CPU torch);
# - a small local chat model folder (MODEL, e.g. a Qwen3-0.6B snapshot).
# The task is the toy arithmetic tool env, so no data package is needed. The project's own GPU box CANNOT run this
# script: it has torch and transformers but no vLLM, verl or Ray, and no network to install them (their wheels
# are far over the 64 MiB that can travel there); scripts/device_check.sh is the check for that box.
#
# SIZED for a user's GPU and a per-command limit: the run stops itself after TIMEOUT seconds (default 600, a
# 10-minute limit such as that box's), and vLLM runs in eager mode (actor_rollout_ref.rollout.enforce_eager=True:
# no CUDA-graph capture, which costs minutes of start-up and memory for one step). It runs verl's own main_ppo
# with the trace_sync trainer for ONE step (roots, replays, TreeRPO advantages, FSDP actor update, weight sync)
# and checks the step's log for the TRACE metrics.
#
#   MODEL=/models/Qwen3-0.6B scripts/device_check_verl.sh            # writes to $OUT or ./device_check_verl
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${VERL_PYTHON:-python}
: "${MODEL:?set MODEL to a local model folder (e.g. Qwen3-0.6B)}"
OUT=${OUT:-$PWD/device_check_verl}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" -c "import torch, verl, vllm; assert torch.cuda.is_available(); print('torch', torch.__version__, 'verl', verl.__version__, 'vllm', vllm.__version__)" | tee "$OUT/versions.txt"
"$PY" - "$OUT" <<'PY'
import sys
from trace_rl.integrations.verl.data import write_parquet
from trace_rl.rollout.toy_env import load_tasks
out = sys.argv[1]
write_parquet(load_tasks("train", limit=64, seed=0), f"{out}/train.parquet")
write_parquet(load_tasks("test", limit=8, seed=0), f"{out}/test.parquet")
PY
export VERL_USE_EXTERNAL_MODULES=trace_rl.integrations.verl.register
timeout "${TIMEOUT:-600}" "$PY" -m verl.trainer.main_ppo \
  data.train_files="$OUT/train.parquet" data.val_files="$OUT/test.parquet" \
  data.train_batch_size=8 data.max_prompt_length=512 data.max_response_length=1024 \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=4 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
  actor_rollout_ref.rollout.enforce_eager=True \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.rollout.agent.num_workers=2 \
  actor_rollout_ref.rollout.agent.default_agent_loop=trace_agent \
  +actor_rollout_ref.rollout.agent.agent_loop_manager_class=trace_rl.integrations.verl.worker.TraceAgentLoopManager \
  algorithm.adv_estimator=trace_treerpo algorithm.use_kl_in_reward=false \
  trainer.v1.trainer_mode=trace_sync \
  +ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=trace_rl.integrations.verl.register \
  +trace.root_budget=32 +trace.continuations=2 +trace.max_rollouts=8 +trace.candidate_pool=16 \
  +trace.env=toy_arith +trace.max_turns=3 +trace.max_new_tokens=128 +trace.max_context=1536 \
  trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.total_training_steps=1 trainer.total_epochs=1 \
  trainer.val_before_train=false trainer.test_freq=0 trainer.save_freq=0 trainer.logger='[console]' \
  trainer.default_local_dir="$OUT/ckpt" 2>&1 | tee "$OUT/train.log"
grep -q "trace/active_prompts" "$OUT/train.log" && grep -q "actor/" "$OUT/train.log" \
  && echo "device_check_verl: PASS (one trace_sync step with an actor update; log in $OUT/train.log)" \
  || { echo "device_check_verl: FAIL (no trace/ or actor/ metrics in $OUT/train.log)"; exit 1; }
