"""`AsyncGRPOTrainer` without CUDA: the two places where TRL 1.16's trainer needs CUDA, replaced by PyTorch code.

Measured on this project's CPU machines (TRL 1.16.0, torch 2.13.0+cpu, transformers 5.24.0), the stock trainer
cannot train without CUDA, for two reasons and only these two:

1. its constructor calls ``trl.trainer.utils.get_peak_flops_per_device`` (for MFU metrics), which calls
   ``torch.cuda.get_device_name`` unconditionally: ``AssertionError: Torch not compiled with CUDA enabled``;
2. it loads the model with the attention implementation ``"tree_fa3"``: each segment of TRL's packed prefix trie
   (`packing.TreeRow`) attends, causally, to the keys and values of its root-to-segment path, gathered by
   ``tree_kv_index``, through ``flash_attn_varlen_func`` from the Hugging Face kernel hub
   (``kernels.get_kernel("kernels-community/flash-attn3")``): a download at run time and a CUDA (Hopper) kernel.

`enable_cpu_async_grpo()` makes the trainer module use ``None`` peak FLOPs off CUDA (MFU metrics off, as TRL does
for unknown devices) and register `sdpa_tree_attention`, the same computation in plain PyTorch, in place of the
FA3 kernel. Nothing else of the trainer changes. Call it once before constructing the trainer.
Query i of a segment of length Lq whose path has Lk keys sees keys 0 .. Lk - Lq + i (FA's bottom-right causal
alignment): TRL's trie is `trace_rl.policy.segments.TreeSpans`' layout, and `sdpa_tree_attention` runs it through
the native update's kernel (`trace_rl.policy.segments.tree_attention`), so the two trainers share one trie format
and one kernel. `tests/trl/test_tree_attention.py` checks that packed log-probabilities equal separate forwards.
"""

from __future__ import annotations

from typing import Any

import torch

from trace_rl.policy.segments import TreeSpans, tree_attention


def sdpa_tree_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    *,
    tree_kv_index: torch.Tensor,
    tree_cu_seqlens_q: torch.Tensor,
    tree_cu_seqlens_k: torch.Tensor,
    tree_max_seqlen_q: int | None = None,
    tree_max_seqlen_k: int | None = None,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over a packed prefix trie (transformers `AttentionInterface` signature): TRL's trie, which is
    `trace_rl.policy.segments.TreeSpans`' layout, through the kernel the native update runs,
    `trace_rl.policy.segments.tree_attention`.

    Args:
        query: (1, H, N, D) the N packed tokens' queries; key, value: (1, H_kv, N, D), H a multiple of H_kv.
        tree_kv_index: int64 (K,) packed positions of every segment's root-to-segment path, laid end to end.
        tree_cu_seqlens_q: int32 (S + 1,) segment boundaries in the packed tokens.
        tree_cu_seqlens_k: int32 (S + 1,) path boundaries in ``tree_kv_index``.
        scaling: softmax scale (default D ** -0.5).

    Returns:
        ((1, N, H, D) attention output, None), as transformers' attention functions return.

    Raises:
        NotImplementedError: sliding-window attention or logit soft-capping (not used by the models it serves).
        ValueError: a segment's path that does not end with the segment's own tokens.
    """
    if sliding_window or softcap:
        raise NotImplementedError("sdpa_tree_attention supports neither sliding windows nor soft-capping")
    spans = TreeSpans(tree_kv_index, tree_cu_seqlens_q.tolist(), tree_cu_seqlens_k.tolist())
    return tree_attention(query, key, value, spans.chains(query.device), scaling, 0.0), None


def register_sdpa_tree_attention() -> None:
    """Register `sdpa_tree_attention` under TRL's tree-attention name (``"tree_fa3"`` in TRL 1.16).

    Raises:
        UnsupportedVersionError (`trace_rl.integrations.trl.compat`): TRL is missing, outside the supported
            releases, or has no tree-attention name.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    from trace_rl.integrations.trl.compat import tree_attention_name

    name = tree_attention_name()
    AttentionInterface.register(name, sdpa_tree_attention)
    AttentionMaskInterface.register(name, lambda **kwargs: None)


def enable_cpu_async_grpo() -> None:
    """Let TRL 1.16's `AsyncGRPOTrainer` train without CUDA (module docstring); idempotent, process-wide.

    Patches two names of ``trl.experimental.async_grpo.async_grpo_trainer``: ``register_tree_attention`` (now
    registers `sdpa_tree_attention` under TRL's name) and ``get_peak_flops_per_device`` (None off CUDA).

    Raises:
        UnsupportedVersionError (`trace_rl.integrations.trl.compat`, a RuntimeError): a TRL outside the supported
            releases or without those names (the message names the supported and tested releases).
    """
    import torch

    from trace_rl.integrations.trl.compat import require_trainer_names

    trainer_module: Any = require_trainer_names("register_tree_attention", "get_peak_flops_per_device")
    original = getattr(trainer_module, "_trace_rl_peak_flops", trainer_module.get_peak_flops_per_device)

    def peak_flops(accelerator: Any, dtype: str) -> float | None:
        if getattr(accelerator.device, "type", "cpu") != "cuda" or not torch.cuda.is_available():
            return None
        return original(accelerator, dtype)  # type: ignore[no-any-return]

    trainer_module._trace_rl_peak_flops = original
    trainer_module.get_peak_flops_per_device = peak_flops
    trainer_module.register_tree_attention = register_sdpa_tree_attention
    register_sdpa_tree_attention()
