"""Adapters that plug trace-rl into other RL frameworks (DESIGN.md section 3: the only place, with cli/, that
imports heavy optional packages). Each lives in its own subpackage and imports its framework lazily:

- `trace_rl.integrations.verl`: root allocation, turn-prefix replays and tree advantages inside verl
  (docs/integrations.md; needs the `.venv-verl` environment of `make verl`).
- `trace_rl.integrations.trl`: a rollout worker for TRL's AsyncGRPOTrainer and a rollout_func for its
  GRPOTrainer (docs/integrations.md; needs the `.venv-trl` environment of `make trl`).
"""
