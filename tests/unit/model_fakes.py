"""Causal LMs that cannot run the packed forwards, for the fallback tests of the packed update
(`tests/unit/test_tree_packing.py`) and of the packed warm start (`tests/unit/test_sft_packing.py`)."""

from __future__ import annotations

import torch


class IgnoresMasks(torch.nn.Module):  # type: ignore[misc]
    """A causal LM whose forward drops a 4D mask and the position ids (a model that cannot take packed rows)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.inner.get_input_embeddings()

    def forward(self, input_ids, attention_mask=None, position_ids=None):  # type: ignore[no-untyped-def]
        if attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = None
        return self.inner(input_ids=input_ids, attention_mask=attention_mask)


class KeepsItsAttention(IgnoresMasks):
    """A causal LM that takes the 4D mask but runs its own attention whatever attention function it is given (so
    in a padding-free row a sequence sees the ones before it)."""

    def forward(self, **kwargs):  # type: ignore[no-untyped-def]
        asked, self.config._attn_implementation = self.config._attn_implementation, "sdpa"
        try:
            return self.inner(**kwargs)
        finally:
            self.config._attn_implementation = asked
