"""The MiniLM feature block of the convex predictor: a frozen encoder's embedding of each text's prompt block.

The mean-pooled all-MiniLM-L6-v2 embedding (:func:`minilm_encoder`; torch is imported only when one is built) of
the text up to its first turn marker, cached per prompt block: a prefix shares its prompt's embedding, and its
turns reach the head through the n-gram counts. The cache holds one embedding per distinct prompt (bounded by the
training pool) and can be filled ahead of time (:meth:`MinilmBlock.prepare`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from trace_rl.predictor.base import validate_texts
from trace_rl.predictor.blocks.base import FeatureBlock, FloatArray, prompt_block

if TYPE_CHECKING:
    from trace_rl.predictor.convex_config import ConvexConfig


class MinilmBlock(FeatureBlock):
    """The frozen encoder's embedding of each text's prompt block, dense float64 (N x H).

    Raises:
        ValueError: built without an ``encoder`` (``texts -> float (n, H)``).
    """

    name = "minilm"

    def __init__(self, owner: str, config: ConvexConfig, **inputs: Any) -> None:
        super().__init__(owner, config)
        self.encoder: Any = inputs.get("encoder")
        if self.encoder is None:
            raise ValueError(f"features={config.features!r} needs an encoder")
        self.cache: dict[str, np.ndarray] = {}

    def columns(self, texts: list[str], rows: FloatArray | None = None) -> Any:
        """The embedding of each text's prompt block, float64 (N, H), cached per prompt block."""
        keys = [prompt_block(t) for t in texts]
        missing = [k for k in dict.fromkeys(keys) if k not in self.cache]
        for lo in range(0, len(missing), self.config.embed_batch):
            chunk = missing[lo : lo + self.config.embed_batch]
            for k, e in zip(chunk, np.asarray(self.encoder(chunk), dtype=np.float64), strict=True):
                self.cache[k] = e
        return np.stack([self.cache[k] for k in keys])

    def prepare(self, texts: Sequence[str]) -> None:
        """Embed the prompt blocks of ``texts`` now (a policy state is never cached: it moves)."""
        self.columns(validate_texts(texts))


def minilm_encoder(device: str | None, batch: int) -> Any:
    """A frozen all-MiniLM-L6-v2 mean-pooled embedding function ``texts -> float32 (n, 384)``."""
    import torch

    from trace_rl.predictor import backbones

    backbone, tok = backbones.load_hf(backbones.minilm_path(), pooling="mean")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    backbone = backbone.to(dev).eval()
    backbone.requires_grad_(False)

    def encode(texts: Sequence[str]) -> np.ndarray:
        ids = tok.encode(list(texts))
        length = max(1, min(256, max(len(x) for x in ids)))
        input_ids = torch.full((len(ids), length), tok.pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), length), dtype=torch.bool)
        for i, row in enumerate(ids):
            row = row[:length]
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = True
        with torch.inference_mode():
            out: np.ndarray = backbone(input_ids.to(dev), mask.to(dev)).float().cpu().numpy()
        return out

    return encode
