"""TreeRPO and Tree-GRPO as verl advantage estimators (``algorithm.adv_estimator=trace_treerpo`` or
``trace_tree_grpo``), registered with verl's own ``register_adv_est``.

verl calls a registered estimator with ``token_level_rewards`` (B, L), ``response_mask`` (B, L), ``index`` (B,)
(the prompt ``uid``) and ``config``, and expects ``(advantages, returns)``, both (B, L). Those arguments carry no
tree, so `trace_rl.integrations.verl.trainer.TraceTrainer` fetches each row's `RowLayout` (the TransferQueue fields
``trace_sessions`` and ``trace_turn_lens`` that the TRACE agent loop writes) and hands them to the estimator
through `tree_layouts` for the duration of verl's own ``_compute_advantage``. Called without layouts (another
trainer), the estimators raise instead of guessing a tree. The arithmetic is `layout.tree_token_advantages`:
the same numbers as `trace_rl.advantages.treerpo_advantages` / `tree_grpo_advantages` on the same tree.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from trace_rl.integrations.verl.layout import RowLayout, tree_token_advantages

TRACE_ESTIMATORS = {"trace_treerpo": "treerpo", "trace_tree_grpo": "tree_grpo"}

_LAYOUTS: contextvars.ContextVar[Sequence[RowLayout | None] | None] = contextvars.ContextVar(
    "trace_rl_verl_layouts", default=None
)


@contextlib.contextmanager
def tree_layouts(layouts: Sequence[RowLayout | None]) -> Iterator[None]:
    """Make `layouts` (one per row of the batch verl is about to score, None for padding rows) visible to the
    registered estimators inside the block."""
    token = _LAYOUTS.set(list(layouts))
    try:
        yield
    finally:
        _LAYOUTS.reset(token)


def _estimate(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[object] | None,
    config: Any,
    layouts: Sequence[RowLayout | None] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    layouts = layouts if layouts is not None else _LAYOUTS.get()
    if layouts is None:
        raise ValueError(
            f"adv_estimator={name} needs each row's tree layout: run verl with "
            "trainer.v1.trainer_mode=trace_sync (trace_rl.integrations.verl.TraceTrainer), which provides it"
        )
    if index is None:
        raise ValueError(f"adv_estimator={name} needs index (the prompt uid of each row)")
    if len(layouts) != token_level_rewards.shape[0]:
        raise ValueError(f"{len(layouts)} row layouts for a batch of {token_level_rewards.shape[0]} rows")
    norm = True if config is None else bool(getattr(config, "norm_adv_by_std_in_grpo", True))
    rewards = token_level_rewards.detach().to(torch.float64).sum(dim=-1).cpu().numpy()
    adv = tree_token_advantages(
        layouts,
        list(np.asarray(index, dtype=object)),
        rewards,
        response_mask.detach().cpu().numpy(),
        estimator=TRACE_ESTIMATORS[name],
        normalize_std=norm,
    )
    out = torch.as_tensor(adv, dtype=torch.float32, device=token_level_rewards.device)
    return out, out.clone()


def compute_trace_treerpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[object] | None = None,
    config: Any = None,
    trace_layouts: Sequence[RowLayout | None] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TreeRPO advantages per token (Yang et al. 2025, arXiv 2506.05183, generalised to irregular trees;
    `trace_rl.advantages.treerpo_advantages`): every token of turn y gets A(y), masked tokens 0.

    Args:
        token_level_rewards: float (B, L); each row's sum is its terminal reward (KL-in-reward must be off).
        response_mask: (B, L) 1 on model tokens.
        index: (B,) prompt uid of each row.
        config: verl's ``algorithm`` config (reads ``norm_adv_by_std_in_grpo``).
        trace_layouts: (B,) row layouts; default: those set by `tree_layouts`.

    Returns:
        (advantages, returns), float32 (B, L), equal (outcome-only estimator, as verl's GRPO).

    Raises:
        ValueError: no layouts or index, or a batch whose rows do not form trees (`layout.tree_from_rows`).
    """
    return _estimate("trace_treerpo", token_level_rewards, response_mask, index, config, trace_layouts)


def compute_trace_tree_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[object] | None = None,
    config: Any = None,
    trace_layouts: Sequence[RowLayout | None] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tree-GRPO advantages per token (Ji et al. 2025, arXiv 2509.21240; `trace_rl.advantages.tree_grpo_advantages`):
    every model token of a row gets its leaf's A = intra-subtree + whole-tree normalised reward.

    Arguments, returns and errors as `compute_trace_treerpo_advantage`.
    """
    return _estimate("trace_tree_grpo", token_level_rewards, response_mask, index, config, trace_layouts)


def register_estimators() -> None:
    """Register both estimators with verl (idempotent: verl refuses a second, different function per name)."""
    from trace_rl.integrations.verl.compat import core_algos

    for name, fn in (
        ("trace_treerpo", compute_trace_treerpo_advantage),
        ("trace_tree_grpo", compute_trace_tree_grpo_advantage),
    ):
        if core_algos.ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            core_algos.register_adv_est(name)(fn)
