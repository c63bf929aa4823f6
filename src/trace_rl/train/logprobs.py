"""Log-probabilities of training paths recomputed under the policy: one padded row per path, at the sampling
temperature, with half-precision logits upcast to float32 before the softmax (`sequence_logprobs`, `upcast`;
the tree-packed forward of `trace_rl.train.packing` reads the same values from packed rows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trace_rl.advantages.tokens import PathTokens


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
    logits = upcast(model(input_ids=ids, attention_mask=att).logits) / temperature
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, W-1)
    out = torch.zeros((len(rows), span), dtype=logp.dtype, device=device)
    for i, r in enumerate(rows):
        p, t = len(r.prompt_ids), len(r.token_ids)
        out[i, :t] = logp[i, p - 1 : p - 1 + t]  # token at position p + j is predicted at p + j - 1
    return out


def upcast(x: Any) -> Any:
    """``x`` in float32 at least (half-precision logits are upcast before the softmax; float64 stays float64)."""
    import torch

    return x.to(torch.promote_types(x.dtype, torch.float32))
