#!/usr/bin/env bash
# The native trainer (local engine, policy update, success predictor) on one device: 3 TRACE steps on the tiny
# policy and 3 on a from-scratch Qwen3 of about 100 M parameters, on a toy tool env whose reward a random policy
# earns about half the time (trace_rl.rollout.toy_env:ParityToolEnv), so every check runs policy-gradient
# updates with non-zero advantages. It prints per step the wall-clock, generation tokens/s, update seconds,
# update_rows (paths with a non-zero advantage) with the gradient norm, and predictor seconds, and per check the
# update rows and seconds and the peak memory (scripts/device_check.py says how each figure is measured). It
# FAILS (exit 1) when a check did not finish its steps or no step of a check had a row with signal. Sized to
# finish within 8 minutes on one GPU; the script stops itself at 480 s. A bad SET is one line naming the key (exit
# 1, no traceback) before anything is built.
#
#   bash scripts/device_check.sh                  # DEVICE=cuda (default): writes ./device_check or $OUT
#   DEVICE=cpu bash scripts/device_check.sh       # the same check on CPU with a 0.1 M-parameter Qwen3: CI runs
#                                                 # this (tests/integration/test_device_check.py)
#   DEVICE=cuda:1 STEPS=3 SET="sampling.max_new_tokens=64" bash scripts/device_check.sh   # more --set overrides
#   CHECKS=qwen3-scratch bash scripts/device_check.sh   # only some checks (tiny, qwen3-scratch)
#
# WHAT HAS RUN WHERE: the CPU path runs in CI. The CUDA path ran once, on one H200 (issue 42; figures and command
# in docs/notebook/benchmarks_history.md, "The device check on a GPU"), BEFORE this script switched to the parity env: that run's
# updates had no rows with signal. The version with the parity env and the update_rows check has run on CPU
# only. Its CUDA-only parts are torch.cuda.is_available, get_device_name, reset_peak_memory_stats and
# max_memory_allocated, and `device=cuda` in the trainer's config (which puts the policy, its update and the
# predictor on the GPU; docs/training.md).
#
# NEEDS, and nothing else (no network, nothing downloaded, no install step: the script puts ./src on PYTHONPATH):
# Python 3.11 or 3.12 ($PYTHON, default .venv/bin/python when it exists, else python3) with torch (a CUDA build for DEVICE=cuda), transformers >= 4.51
# (< 6), tokenizers, safetensors, numpy and pyyaml; tqdm and tensorboard are used when present. The environment
# is trace_rl.rollout.toy_env (pure Python: no sandbox, no data package), named as module:factory. The project's
# GPU box (torch 2.11 + CUDA 13, transformers 5.17, Python 3.12, 64 MiB of files brought along, 10 minutes per
# command) holds every one of these, so no wheel has to travel with the repository; a missing one is named in
# one line before anything runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# default: the project's venv when `make install` made one (the README's set-up), else python3
if [ -z "${PYTHON:-}" ] && [ -x "$PWD/.venv/bin/python" ]; then PYTHON="$PWD/.venv/bin/python"; fi
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-3}
OUT=${OUT:-$PWD/device_check}
args=(--device "$DEVICE" --steps "$STEPS" --out "$OUT")
if [ -n "${CHECKS:-}" ]; then args+=(--checks "$CHECKS"); fi
for item in ${SET:-}; do args+=(--set "$item"); done
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [[ "$DEVICE" == cuda* ]] && command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
timeout 480 "$PY" scripts/device_check.py "${args[@]}"
