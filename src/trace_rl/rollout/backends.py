"""The generation backend protocol: async, token-in / token-out (DESIGN.md section 4).

A backend turns a prompt (token ids) into n sampled completions. Everything above it (agent loop, scheduler)
works with token ids only, so that training sees exactly the sampled ids and never a re-tokenisation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion.

    Attributes:
        max_new_tokens: at most this many sampled tokens (>= 1); finish_reason "length" when reached.
        temperature: softmax temperature (> 0), or 0 for greedy decoding.
        top_p: nucleus mass in (0, 1]; 1 disables the truncation.
        seed: completions are a function of (seed, completion index, prompt, model): same inputs, same tokens.
        stop_ids: token ids that end the completion (included in it); None = the policy's end-of-turn ids.
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not (self.temperature >= 0.0 and np.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class Completion:
    """One sampled continuation.

    Attributes:
        token_ids: int64 (T,) sampled ids, the stop token included when finish_reason is "stop".
        logprobs: float32 (T,) log-probability of each sampled id under softmax(logits / temperature)
            (temperature 1 for greedy), before top-p truncation: the policy the trainer recomputes.
        finish_reason: "stop" (a stop id was sampled) or "length" (max_new_tokens or the context limit).
    """

    token_ids: npt.NDArray[np.int64]
    logprobs: npt.NDArray[np.float32]
    finish_reason: str


class GenerationBackend(Protocol):
    """What the agent loop and the scheduler need from a generator (local engine or a server client)."""

    async def generate(
        self, prompt_token_ids: Sequence[int], sampling: SamplingParams, n: int = 1
    ) -> list[Completion]:
        """Sample n completions of the prompt; the list is in completion-index order."""
        ...
