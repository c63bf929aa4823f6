"""Import this module in every verl process to run TRACE inside verl on CPU (CI, `trace-rl verl-check`, a laptop):

    VERL_USE_EXTERNAL_MODULES=trace_rl.integrations.verl.cpu   VERL_PLATFORM=cpu

In this order it registers the CPU platform (`cpu_platform`: device ``cpu``, backend ``gloo``; first, because
verl caches its platform the first time anything asks, and importing verl's trainer asks), then everything
`trace_rl.integrations.verl.register` registers (trainer ``trace_sync``, agent loop ``trace_agent``, the tree
estimators), verl's FSDP engines for device ``cpu``, and the CPU rollout (`cpu_rollout`:
``actor_rollout_ref.rollout.name=trace_vllm_cpu``, replicas in front of running vLLM-CPU servers with the weight
update that reaches them). Both variables must reach every Ray worker (``ray_kwargs.ray_init.runtime_env.env_vars``);
`trace_rl.integrations.verl.check.cpu_overrides` writes them, with the rest of the CPU settings. docs/integrations.md,
"Running verl on CPU".
"""

from __future__ import annotations

from trace_rl.integrations.verl.cpu_platform import register_cpu_engines, register_cpu_platform

register_cpu_platform()

from trace_rl.integrations.verl import register as _register  # noqa: E402, F401  (TRACE's registrations)
from trace_rl.integrations.verl.cpu_rollout import register_cpu_rollout  # noqa: E402

register_cpu_engines()
register_cpu_rollout()
