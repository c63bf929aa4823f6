"""The verl seam: every verl and TransferQueue name the adapter imports, in one module, behind a version check.

verl 0.7-0.9 moved and removed rollout and interaction classes (only ``AgentLoopBase`` and the trainer hooks
stayed), so the adapter's other modules import verl's names from here, never from verl directly. Importing this
module first checks ``verl.__version__`` against `VERL_RANGE` (an older release is refused, another supported one
than the tested `trace_rl.integrations.verl.VERL_VERSION` logs one warning line), then imports the names; a name
a release moved or removed raises `UnsupportedVersionError` naming the supported and tested releases, not an
ImportError from deep inside verl.
"""

from __future__ import annotations

from typing import Any

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
    from verl.plugin.platform import PlatformBase, PlatformRegistry
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import register_trainer
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.rollout import base as _rollout_base
    from verl.workers.rollout.base import BaseRollout
    from verl.workers.rollout.replica import RolloutMode, RolloutReplica, RolloutReplicaRegistry, TokenOutput
    from verl.workers.rollout.router import GlobalRequestLoadBalancer
except ImportError as exc:  # a release that moved one of them
    raise VERL_RANGE.moved(VERSION, getattr(exc, "name", None) or "a name the adapter imports", exc) from exc


def fsdp_engine_classes() -> dict[str, type]:
    """verl's FSDP training engines by model type (``language_model``, ``value_model``), from
    ``verl/workers/engine/fsdp/transformer_impl.py`` (imported on call: it pulls in peft and FSDP)."""
    try:
        from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead
    except ImportError as exc:
        raise VERL_RANGE.moved(VERSION, getattr(exc, "name", None) or "the FSDP engines", exc) from exc
    return {"language_model": FSDPEngineWithLMHead, "value_model": FSDPEngineWithValueHead}


def register_rollout_adapter(name: str, fqn: str) -> None:
    """Register a hybrid-mode rollout adapter class (``BaseRollout``, in the actor worker's process) under
    ``actor_rollout_ref.rollout.name = name``.

    verl 0.9.1 has no public call for this: its actor worker looks the class up with
    ``verl.workers.rollout.base.get_rollout_class(name, "async")`` in the module dict ``_ROLLOUT_REGISTRY``
    (vllm, sglang, trtllm only). This adds one entry, ``(name, "async") -> fqn``, to that dict; it is the one
    monkeypatch of verl the adapter makes (docs/integrations.md, "Running verl on CPU"), checked here against the
    dict's presence and shape.

    Raises:
        UnsupportedVersionError: the registry dict is gone or no longer keyed by (name, mode).
    """
    registry = getattr(_rollout_base, "_ROLLOUT_REGISTRY", None)
    if not isinstance(registry, dict) or ("vllm", "async") not in registry:
        raise VERL_RANGE.moved(
            VERSION,
            "verl.workers.rollout.base._ROLLOUT_REGISTRY",
            LookupError("no (name, mode) registry dict"),
        )
    registry[(name, "async")] = fqn


def set_process_group_backend(backend: str) -> None:
    """Make ``backend`` the default of ``verl.utils.distributed.initialize_global_process_group_ray``.

    verl 0.9.1's FSDP workers call it without a backend, and it builds ``cpu:gloo,{device}:{backend}``, which torch
    refuses when the device is ``cpu`` ("Duplicate device type cpu"). This sets the function's ``backend``
    keyword default (``None`` in verl) to ``backend`` (``"cpu:gloo"`` on CPU): the function object every importer
    shares, its body unchanged; an explicit backend (the checkpoint engine passes ``"cpu:gloo"``) still wins. The
    second of the two monkeypatches the adapter makes, only on the CPU platform (docs/integrations.md, "Running
    verl on CPU"); checked here against the function's signature.

    Raises:
        UnsupportedVersionError: the function is gone or its parameters are no longer (timeout_second, backend).
    """
    import inspect

    from verl.utils import distributed

    fn: Any = getattr(distributed, "initialize_global_process_group_ray", None)
    params = list(inspect.signature(fn).parameters) if fn is not None else []
    defaults = getattr(fn, "__defaults__", None)
    if params != ["timeout_second", "backend"] or defaults is None or len(defaults) != 2:
        raise VERL_RANGE.moved(
            VERSION,
            "initialize_global_process_group_ray(timeout_second=None, backend=None)",
            LookupError(f"found parameters {params}"),
        )
    fn.__defaults__ = (defaults[0], backend)


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
    "BaseRollout",
    "EngineRegistry",
    "GlobalRequestLoadBalancer",
    "PPOTrainerSync",
    "PlatformBase",
    "PlatformRegistry",
    "ReplayBuffer",
    "RolloutMode",
    "RolloutReplica",
    "RolloutReplicaRegistry",
    "TokenOutput",
    "UnsupportedVersionError",
    "core_algos",
    "fsdp_engine_classes",
    "register",
    "register_rollout_adapter",
    "register_trainer",
    "set_process_group_backend",
    "tq",
    "tu",
    "verl_version",
]
