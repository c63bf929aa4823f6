#!/usr/bin/env bash
# TRACE on Qwen3-8B inside verl 0.9.1 on one 8-GPU node (written from verl's config and source; not run here).
# Prerequisites on the node: CUDA torch, vLLM for verl, and
#   pip install 'trace-rl[verl,envs]'   (or `pip install -e '.[verl,envs]'` in a checkout, without constraints.txt)
# and the Qwen3-8B weights where actor_rollout_ref.model.path points (a local folder or the hub id).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p data
[ -f data/math_python_train.parquet ] || python -m trace_rl.integrations.verl.data --env math_python --split train --limit 8192 --out data/math_python_train.parquet
[ -f data/math_python_test.parquet ] || python -m trace_rl.integrations.verl.data --env math_python --split test --limit 512 --out data/math_python_test.parquet
# the driver imports the registrations too (verl/__init__.py reads this variable in every process)
export VERL_USE_EXTERNAL_MODULES=trace_rl.integrations.verl.register
python -m verl.trainer.main_ppo --config-path "$PWD/examples/verl" --config-name trace_qwen3_8b "$@"
