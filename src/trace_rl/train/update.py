"""Policy update on rollout trees: tree-aware advantages -> per-token advantages -> clipped surrogate.

Each root-to-leaf path is one training sequence (prompt ids + the sampled turn ids, never re-tokenised);
model tokens carry the advantage, tool/observation tokens are masked (trace_rl.advantages.token_advantages,
shared prefixes counted "per_path"). The log-probabilities are recomputed under softmax(logits / temperature),
the distribution the engine sampled from.

Loss normalisation follows verl's `agg_loss` over the whole minibatch (``zero_advantage_rows="count"``, the
default): a path whose token advantages are all (about, 1e-6) zero still counts in the denominator, its tokens
for token-mean and its sequence for the seq-mean modes, so a step's gradient shrinks with its share of unmixed
groups, as in verl and TRL. Its forward pass is skipped (it contributes 0 to the numerator) unless a KL penalty
needs it. ``zero_advantage_rows="drop"`` removes such paths before the loss (the denominator counts only paths
with signal), which makes every step's gradient the same size whatever its share of unmixed groups.

Optimisation is equal across methods: ``minibatches`` optimizer steps per epoch whatever the number of paths
(paths split evenly in a random order), so a method that keeps more paths does not also get more optimizer steps.

The forward passes are tree-packed by default (``packing="tree"``, `trace_rl.train.packing`): the paths of one
prompt in a minibatch go through the model as one packed row in which every distinct prefix appears once, with
attention that lets a token see only its own ancestry (eager: the rows end to end without padding, along each
trie's chains; compiled: a dense ancestry mask) and position ids that restart per path, so each path's
log-probabilities, and therefore the loss and its gradient, are those of the padded update (``packing="none"``: one
row per path, padded to the longest of its pass) up to floating-point rounding. A model whose attention cannot take
such a mask gets the padded update, and one that takes the mask but not the chains the mask: the model's log-prob
strategy (`trace_rl.policy.logprobs`), chosen once per model with one log line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trace_rl.advantages import grpo_advantages, token_advantages, tree_grpo_advantages, treerpo_advantages
from trace_rl.advantages.tokens import PathTokens
from trace_rl.policy.compiled import compile_failure, compiled, strict
from trace_rl.policy.logprobs import logprob_strategy
from trace_rl.spec import UpdateSpec
from trace_rl.train.logprobs import sequence_logprobs
from trace_rl.train.packing import (
    CHAIN_ROW_TOKENS,
    ROW_TOKENS,
    packed_logprobs,
    plan_packed_passes,
    tree_mask_support,
    update_strategy,
)
from trace_rl.tree import REWARD_ATOL, RolloutTree

ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {
    "grpo": grpo_advantages,
    "tree_grpo": tree_grpo_advantages,
    "treerpo": treerpo_advantages,
}


def has_signal(row: PathTokens) -> bool:
    """Whether any token advantage of a path is farther than ``REWARD_ATOL`` (1e-6) from 0."""
    return bool(np.any(np.abs(row.advantages) > REWARD_ATOL))


def training_rows(trees: Sequence[RolloutTree], settings: UpdateSpec) -> list[PathTokens]:
    """The paths of `path_rows` that carry a gradient signal (`has_signal`); the others are dropped."""
    return [r for r in path_rows(trees, settings) if has_signal(r)]


def path_rows(trees: Sequence[RolloutTree], settings: UpdateSpec) -> list[PathTokens]:
    """One PathTokens per leaf of every tree (root-to-leaf path), with the estimator's token advantages.

    Raises:
        ValueError: unknown estimator.
    """
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
        rows.extend(token_advantages(tree, adv))
    return rows


def _pad(arrays: Sequence[np.ndarray], width: int, dtype: Any) -> Any:
    import torch

    out = torch.zeros((len(arrays), width), dtype=dtype)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = torch.as_tensor(np.asarray(a))
    return out


TOKEN_STATS = ("clip_fraction", "approx_kl")  # means over a minibatch's masked-in tokens


def micro_batches(
    batch: Sequence[PathTokens],
    settings: UpdateSpec,
    *,
    total_tokens: float | None = None,
    total_rows: int | None = None,
) -> list[tuple[list[PathTokens], float, float]]:
    """Split a minibatch into forward passes of at most ``settings.micro_tokens`` padded tokens each.

    Returns (rows, loss scale, token share) per micro-batch: the scale makes the sum of the micro-batches'
    scaled losses equal the loss of the whole minibatch under ``settings.loss_agg`` (token-mean: its share of
    the minibatch's masked-in tokens; the per-sequence means: its share of the sequences, every micro-batch
    being padded to the minibatch's span), so gradient accumulation over them is exact up to rounding, and the
    token share weighs the token-mean statistics. Rows keep their order; a row longer than the limit gets a
    forward pass of its own. ``micro_tokens = 0`` gives one pass over the whole minibatch.

    ``total_tokens`` / ``total_rows`` (default: those of ``batch``) are the minibatch's denominators when it
    holds paths that are not forwarded (zero-advantage paths under ``zero_advantage_rows="count"``): their
    tokens and sequences count in the loss's mean but add 0 to its sum.
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
    return [(g, *_pass_weights(g, batch, settings, total_tokens, total_rows)) for g in groups]


def _pass_weights(
    group: Sequence[PathTokens],
    batch: Sequence[PathTokens],
    settings: UpdateSpec,
    total_tokens: float | None,
    total_rows: int | None,
) -> tuple[float, float]:
    """(loss scale, token share) of a forward pass over ``group`` within the minibatch ``batch`` (`micro_batches`)."""
    tokens = max(sum(float(r.loss_mask.sum()) for r in batch) if total_tokens is None else total_tokens, 1.0)
    count = max(len(batch) if total_rows is None else total_rows, 1)
    share = sum(float(r.loss_mask.sum()) for r in group) / tokens
    scale = share if settings.loss_agg == "token-mean" else len(group) / count
    return scale, share


def forward_passes(
    batch: Sequence[PathTokens],
    settings: UpdateSpec,
    *,
    packed: bool,
    total_tokens: float | None = None,
    total_rows: int | None = None,
    chains: bool = False,
    row_tokens: int | None = None,
) -> list[tuple[list[PathTokens], list[list[int]] | None, float, float, int]]:
    """The forward passes of a minibatch: (paths, packed rows or None, loss scale, token share, computed tokens).

    ``packed``: passes of `trace_rl.train.packing.plan_packed_passes` (packed rows of one prompt each, given as
    lists of indices into the pass's paths, rows of at most `ROW_TOKENS` tokens; computed tokens = packed rows x
    longest packed row, or with ``chains``, the rows run end to end without padding, rows of at most
    `CHAIN_ROW_TOKENS`, the rows' own tokens; ``row_tokens`` another cap); otherwise those of
    `micro_batches` (None; computed tokens = rows x longest row). Scale and share as in `micro_batches`, so both
    give the minibatch's loss and gradient.
    """
    if not packed:
        return [
            (g, None, scale, share, len(g) * max(len(r.prompt_ids) + len(r.token_ids) for r in g))
            for g, scale, share in micro_batches(
                batch, settings, total_tokens=total_tokens, total_rows=total_rows
            )
        ]
    out: list[tuple[list[PathTokens], list[list[int]] | None, float, float, int]] = []
    if row_tokens is None:
        row_tokens = CHAIN_ROW_TOKENS if chains else ROW_TOKENS
    for p in plan_packed_passes(batch, settings.micro_tokens, row_tokens):
        group = [batch[i] for i in p.paths]
        out.append(
            (
                group,
                p.rows,
                *_pass_weights(group, batch, settings, total_tokens, total_rows),
                p.row_tokens if chains else p.tokens,
            )
        )
    return out


def _micro_loss(
    model: Any,
    micro: Sequence[PathTokens],
    span: int,
    settings: UpdateSpec,
    pad_id: int,
    ref_model: Any | None,
    packed_rows: Sequence[Sequence[int]] | None = None,
    chains: bool = False,
    temperature: float = 1.0,
) -> tuple[Any, dict[str, Any]]:
    """`policy_loss` of one micro-batch, its (B, T) tensors padded to the whole minibatch's span T; log-probs from
    packed rows (`packed_logprobs`, without padding with ``chains``) when ``packed_rows`` is given (the reference
    model's too, if it supports it)."""
    import torch

    from trace_rl.advantages.losses import policy_loss

    device = next(model.parameters()).device
    mask = _pad([r.loss_mask for r in micro], span, torch.float32).to(device)
    old = _pad([r.logprobs for r in micro], span, torch.float32).to(device)
    adv = _pad([r.advantages for r in micro], span, torch.float32).to(device)
    new = _logprobs(model, micro, packed_rows, temperature, pad_id, span, chains)
    ref = None
    if settings.kl_coef > 0 and ref_model is not None:
        with torch.no_grad():
            ref_rows = packed_rows if packed_rows is not None and tree_mask_support(ref_model) else None
            ref_chains = chains and ref_rows is not None and logprob_strategy(ref_model).name == "chains"
            ref = _logprobs(ref_model, micro, ref_rows, temperature, pad_id, span, ref_chains)
    return policy_loss(
        new,
        old,
        adv,
        mask,
        ref_logprobs=ref,
        kl_coef=settings.kl_coef if ref is not None else 0.0,
        clip_low=settings.clip,
        loss_agg=settings.loss_agg,  # type: ignore[arg-type]
        scale_tokens=float(settings.loss_scale_tokens) if settings.loss_scale_tokens > 0 else None,
    )


def _logprobs(
    model: Any,
    rows: Sequence[PathTokens],
    packed_rows: Sequence[Sequence[int]] | None,
    temperature: float,
    pad_id: int,
    span: int,
    chains: bool = False,
) -> Any:
    if packed_rows is None:
        return sequence_logprobs(model, rows, temperature, pad_id, span)
    return packed_logprobs(model, rows, packed_rows, temperature, pad_id, span, chains=chains)


def minibatch_split(n: int, settings: UpdateSpec, rng: np.random.Generator) -> list[np.ndarray]:
    """Indices of n paths per optimizer step of one epoch, in a random order from ``rng``.

    ``minibatches`` > 0: exactly that many minibatches, sizes differing by at most one (some empty when
    n < minibatches: an optimizer step with a zero gradient, as in verl); otherwise ceil(n / minibatch)
    minibatches of ``minibatch`` paths (the last one smaller).
    """
    order = rng.permutation(n)
    if settings.minibatches > 0:
        return [np.asarray(c, dtype=np.int64) for c in np.array_split(order, settings.minibatches)]
    return [order[s : s + settings.minibatch] for s in range(0, n, settings.minibatch)]


def policy_update(
    model: Any,
    optimizer: Any,
    trees: Sequence[RolloutTree],
    settings: UpdateSpec,
    *,
    pad_id: int,
    rng: np.random.Generator,
    ref_model: Any | None = None,
    temperature: float = 1.0,
    strategy: str | None = None,
    row_tokens: int | None = None,
) -> dict[str, float]:
    """Clipped-surrogate update of ``model`` on the trees' paths (PPO/GRPO loss, trace_rl.advantages.losses).

    ``settings``: `TraceSpec.resolved_update`'s; ``temperature``: the sampling's, the log-probabilities' too.

    ``epochs`` x ``minibatches`` optimizer steps (`minibatch_split`), whatever the number of paths; each
    minibatch's loss is normalised over all its paths under ``zero_advantage_rows="count"`` (verl's `agg_loss`)
    or over its paths with signal only under "drop", and its gradient is accumulated over forward passes of at
    most ``settings.micro_tokens`` computed tokens (`forward_passes`: the same gradient, a fraction of the
    activation memory), tree-packed under ``settings.packing="tree"`` when the model supports it
    (`trace_rl.train.packing`), padded otherwise; through ``torch.compile`` under ``settings.compile``
    (`trace_rl.policy.compiled`: the same loss and gradient up to float32 rounding). How the log-probabilities are
    computed is the model's log-prob strategy, chosen once per model (`trace_rl.train.packing.update_strategy`);
    ``strategy`` caps it and ``row_tokens`` sets the packed rows' cap (benchmarks compare the ways so). A minibatch with nothing to forward still takes its optimizer step
    with a zero gradient (Adam's moments keep moving, as in verl), so every method takes the same number of steps.

    Raises:
        RuntimeError: ``settings.compile`` and torch.compile cannot compile the model (no C++ compiler, an
            unsupported model, its recompile limit; the message names ``optim.compile``): usually on the first
            minibatch, but a recompile for a new shape can fail after earlier optimizer steps.

    Returns:
        mean "loss", "pg_loss", "clip_fraction", "approx_kl", "grad_norm" (and "ref_kl", the k3 KL to
        ``ref_model``, when ``settings.kl_coef`` > 0) over minibatches that had paths to forward, plus "paths" (root-to-leaf paths of the trees), "rows" (paths with a non-zero advantage),
        "tokens" (model tokens of those rows), "loss_tokens" (model tokens in the loss denominators, all epochs
        counted once), "optimizer_steps", "adv_sq" (sum over paths of the squared token advantages on model
        tokens, the gradient-signal numerator of `trace_rl.metrics.signal_per_token`), "packed" (1 when the
        forward passes were tree-packed, 0 when padded) and "forward_tokens" (tokens the policy's forward passes
        computed, padding included, summed over epochs).
    """
    import torch

    if settings.loss_agg == "seq-mean-token-sum-norm" and settings.loss_scale_tokens <= 0:
        raise ValueError("loss_scale_tokens (Dr. GRPO's L) must be > 0: TraceSpec.resolved_update sets it")
    paths = path_rows(trees, settings)
    signal = [has_signal(r) for r in paths]
    kl_active = settings.kl_coef > 0 and ref_model is not None
    # the paths in the loss (all under "count", those with signal under "drop"), and which of them need a forward
    keep = [i for i, s in enumerate(signal) if s or settings.zero_advantage_rows == "count"]
    rows = [paths[i] for i in keep]
    live = [signal[i] or kl_active for i in keep]
    stats: dict[str, list[float]] = {}
    steps = 0
    computed = 0
    # eager: the packed rows without padding, attention along each trie's chains; compiled: the dense ancestry mask
    way = update_strategy(model, settings.packing, settings.compile, strategy) if any(live) else "padded"
    packed, chains = way != "padded", way == "chains"
    net = compiled(model) if settings.compile else model  # the policy's forward; its weights are model's
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    for _ in range(settings.epochs):
        for chunk in minibatch_split(len(rows), settings, rng):
            batch = [rows[int(i)] for i in chunk]
            forward = [rows[int(i)] for i in chunk if live[int(i)]]
            optimizer.zero_grad(set_to_none=True)
            step_stats: dict[str, float] = {}
            if forward:
                span = max(len(r.token_ids) for r in forward)
                passes = forward_passes(
                    forward,
                    settings,
                    packed=packed,
                    total_tokens=sum(float(r.loss_mask.sum()) for r in batch),
                    total_rows=len(batch),
                    chains=chains,
                    row_tokens=row_tokens,
                )
                for micro, packed_rows, scale, token_share, tokens in passes:
                    computed += tokens
                    try:  # the backward too: inductor compiles it on its first call
                        with strict() if settings.compile else contextlib.nullcontext():
                            loss, info = _micro_loss(
                                net,
                                micro,
                                span,
                                settings,
                                pad_id,
                                ref_model,
                                packed_rows,
                                chains,
                                temperature,
                            )
                            (loss * scale).backward()  # gradients accumulate to the whole minibatch's loss's
                    except Exception as err:
                        if settings.compile and (failure := compile_failure(err, "optim.compile")):
                            raise failure from err
                        raise
                    for key, value in {"loss": loss.detach(), **info}.items():
                        weight = token_share if key in TOKEN_STATS else scale
                        step_stats[key] = step_stats.get(key, 0.0) + weight * float(value)
            for p in params:  # no signal in this minibatch: the step still happens, with a zero gradient
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            grad = torch.nn.utils.clip_grad_norm_(params, settings.max_grad_norm)
            optimizer.step()
            steps += 1
            if forward:
                for key, value in {**step_stats, "grad_norm": float(grad)}.items():
                    stats.setdefault(key, []).append(value)
    model.eval()
    out = {("ref_kl" if k == "kl" else k): float(np.mean(v)) for k, v in stats.items()}
    kept = [r for r, s in zip(paths, signal, strict=True) if s]
    out["paths"] = float(len(paths))
    out["rows"] = float(len(kept))
    out["tokens"] = float(sum(int(r.loss_mask.sum()) for r in kept))
    out["loss_tokens"] = float(sum(int(r.loss_mask.sum()) for r in rows))
    out["optimizer_steps"] = float(steps)
    out["adv_sq"] = float(sum(float(np.sum(np.square(r.advantages) * r.loss_mask)) for r in paths))
    out["packed"] = float(packed)
    out["forward_tokens"] = float(computed)
    return out
