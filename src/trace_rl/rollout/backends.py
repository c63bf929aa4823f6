"""The generation backend protocol: async, token-in / token-out (DESIGN.md section 4).

A backend turns a prompt (token ids) into n sampled completions. Everything above it (agent loop, scheduler)
works with token ids only, so that training sees exactly the sampled ids and never a re-tokenisation.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

_MIX = 0x9E3779B97F4A7C15


def completion_seed(seed: int, index: int) -> int:
    """A 63-bit generator seed for completion `index` of a request seeded with `seed` (splitmix64 step)."""
    z = (seed * _MIX + (index + 1) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFF


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
        cached_prompt_tokens: prompt tokens the server's prefix cache served (server backends; None when
            the backend does not report it). replica: index of the pool replica that served it (None outside a
            `trace_rl.rollout.pool.ReplicaPool`). policy_version: the policy version the request was stamped
            with (None when the backend has no versions).
    """

    token_ids: npt.NDArray[np.int64]
    logprobs: npt.NDArray[np.float32]
    finish_reason: str
    cached_prompt_tokens: int | None = None
    replica: int | None = None
    policy_version: int | None = None


@dataclass(frozen=True)
class RequestContext:
    """Where a generation request comes from, for routing and accounting (server pools read it; the local
    engine ignores it). Set by the agent loop around each `generate` call through `REQUEST_CONTEXT`.

    Attributes:
        affinity_key: requests with the same key go to the same replica (the prompt's task id: a prompt's
            roots, turns and replays share its prefix cache).
        replay: the request belongs to a replay (an episode resumed from a save point).
        prefix_version: the oldest policy version that generated any model token in the prompt (None: the
            prompt holds no sampled tokens, or they carry no version).
        resumed: the request is a replay's first turn: its prompt is exactly the save point's prefix.
    """

    affinity_key: str | None = None
    replay: bool = False
    prefix_version: int | None = None
    resumed: bool = False


REQUEST_CONTEXT: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "trace_rl_request_context", default=None
)


class GenerationBackend(Protocol):
    """What the agent loop and the scheduler need from a generator (local engine or a server client)."""

    async def generate(
        self, prompt_token_ids: Sequence[int], sampling: SamplingParams, n: int = 1
    ) -> list[Completion]:
        """Sample n completions of the prompt; the list is in completion-index order."""
        ...
