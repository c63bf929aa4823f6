"""Frozen records shared across the parts of trace-rl (shapes in field comments).

Records here are plain dataclasses over numpy arrays so that every part (allocation, trees, rollout, training)
can exchange them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class RootPlan:
    """Root allocation for one step over a candidate pool of P prompts.

    Attributes:
        rollouts: int64 (P,): root rollouts m_i per candidate; 0 = the prompt is skipped this step.
        replay_budget: float64 (P,): continuation budget of each prompt for prefix expansion, in replays
            (the paper's N * m_i; 0 for methods without replays).
        method: name of the strategy that produced the plan.
    """

    rollouts: npt.NDArray[np.int64]  # (P,)
    replay_budget: npt.NDArray[np.float64]  # (P,)
    method: str
    info: dict[str, float] = field(default_factory=dict)

    @property
    def active(self) -> npt.NDArray[np.int64]:
        """Indices of the prompts that get at least one rollout, shape (A,)."""
        return np.flatnonzero(self.rollouts > 0).astype(np.int64)

    @property
    def num_active(self) -> int:
        return int(np.count_nonzero(self.rollouts))

    @property
    def root_rollouts(self) -> int:
        return int(self.rollouts.sum())


@dataclass(frozen=True)
class Task:
    """One task instance of an environment (a prompt of the candidate pool).

    Attributes:
        id: stable identifier, unique within its environment and split.
        env: environment name ("math_python", "bfcl", "multihop_qa", "lab", ...).
        prompt: the first user message shown to the agent.
        answer: the gold answer when the task has one (None otherwise).
        tools: the task's tool schemas in OpenAI function format, rendered by chat templates.
        metadata: environment-specific data (initial state, fixed user turns, gold calls, ...), JSON-serialisable.
    """

    id: str
    env: str
    prompt: str
    answer: str | None = None
    tools: tuple[dict[str, object], ...] = ()
    metadata: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Turn:
    """One agent turn (thought + action + observation): the payload of a non-root tree node.

    Token arrays cover everything this turn appends to the context, in order: the model's sampled tokens
    followed by template, tool-result and observation tokens. Training uses exactly these sampled ids, never a
    re-tokenisation of the text.

    Attributes:
        token_ids: int64 (T,) token ids this turn appends to the context.
        loss_mask: int8 (T,) 1 for model-sampled tokens, 0 for template/tool/observation tokens.
        logprobs: float32 (T,) log-probability of each sampled token under the behaviour policy, 0 where masked.
        text: the assistant text of the turn (decoded model tokens).
        observation: the environment's reply to the turn ("" for a final answer).
        info: environment/step details (parsed tool calls, errors, timing), JSON-serialisable.
    """

    token_ids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))  # (T,)
    loss_mask: npt.NDArray[np.int8] = field(default_factory=lambda: np.zeros(0, np.int8))  # (T,)
    logprobs: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))  # (T,)
    text: str = ""
    observation: str = ""
    info: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Anchor:
    """A turn prefix that replays may start from: a non-root, non-leaf node of a root rollout.

    Attributes:
        node: node id in its RolloutTree.
        depth: number of turns in the prefix (1 = after the first turn).
        reward: terminal reward r of the rollout the prefix lies on.
    """

    node: int
    depth: int
    reward: float
