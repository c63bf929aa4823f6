"""The ``trace`` section of a verl config: TRACE's knobs, one source of defaults (docs/integrations.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class TraceVerlConfig:
    """TRACE inside verl. Read from the verl config's top-level ``trace`` section (``+trace.KEY=VALUE`` on a
    Hydra command line); every key is optional.

    Attributes:
        root_budget: M, root rollouts per step over all active prompts (0: ``rollout.n`` x ``data.train_batch_size``).
        continuations: N, replays per root rollout: a prompt with m_i roots gets a local budget of N * m_i replays.
        min_rollouts, max_rollouts: bounds on a prompt's root rollouts m_i (0 or in [min, max]).
        max_active: at most this many prompts per step (0: ``data.train_batch_size``).
        candidate_pool: prompts scored per step (0: 2 x ``data.train_batch_size``; a multiple of the
            dataloader's batch).
        max_replays_per_anchor: cap on k_j (0: no cap).
        env: environment of the agent loop: "toy_arith", "math_python", "bfcl", "multihop_qa", or "module:factory"
            (a user's env factory; see `agent_loop.make_trace_env`).
        max_turns: turns per episode. max_context: context limit in tokens. max_new_tokens: tokens per turn.
        predictor: `trace_rl.predictor.build_predictor` name ("ngram", "tiny", "minilm", or a folder).
        predictor_actor: name of the Ray actor holding the predictor (shared by trainer and workers).
    """

    root_budget: int = 0
    continuations: int = 2
    min_rollouts: int = 2
    max_rollouts: int = 8
    max_active: int = 0
    candidate_pool: int = 0
    max_replays_per_anchor: int = 0
    env: str = "toy_arith"
    max_turns: int = 4
    max_context: int = 4096
    max_new_tokens: int = 256
    predictor: str = "ngram"
    predictor_actor: str = "trace_predictor"

    def __post_init__(self) -> None:
        for name in (
            "root_budget",
            "continuations",
            "max_active",
            "candidate_pool",
            "max_replays_per_anchor",
        ):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"trace.{name} must be >= 0, got {getattr(self, name)}")
        if not 1 <= self.min_rollouts <= self.max_rollouts:
            raise ValueError(
                f"trace.min_rollouts ({self.min_rollouts}) and max_rollouts ({self.max_rollouts}) must satisfy "
                "1 <= min <= max"
            )
        for name in ("max_turns", "max_context", "max_new_tokens"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"trace.{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_verl(cls, config: Any) -> TraceVerlConfig:
        """From a whole verl config (DictConfig or mapping); unknown ``trace`` keys raise ValueError."""
        section = config.get("trace", None) if hasattr(config, "get") else None
        if section is None:
            return cls()
        items: Mapping[str, Any] = dict(section.items())
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(items) - known)
        if unknown:
            raise ValueError(f"unknown trace config keys {unknown}; expected some of {sorted(known)}")
        return cls(**items)
