"""The success predictor as a named Ray actor, shared by the trainer (prompts, updates) and the agent-loop
workers (anchors): one model, as in TRACE (DESIGN.md section 1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trace_rl.integrations.verl.config import TraceVerlConfig
from trace_rl.predictor.capabilities import (
    Capability,
    as_history_posterior,
    check_capabilities,
    example_weighting,
)
from trace_rl.predictor.serialize import serialize_anchor


def predictor_text(prompt: str, turns: Sequence[Any] = (), *, max_chars: int) -> str:
    """The text the shared predictor sees for a prompt (no ``turns``) or an anchor (the turns up to it), cut at
    the predictor's own limit ``max_chars`` (its `PredictorActor.profile` ``max_chars``: 1,024 characters for
    ``ngram`` and ``minilm``, 508 for ``tiny``). The adapter scores the trainer's candidate prompts
    (`trace_rl.integrations.verl.trainer.root_anchor_text`) and builds the predictor's training examples
    (`trace_rl.integrations.verl.worker`, through `trace_rl.predictor.node_examples`' ``text_of``) with this
    one function, so the texts scored are the texts learned from; it is the native trainer's
    ``serialize_anchor(prompt, turns, max_chars=predictor.max_chars)``.

    Args:
        prompt: the task prompt (``Task.prompt``).
        turns: the turns from the prompt to the anchor (each with ``text`` and ``observation``).
        max_chars: the predictor's serialization budget (>= 64).

    Returns:
        At most ``max_chars`` characters (`trace_rl.predictor.serialize` gives the format and truncation rule).

    Raises:
        ValueError: ``max_chars`` below 64, a non-string prompt or a turn without text/observation.
    """
    return serialize_anchor(prompt, turns, max_chars=max_chars)


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

    def profile(self) -> dict[str, Any]:
        """What the workers need to score and weight like the native trainer: ``name``, ``is_warm``,
        ``max_chars`` (the serialization budget it trains on), ``capabilities`` (the values of the
        `trace_rl.predictor.Capability` it declares, sorted) and ``example_weighting`` ("uniform" or "leaves",
        `trace_rl.predictor.capabilities.example_weighting`)."""
        p = self.predictor
        return {
            "name": p.name,
            "is_warm": bool(p.is_warm),
            "max_chars": int(p.max_chars),
            "capabilities": sorted(c.value for c in p.capabilities),
            "example_weighting": example_weighting(p),
        }

    def prior_strength(self, texts: Sequence[str]) -> list[float] | None:
        """The predictor's fitted Beta prior strength per text (``trace_fresh``), None when it declares no
        ``posterior`` capability."""
        history = as_history_posterior(self.predictor)
        if history is None:
            return None
        return [float(x) for x in np.asarray(history.prior_strength(list(texts)), dtype=np.float64)]

    def posterior(
        self, texts: Sequence[str], successes: Sequence[float], trials: Sequence[float]
    ) -> list[float] | None:
        """The predictor's own history posterior given extra outcomes (the ``posterior`` capability: convex
        predictors), None when it declares none."""
        history = as_history_posterior(self.predictor)
        if history is None:
            return None
        out = history.posterior(
            list(texts), np.asarray(successes, np.float64), np.asarray(trials, np.float64)
        )
        return [float(x) for x in np.asarray(out, dtype=np.float64)]

    def update(
        self, texts: Sequence[str], targets: Sequence[float], weights: Sequence[float] | None = None
    ) -> dict:
        """One online update on (text, target) pairs (targets in [0, 1]); returns the predictor's metrics."""
        if not texts:
            return {}
        self.updates += 1
        w = None if weights is None else list(weights)
        return dict(self.predictor.update(list(texts), list(targets), w))


class RemotePredictor:
    """The predictor actor as `trace_rl.train.prefixes.replay_allocator` sees a predictor: awaitable ``predict``,
    ``posterior`` and ``prior_strength``, plus the actor's ``name``, ``max_chars`` and ``example_weighting`` (read
    once at `connect`). Of the capabilities the actor's predictor declares it serves ``posterior``; ``prepare`` and
    ``refit`` stay with the actor (its own set-up and the trainer's updates).

    Raises:
        ValueError: the actor's predictor declares ``state`` or ``group`` (their hand-overs need the predictor
            in the worker's process; the verl config refuses those predictors).
    """

    def __init__(self, handle: Any, profile: dict[str, Any]):
        self.handle = handle
        self.name = str(profile["name"])
        self.max_chars = int(profile["max_chars"])
        self.example_weighting = str(profile["example_weighting"])
        declared = frozenset(Capability(c) for c in profile["capabilities"])
        local = declared & {Capability.STATE, Capability.GROUP}
        if local:
            names = ", ".join(sorted(c.value for c in local))
            raise ValueError(
                f"predictor {self.name!r} declares {names}: the verl adapter cannot hand it over"
            )
        self.capabilities = declared & {Capability.POSTERIOR}
        check_capabilities(self)

    def text(self, prompt: str, turns: Sequence[Any] = ()) -> str:
        """`predictor_text` at this predictor's own ``max_chars``."""
        return predictor_text(prompt, turns, max_chars=self.max_chars)

    @classmethod
    async def connect(cls, handle: Any) -> RemotePredictor:
        return cls(handle, await handle.profile.remote())

    async def predict(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(await self.handle.predict.remote(list(texts)), dtype=np.float64)

    async def posterior(self, texts: Sequence[str], successes: Any, trials: Any) -> np.ndarray:
        out = await self.handle.posterior.remote(
            list(texts), [float(x) for x in successes], [float(x) for x in trials]
        )
        return np.asarray(out, dtype=np.float64)

    async def prior_strength(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(await self.handle.prior_strength.remote(list(texts)), dtype=np.float64)

    async def is_warm(self) -> bool:
        """Whether the shared predictor has been updated (the cold-start rule), asked afresh each time."""
        return bool((await self.handle.profile.remote())["is_warm"])


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
