"""The policy-state feature block of the convex predictor: the policy's hidden state at each text's token context.

The rows come from a policy-state function ``texts -> float64 (n, F_s)`` (a
:class:`~trace_rl.predictor.policy_state.PolicyStateEncoder` over the live policy, attached with
``ConvexSuccessPredictor.attach_state``; it needs each text's token context, registered with
``register_contexts``), each divided by its L2 norm (a hidden state's scale says nothing about success). They are
kept with each update and saved in the state dict ("states"): the policy that produced them is gone by the time a
run resumes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from trace_rl.predictor.blocks.base import FeatureBlock, FloatArray

if TYPE_CHECKING:
    from trace_rl.predictor.convex_config import ConvexConfig


class PolicyStateBlock(FeatureBlock):
    """The unit-norm policy state at the text's token context, dense float64 (N x F_s)."""

    name = "state"
    key = "states"
    registers = "contexts"

    def __init__(self, owner: str, config: ConvexConfig, **inputs: Any) -> None:
        super().__init__(owner, config)
        self.encoder: Any = inputs.get("state")

    def register(self, texts: Sequence[str], data: Any) -> None:
        """Pass each text's token context (``data``: int id arrays) to the policy-state function's ``register``.

        Raises:
            ValueError: no policy-state function with a ``register`` is attached.
        """
        register = getattr(self.encoder, "register", None)
        if register is None:
            raise ValueError(
                f"predictor {self.owner!r}: attach a PolicyStateEncoder before registering contexts"
            )
        register(list(texts), list(data))

    def rows(self, texts: list[str]) -> FloatArray:
        """The policy-state rows of ``texts``, each divided by its L2 norm, float64 (N, F_s).

        Raises:
            ValueError: no policy-state function attached, or it gave the wrong shape or non-finite values.
        """
        if self.encoder is None:
            raise ValueError(
                f"predictor {self.owner!r} needs the policy's state: call attach_state(PolicyStateEncoder(...)) "
                "before it scores or trains"
            )
        rows = np.asarray(self.encoder(texts), dtype=np.float64)
        if rows.ndim != 2 or rows.shape[0] != len(texts) or not np.all(np.isfinite(rows)):
            raise ValueError(
                f"the policy-state function gave {rows.shape} (or non-finite) for {len(texts)} texts"
            )
        unit: FloatArray = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        return unit

    def restore(self, batch: Mapping[str, Any], n: int) -> FloatArray:
        if "states" not in batch:
            raise ValueError("predictor state lacks the policy-state rows of a kept update ('states')")
        return np.asarray(batch["states"], dtype=np.float64).reshape(n, -1)

    def columns(self, texts: list[str], rows: FloatArray | None = None) -> Any:
        return self.rows(texts) if rows is None else rows
