"""The verl seam: every verl and TransferQueue name the adapter imports, in one module, behind a version check.

verl 0.7-0.9 moved and removed rollout and interaction classes (only ``AgentLoopBase`` and the trainer hooks
stayed), so the adapter's other modules import verl's names from here, never from verl directly. Importing this
module first checks ``verl.__version__`` against `VERL_RANGE` (an older release is refused, another supported one
than the tested `trace_rl.integrations.verl.VERL_VERSION` logs one warning line), then imports the names; a name
a release moved or removed raises `UnsupportedVersionError` naming the supported and tested releases, not an
ImportError from deep inside verl.
"""

from __future__ import annotations

import verl
from trace_rl.integrations.verl import VERL_RANGE
from trace_rl.integrations.versions import UnsupportedVersionError

VERSION = str(getattr(verl, "__version__", "unknown"))
VERL_RANGE.check(VERSION)

try:
    import transfer_queue as tq
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import register_trainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from verl.utils import tensordict_utils as tu
    from verl.workers.rollout.replica import TokenOutput
    from verl.workers.rollout.router import GlobalRequestLoadBalancer
except ImportError as exc:  # a release that moved one of them
    raise VERL_RANGE.moved(VERSION, getattr(exc, "name", None) or "a name the adapter imports", exc) from exc


def verl_version() -> str:
    """The installed verl's version string (checked against `VERL_RANGE` when this module was imported)."""
    return VERSION


__all__ = [
    "VERSION",
    "AgentLoopBase",
    "AgentLoopManagerTQ",
    "AgentLoopMetrics",
    "AgentLoopOutput",
    "AgentLoopWorkerTQ",
    "GlobalRequestLoadBalancer",
    "PPOTrainerSync",
    "ReplayBuffer",
    "TokenOutput",
    "UnsupportedVersionError",
    "core_algos",
    "register",
    "register_trainer",
    "tq",
    "tu",
    "verl_version",
]
