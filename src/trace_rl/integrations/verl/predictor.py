"""The success predictor as a named Ray actor, shared by the trainer (prompts, updates) and the agent-loop
workers (anchors): one model, as in TRACE (DESIGN.md section 1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trace_rl.integrations.verl.config import TraceVerlConfig


class PredictorActor:
    """Actor body (wrap with ``ray.remote``): a `trace_rl.predictor.SuccessPredictor` built by name.

    Args:
        name: `trace_rl.predictor.build_predictor` name or folder.
    """

    def __init__(self, name: str, **overrides: Any):
        from trace_rl.predictor import build_predictor

        self.predictor = build_predictor(name, **overrides)
        self.updates = 0

    def predict(self, texts: Sequence[str]) -> list[float]:
        """Success estimates in [eps, 1 - eps], one per text (prompt or serialized anchor)."""
        if not texts:
            return []
        return [float(x) for x in np.asarray(self.predictor.predict(list(texts)), dtype=np.float64)]

    def update(
        self, texts: Sequence[str], targets: Sequence[float], weights: Sequence[float] | None = None
    ) -> dict:
        """One online update on (text, target) pairs (targets in [0, 1]); returns the predictor's metrics."""
        if not texts:
            return {}
        self.updates += 1
        w = None if weights is None else list(weights)
        return dict(self.predictor.update(list(texts), list(targets), w))


def predictor_handle(config: TraceVerlConfig, *, create: bool = False) -> Any:
    """The named predictor actor ``config.predictor_actor``; with `create`, start it when absent.

    Raises:
        ValueError: it does not exist and `create` is False (the trainer starts it; standalone users call
            this with create=True first).
    """
    import ray

    try:
        return ray.get_actor(config.predictor_actor)
    except ValueError:
        if not create:
            raise ValueError(
                f"no Ray actor named {config.predictor_actor!r}: TraceTrainer starts it, or call "
                "predictor_handle(config, create=True)"
            ) from None
    return (
        ray.remote(PredictorActor)
        .options(name=config.predictor_actor, get_if_exists=True, num_cpus=0)
        .remote(config.predictor)
    )
