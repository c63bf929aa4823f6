"""The n-gram feature block of the convex predictor: hashed character n-gram counts of the whole text, scaled.

Counts (``HashingVectorizer``; nothing to train, nothing to go stale), not tf-idf, so that a linear head can add
them up. One global scale, fixed at the first update, gives a median text of that update unit norm (``c`` then
means about the same for any task); it is the block's only state (the state dict's "scale").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from trace_rl.predictor.blocks.base import FeatureBlock, FloatArray

if TYPE_CHECKING:
    from trace_rl.predictor.convex_config import ConvexConfig


class NgramBlock(FeatureBlock):
    """Scaled character n-gram counts, scipy CSR (N x ``n_features``)."""

    name = "ngram"

    def __init__(self, owner: str, config: ConvexConfig, **inputs: Any) -> None:
        from sklearn.feature_extraction.text import HashingVectorizer

        super().__init__(owner, config)
        self.hasher = HashingVectorizer(
            analyzer="char",
            ngram_range=config.ngram_range,
            n_features=config.n_features,
            alternate_sign=False,
            norm=None,
            lowercase=False,
        )
        self.scale: float | None = None

    def fit(self, texts: list[str]) -> None:
        """Fix the scale once, at the first update: a median text of that batch gets unit feature norm."""
        if self.scale is None:
            raw = self.hasher.transform(texts)
            norms = np.sqrt(np.asarray(raw.multiply(raw).sum(axis=1)).ravel())
            self.scale = 1.0 / max(float(np.median(norms)), 1e-6)

    def columns(self, texts: list[str], rows: FloatArray | None = None) -> Any:
        return self.hasher.transform(texts) * (self.scale or 1.0)

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self.scale}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.scale = None if state.get("scale") is None else float(state["scale"])
