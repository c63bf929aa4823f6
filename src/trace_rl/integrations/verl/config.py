"""The ``trace`` section of a verl config: TRACE's knobs (docs/integrations.md), their defaults and checks those of
`trace_rl.spec.TraceSpec`, the native trainer's and the TRL adapter's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from trace_rl.spec import BudgetSpec, SamplingSpec, SpecError, TraceSpec

VERL_METHODS = ("trace", "trace_root_only", "trace_fresh")  # the methods whose roots are allocate_roots


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
        method: the prefix rule, a `trace_rl.allocation` method whose roots are TRACE's ("trace",
            "trace_root_only", "trace_fresh"); verl's roots always come from `allocate_roots`.
        accounting: "paper" (a replay costs replay_cost) or "token" (priced by its expected remaining tokens).
        replay_cost: rollout-equivalents per replay (paper: 0.5; used by token accounting and trace_fresh).
        The keys shared with `trace_rl.spec.TraceSpec` (continuations, min/max_rollouts, max_turns,
        max_new_tokens, method, accounting, replay_cost) take its defaults and are checked by it.
        record_dir: a folder where the trainer writes each step's plan, trees, advantages and predictor update
            (`trace_rl.integrations.verl.record`; `trace-rl verl-check` reads it); "" (default): nothing written.
    """

    root_budget: int = 0
    continuations: int = BudgetSpec.continuations
    min_rollouts: int = BudgetSpec.min_rollouts
    max_rollouts: int = BudgetSpec.max_rollouts  # type: ignore[assignment]  # the spec's default cap: an int
    max_active: int = 0
    candidate_pool: int = 0
    max_replays_per_anchor: int = 0
    env: str = "toy_arith"
    max_turns: int = TraceSpec.max_turns
    max_context: int = 4096
    max_new_tokens: int = SamplingSpec.max_new_tokens
    predictor: str = "ngram"
    predictor_actor: str = "trace_predictor"
    method: str = TraceSpec.method
    accounting: str = BudgetSpec.accounting
    replay_cost: float = BudgetSpec.replay_cost
    record_dir: str = ""

    def __post_init__(self) -> None:
        if self.method not in VERL_METHODS:
            raise ValueError(
                f"trace.method must be one of {list(VERL_METHODS)} (verl's roots come from allocate_roots); "
                f"got {self.method!r}"
            )
        try:
            self.spec  # noqa: B018 (building the spec checks every TRACE setting)
        except SpecError as exc:
            raise ValueError(f"trace.{exc.key}: {exc.why}") from None
        from trace_rl.predictor.names import GROUP_NAMES, STATE_NAMES

        if self.predictor in STATE_NAMES:
            raise ValueError(
                f"trace.predictor {self.predictor!r} reads the policy's hidden states, which only trace-rl's own "
                "trainer provides (verl's policy lives in its workers); pick another predictor, e.g. ngram+minilm"
            )
        if self.predictor in GROUP_NAMES:
            raise ValueError(
                f"trace.predictor {self.predictor!r} reads the sibling consensus of each prefix's tree, which the "
                "verl adapter does not register with its predictor actor; pick another predictor, e.g. ngram+minilm"
            )
        if self.max_replays_per_anchor and self.method == "trace_root_only":
            raise ValueError("trace.max_replays_per_anchor needs trace.method trace or trace_fresh")
        for name in ("root_budget", "max_active", "candidate_pool", "max_replays_per_anchor"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"trace.{name} must be >= 0, got {getattr(self, name)}")
        if self.max_context < 1:
            raise ValueError(f"trace.max_context must be >= 1, got {self.max_context}")

    @property
    def spec(self) -> TraceSpec:
        """These settings as a `TraceSpec` (verl's estimator is its own ``algorithm.adv_estimator``; its M, n and
        sampling but ``max_new_tokens`` come from verl's config)."""
        return TraceSpec.of(self, method=self.method, max_turns=self.max_turns)

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
