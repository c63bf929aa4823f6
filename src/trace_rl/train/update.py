"""Policy update on rollout trees: tree-aware advantages -> per-token advantages -> clipped surrogate.

Each root-to-leaf path is one training sequence (prompt ids + the sampled turn ids, never re-tokenised);
model tokens carry the advantage, tool/observation tokens are masked (trace_rl.advantages.token_advantages,
shared prefixes counted "per_path"). Sequences whose tokens all have (about, 1e-6) zero advantage contribute no gradient and
are dropped before the forward pass (they would only dilute token-mean aggregation). The log-probabilities
are recomputed under softmax(logits / temperature), the distribution the engine sampled from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_rl.advantages import grpo_advantages, token_advantages, tree_grpo_advantages, treerpo_advantages
from trace_rl.advantages.tokens import PathTokens
from trace_rl.tree import REWARD_ATOL, RolloutTree

ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {
    "grpo": grpo_advantages,
    "tree_grpo": tree_grpo_advantages,
    "treerpo": treerpo_advantages,
}


@dataclass(frozen=True)
class UpdateSettings:
    """Policy-update settings (see `trace_rl.train.config.OptimSection`); temperature is the sampling temperature
    at which log-probabilities are recomputed.
    """

    estimator: str = "treerpo"
    normalize_std: bool = True
    clip: float = 0.2
    kl_coef: float = 0.0
    loss_agg: str = "token-mean"
    epochs: int = 1
    minibatch: int = 32
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    micro_tokens: int = 4096


def training_rows(trees: Sequence[RolloutTree], settings: UpdateSettings) -> list[PathTokens]:
    """One PathTokens per leaf of every tree, with the estimator's advantages; rows whose token advantages are
    all within ``REWARD_ATOL`` (1e-6) of 0 are dropped (no gradient worth its compute, and not counted in the
    loss's per-row mean)."""
    try:
        estimate = ESTIMATORS[settings.estimator]
    except KeyError:
        raise ValueError(
            f"unknown estimator {settings.estimator!r}; choose {', '.join(ESTIMATORS)}"
        ) from None
    rows: list[PathTokens] = []
    for tree in trees:
        if tree.num_leaves == 0:
            continue
        adv = estimate(tree, normalize_std=settings.normalize_std)
        rows.extend(p for p in token_advantages(tree, adv) if np.any(np.abs(p.advantages) > REWARD_ATOL))
    return rows


def sequence_logprobs(
    model: Any, rows: Sequence[PathTokens], temperature: float, pad_id: int, span: int | None = None
) -> Any:
    """Log-probabilities (B, T) of each row's turn tokens under ``model``, 0-padded to T = ``span`` (default: the
    longest turn span of ``rows``; a given span must be at least that).

    Raises:
        ValueError: ``span`` shorter than a row's turn tokens.
    """
    import torch

    full = [np.concatenate([r.prompt_ids, r.token_ids]) for r in rows]
    width = max(len(f) for f in full)
    longest = max(len(r.token_ids) for r in rows)
    if span is None:
        span = longest
    elif span < longest:
        raise ValueError(f"span {span} is shorter than a row's {longest} turn tokens")
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    for i, f in enumerate(full):
        ids[i, : len(f)] = torch.as_tensor(f)
        att[i, : len(f)] = 1
    device = next(model.parameters()).device
    ids, att = ids.to(device), att.to(device)
    logits = model(input_ids=ids, attention_mask=att).logits.float() / temperature
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, W-1)
    out = torch.zeros((len(rows), span), dtype=logp.dtype, device=device)
    for i, r in enumerate(rows):
        p, t = len(r.prompt_ids), len(r.token_ids)
        out[i, :t] = logp[i, p - 1 : p - 1 + t]  # token at position p + j is predicted at p + j - 1
    return out


def _pad(arrays: Sequence[np.ndarray], width: int, dtype: Any) -> Any:
    import torch

    out = torch.zeros((len(arrays), width), dtype=dtype)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = torch.as_tensor(np.asarray(a))
    return out


TOKEN_STATS = ("clip_fraction", "approx_kl")  # means over a minibatch's masked-in tokens


def micro_batches(
    batch: Sequence[PathTokens], settings: UpdateSettings
) -> list[tuple[list[PathTokens], float, float]]:
    """Split a minibatch into forward passes of at most ``settings.micro_tokens`` padded tokens each.

    Returns (rows, loss scale, token share) per micro-batch: the scale makes the sum of the micro-batches'
    scaled losses equal the loss of the whole minibatch under ``settings.loss_agg`` (token-mean: its share of
    the minibatch's masked-in tokens; the per-sequence means: its share of the sequences, every micro-batch
    being padded to the minibatch's span), so gradient accumulation over them is exact up to rounding, and the
    token share weighs the token-mean statistics. Rows keep their order; a row longer than the limit gets a
    forward pass of its own. ``micro_tokens = 0`` gives one pass over the whole minibatch.
    """
    limit = settings.micro_tokens
    groups: list[list[PathTokens]] = []
    width = 0
    for row in batch:
        w = len(row.prompt_ids) + len(row.token_ids)
        if groups and limit > 0 and max(width, w) * (len(groups[-1]) + 1) > limit:
            groups.append([])
            width = 0
        if not groups:
            groups.append([])
        groups[-1].append(row)
        width = max(width, w)
    tokens = max(sum(float(r.loss_mask.sum()) for r in batch), 1.0)
    out = []
    for g in groups:
        share = sum(float(r.loss_mask.sum()) for r in g) / tokens
        scale = share if settings.loss_agg == "token-mean" else len(g) / len(batch)
        out.append((g, scale, share))
    return out


def _micro_loss(
    model: Any,
    micro: Sequence[PathTokens],
    span: int,
    settings: UpdateSettings,
    pad_id: int,
    ref_model: Any | None,
) -> tuple[Any, dict[str, Any]]:
    """`policy_loss` of one micro-batch, its (B, T) tensors padded to the whole minibatch's span T."""
    import torch

    from trace_rl.advantages.losses import policy_loss

    device = next(model.parameters()).device
    mask = _pad([r.loss_mask for r in micro], span, torch.float32).to(device)
    old = _pad([r.logprobs for r in micro], span, torch.float32).to(device)
    adv = _pad([r.advantages for r in micro], span, torch.float32).to(device)
    new = sequence_logprobs(model, micro, settings.temperature, pad_id, span)
    ref = None
    if settings.kl_coef > 0 and ref_model is not None:
        with torch.no_grad():
            ref = sequence_logprobs(ref_model, micro, settings.temperature, pad_id, span)
    return policy_loss(
        new,
        old,
        adv,
        mask,
        ref_logprobs=ref,
        kl_coef=settings.kl_coef if ref is not None else 0.0,
        clip_low=settings.clip,
        loss_agg=settings.loss_agg,  # type: ignore[arg-type]
    )


def policy_update(
    model: Any,
    optimizer: Any,
    trees: Sequence[RolloutTree],
    settings: UpdateSettings,
    *,
    pad_id: int,
    rng: np.random.Generator,
    ref_model: Any | None = None,
) -> dict[str, float]:
    """Clipped-surrogate update of ``model`` on the trees' paths (PPO/GRPO loss, trace_rl.advantages.losses).

    One optimizer step per minibatch of ``settings.minibatch`` paths; each minibatch's gradient is accumulated
    over forward passes of at most ``settings.micro_tokens`` padded tokens (`micro_batches`: the same gradient,
    a fraction of the activation memory).

    Returns:
        mean "loss", "pg_loss", "clip_fraction", "approx_kl", "grad_norm" over minibatches, plus "rows" (training
        sequences with non-zero advantage) and "tokens" (model tokens trained on).
    """
    import torch

    rows = training_rows(trees, settings)
    stats: dict[str, list[float]] = {}
    if not rows:
        return {"rows": 0.0, "tokens": 0.0}
    model.train()
    for _ in range(settings.epochs):
        order = rng.permutation(len(rows))
        for start in range(0, len(rows), settings.minibatch):
            batch = [rows[int(i)] for i in order[start : start + settings.minibatch]]
            span = max(len(r.token_ids) for r in batch)
            optimizer.zero_grad(set_to_none=True)
            step_stats: dict[str, float] = {}
            for micro, scale, token_share in micro_batches(batch, settings):
                loss, info = _micro_loss(model, micro, span, settings, pad_id, ref_model)
                (loss * scale).backward()  # gradients accumulate to those of the whole minibatch's loss
                for key, value in {"loss": loss.detach(), **info}.items():
                    weight = token_share if key in TOKEN_STATS else scale
                    step_stats[key] = step_stats.get(key, 0.0) + weight * float(value)
            grad = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
            optimizer.step()
            for key, value in {**step_stats, "grad_norm": float(grad)}.items():
                stats.setdefault(key, []).append(value)
    model.eval()
    out = {k: float(np.mean(v)) for k, v in stats.items()}
    out["rows"] = float(len(rows))
    out["tokens"] = float(sum(int(r.loss_mask.sum()) for r in rows))
    return out
