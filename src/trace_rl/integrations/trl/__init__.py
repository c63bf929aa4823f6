"""TRACE inside TRL (docs/integrations.md): the only part of trace-rl that imports TRL (``make trl`` builds
``.venv-trl`` with it).

Two paths, both running trace-rl's own training step (predictor -> root allocation -> per-prompt turn-prefix
replays -> predictor update) with TRL doing the policy update:

- `worker.TraceRolloutWorker` + `worker.TraceWeightPush` for TRL's ``AsyncGRPOTrainer`` (experimental in 1.16)
  (TRL's ``rollout_worker`` / ``weight_transfer`` seams): any number of roots per prompt, replays, precomputed
  tree advantages per `RolloutSample`, groups of any size, policy versions. On a machine without CUDA, call
  `cpu.enable_cpu_async_grpo()` before building the trainer.
- `rollout_func.trace_rollout_func` + `rollout_func.trace_advantage_reward` for ``trl.GRPOTrainer``
  (``rollout_func``): TRACE-lite inside TRL's fixed groups of ``num_generations`` rows.

`parts` holds what both share (settings, the native step's parts, the TRL rows of a tree); importing this
package imports nothing from TRL.

`compat` is the version seam: the one module that imports TRL's non-public or moved names (AsyncGRPOTrainer's
module, ``RolloutSample``, the tree-attention name), preferring the stable path of TRL 1.18 and later, after
checking TRL's version against `TRL_RANGE`.
"""

from trace_rl.integrations.trl.compat import TRL_RANGE, TRL_VERSION
from trace_rl.integrations.trl.parts import TraceSettings, tasks_dataset_rows

__all__ = ["TRL_RANGE", "TRL_VERSION", "TraceSettings", "tasks_dataset_rows"]
