"""Policy-gradient losses as pure torch functions (the one module of `trace_rl.advantages` that imports torch).

Shapes: B sequences of T tokens (right-padded); `mask` is 1 (or True) on the tokens that count (model-sampled
tokens), 0 on padding, template, tool-result and observation tokens. All functions are differentiable in
`logprobs` and return a scalar loss to minimise.
"""

from __future__ import annotations

from typing import Literal

import torch

LossAgg = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
LOSS_AGGS: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


def _check_2d(name: str, x: torch.Tensor, shape: torch.Size | None = None) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T), got {tuple(x.shape)}")
    if shape is not None and x.shape != shape:
        raise ValueError(f"{name} must have shape {tuple(shape)} like logprobs, got {tuple(x.shape)}")


def aggregate_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAgg = "token-mean",
    *,
    scale_tokens: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss (B, T) to a scalar over the tokens where mask is set.

    Modes (names as in verl's `agg_loss`):
        token-mean: sum_{b,t} m l / sum_{b,t} m; every token weighs the same (DAPO, arXiv 2503.14476, Sec. 3.3).
        seq-mean-token-sum: (1/B) sum_b sum_t m l; long sequences weigh more.
        seq-mean-token-mean: (1/B) sum_b (sum_t m l / sum_t m); the original GRPO average
            (arXiv 2402.03300, Eq. 3).
        seq-mean-token-sum-norm: (1/B) sum_b sum_t m l / L, a constant length normaliser L (Dr. GRPO,
            arXiv 2503.20783, Sec. 3.1: the generation budget). L = ``scale_tokens``; None falls back to the
            padded width T (verl's default when its ``loss_scale_factor`` is unset), which varies with the batch.
    Sequences or batches without any masked-in token contribute 0 (never NaN). Masked-out positions are
    dropped with `torch.where`, not multiplied by 0, so a NaN or inf there (padding) neither reaches the loss
    nor its gradient (which is exactly 0 at those positions).

    Raises:
        ValueError: shapes differ or are not (B, T), or an unknown mode.
    """
    _check_2d("per_token", per_token)
    _check_2d("mask", mask, per_token.shape)
    m = mask.to(per_token.dtype)
    masked = torch.where(
        mask != 0, per_token * m, torch.zeros((), dtype=per_token.dtype, device=per_token.device)
    )
    if mode == "token-mean":
        return masked.sum() / m.sum().clamp(min=1.0)
    if mode == "seq-mean-token-sum":
        return masked.sum(dim=-1).mean()
    if mode == "seq-mean-token-mean":
        return (masked.sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)).mean()
    if mode == "seq-mean-token-sum-norm":
        if scale_tokens is not None and not scale_tokens > 0:
            raise ValueError(f"scale_tokens must be > 0, got {scale_tokens}")
        return masked.sum(dim=-1).mean() / (scale_tokens if scale_tokens is not None else per_token.shape[-1])
    raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {', '.join(LOSS_AGGS)}")


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, *, clamp: float = 10.0) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref) on tokens sampled from pi.

    k3 = exp(d) - d - 1 with d = log pi_ref - log pi (>= 0, unbiased, low variance; Schulman 2020, "Approximating
    KL divergence"; the per-token KL penalty of GRPO, arXiv 2402.03300, Eq. 4). As in verl's "low_var_kl", d is
    clamped to [-20, 20] before the exponential and the result to [0, clamp].

    Args:
        logprobs, ref_logprobs: (B, T) log-probabilities of the sampled tokens under pi and pi_ref.

    Returns:
        (B, T) per-token KL estimates (not masked; pass them through `aggregate_loss`).
    """
    _check_2d("logprobs", logprobs)
    _check_2d("ref_logprobs", ref_logprobs, logprobs.shape)
    d = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1.0).clamp(0.0, clamp)


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped surrogate loss of PPO/GRPO.

    l_t = -min(rho_t A_t, clip(rho_t, 1 - clip_low, 1 + clip_high) A_t), rho_t = exp(logprobs - old_logprobs).
    Source: PPO (Schulman et al. 2017, arXiv 1707.06347, Eq. 7) as used token-wise by GRPO (arXiv 2402.03300,
    Eq. 3); a separate `clip_high` is DAPO's clip-higher (arXiv 2503.14476, Sec. 3.1).

    Args:
        logprobs: (B, T) current policy log-probs of the sampled tokens (requires grad).
        old_logprobs: (B, T) behaviour policy log-probs (detached).
        advantages: (B, T) per-token advantages.
        clip_low, clip_high: clip range; clip_high defaults to clip_low.

    Returns:
        (per-token loss (B, T), clipped (B, T) bool: the clipped branch is the active one).

    Raises:
        ValueError: shapes differ or are not (B, T), or negative clip ranges.
    """
    _check_2d("logprobs", logprobs)
    _check_2d("old_logprobs", old_logprobs, logprobs.shape)
    _check_2d("advantages", advantages, logprobs.shape)
    high = clip_low if clip_high is None else clip_high
    if clip_low < 0 or high < 0 or clip_low >= 1:
        raise ValueError(
            f"clip ranges must satisfy 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {high}"
        )
    ratio = torch.exp(logprobs - old_logprobs.detach())
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    return loss, clipped < unclipped


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    loss_agg: LossAgg = "token-mean",
    scale_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate plus an optional k3 KL penalty, aggregated with `loss_agg`.

    loss = agg(l_clip) + kl_coef * agg(k3), both over the masked-in tokens (GRPO, arXiv 2402.03300, Eq. 3).

    Args:
        logprobs, old_logprobs, advantages, mask: (B, T), see `clipped_surrogate` and `aggregate_loss`.
        ref_logprobs: (B, T) reference-policy log-probs; required when kl_coef > 0.
        kl_coef: weight of the KL penalty (0 disables it).
        scale_tokens: the constant L of "seq-mean-token-sum-norm" (see `aggregate_loss`).

    Returns:
        (scalar loss, stats): detached scalars "pg_loss", "clip_fraction" (share of masked-in tokens on the
        clipped branch), "approx_kl" (mean of (log pi - log pi_old)^2 / 2 over masked-in tokens), and "kl" when a
        penalty is used.

    Non-finite values at masked-out positions (padding) are ignored: the loss, the stats and the gradient
    are as if they were 0 there, and the gradient at those positions is exactly 0.

    Raises:
        ValueError: shape mismatches, kl_coef < 0, or kl_coef > 0 without ref_logprobs.
    """
    _check_2d("logprobs", logprobs)
    _check_2d("old_logprobs", old_logprobs, logprobs.shape)
    _check_2d("advantages", advantages, logprobs.shape)
    _check_2d("mask", mask, logprobs.shape)
    if ref_logprobs is not None:
        _check_2d("ref_logprobs", ref_logprobs, logprobs.shape)
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    # Padding may hold anything (NaN, -inf): replace masked-out inputs by 0 before any arithmetic, so that
    # neither the loss, the stats nor the gradient see them (the gradient there is exactly 0).
    keep = mask != 0
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    logprobs = torch.where(keep, logprobs, zero)
    old_logprobs = torch.where(keep, old_logprobs, zero)
    advantages = torch.where(keep, advantages, zero)
    if ref_logprobs is not None:
        ref_logprobs = torch.where(keep, ref_logprobs, zero)
    per_token, clipped = clipped_surrogate(
        logprobs, old_logprobs, advantages, clip_low=clip_low, clip_high=clip_high
    )
    pg = aggregate_loss(per_token, mask, loss_agg, scale_tokens=scale_tokens)
    m = mask.to(logprobs.dtype)
    n_tokens = m.sum().clamp(min=1.0)
    log_ratio = (logprobs - old_logprobs).detach()
    stats = {
        "pg_loss": pg.detach(),
        "clip_fraction": (clipped.to(m.dtype) * m).sum() / n_tokens,
        "approx_kl": (0.5 * log_ratio.square() * m).sum() / n_tokens,
    }
    loss = pg
    if kl_coef > 0:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs")
        kl = aggregate_loss(kl_k3(logprobs, ref_logprobs), mask, loss_agg, scale_tokens=scale_tokens)
        loss = loss + kl_coef * kl
        stats["kl"] = kl.detach()
    return loss, stats
