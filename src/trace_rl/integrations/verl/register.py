"""Import this module in every verl process to register TRACE with verl's registries:

    VERL_USE_EXTERNAL_MODULES=trace_rl.integrations.verl.register

(verl imports it from ``verl/__init__.py``; forward the variable to Ray workers with
``ray_kwargs.ray_init.runtime_env.env_vars``). It registers the agent loop ``trace_agent``, the advantage
estimators ``trace_treerpo`` and ``trace_tree_grpo``, and the trainer ``trace_sync``.
"""

from __future__ import annotations

# an old verl would silently skip prepare_step)
from trace_rl.integrations.verl import agent_loop as _agent_loop  # noqa: F401  (registers trace_agent)
from trace_rl.integrations.verl import compat as _compat  # noqa: F401  (checks verl's version before registering:
from trace_rl.integrations.verl import trainer as _trainer  # noqa: F401  (registers trace_sync)
from trace_rl.integrations.verl.estimators import register_estimators

register_estimators()
