"""A training run's policy: `load_run_policy` loads it (`trace_rl.policy.load_policy`) and checks the run's config
against it (`check_context`), so that a setting only the loaded model can refuse is one line before anything is
generated; `policy_device` is where it runs, `policy_optimizer` what trains it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trace_rl.train.config import ConfigError, TrainConfig

__all__ = ["check_context", "load_run_policy", "policy_device", "policy_optimizer"]


def load_run_policy(cfg: TrainConfig, name: str | Path) -> Any:
    """`trace_rl.policy.load_policy` of ``name`` (``policy.name`` or a checkpoint's policy folder) at the run's
    seed, on the CPU, checked against ``cfg`` by `check_context`.

    Raises:
        ConfigError: see `check_context`; and what `load_policy` raises for an unknown or unreadable policy.
    """
    from trace_rl.policy import load_policy

    policy = load_policy(str(name), seed=cfg.seed)
    check_context(cfg, policy)
    return policy


def check_context(cfg: TrainConfig, policy: Any) -> None:
    """Refuse a ``sampling.max_new_tokens`` that no turn can reach: at least one prompt token and the turn's
    tokens must fit the policy's context (its model config's ``max_position_embeddings``; a model config without
    one is not checked). Without it a value such as 1e12 passes and every turn runs to the context limit.

    Raises:
        ConfigError: ``sampling.max_new_tokens`` >= the policy's context, naming the key and both numbers.
    """
    context = getattr(policy.model.config, "max_position_embeddings", None)
    wanted = cfg.sampling.max_new_tokens
    if isinstance(context, int) and wanted >= context:
        raise ConfigError(
            f"sampling.max_new_tokens: must be below the context of policy {cfg.policy.name} ({context} tokens, "
            f"its max_position_embeddings; a turn also holds its prompt), got {wanted}"
        )


def policy_optimizer(model: Any, cfg: TrainConfig) -> Any:
    """The RL policy's AdamW (betas 0.9, 0.95; ``optim.lr``, ``optim.weight_decay``)."""
    import torch

    return torch.optim.AdamW(
        model.parameters(), lr=cfg.optim.lr, betas=(0.9, 0.95), weight_decay=cfg.optim.weight_decay
    )


def policy_device(cfg: TrainConfig) -> str:
    """The torch device for the policy: ``cfg.device``, with "auto" = cuda when available, else cpu."""
    import torch

    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if cfg.device.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(cfg.device.partition(":")[2] or 0)
        if index >= count:
            raise ConfigError(
                f"device={cfg.device!r} but torch sees {count} CUDA device(s); use device=auto or cpu"
            )
    return cfg.device
