"""The agent loop: one episode = generate a turn, parse it in the env, append the observation, until done.

Token bookkeeping follows DESIGN.md: the context is only ever extended with token ids (the sampled ids, then
template + observation ids), never re-rendered or re-tokenised, so training sees exactly what was sampled.
Each non-final turn ends at a save point (the full context ids + an env snapshot); `run_episode(start=...)`
resumes from one, which is how replays from a turn prefix see exactly the state the original rollout saw.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from trace_rl.policy.chat import CHAT, IM_END
from trace_rl.rollout.backends import REQUEST_CONTEXT, GenerationBackend, RequestContext, SamplingParams
from trace_rl.types import Task, Turn


class StepLike(Protocol):
    """What `env.step` returns (trace_rl.envs.StepResult): observation text, reward, done flag, info dict."""

    observation: str
    reward: float
    done: bool
    info: dict[str, Any]


class EnvLike(Protocol):
    """The Env protocol of trace_rl.envs (structural: any object with these methods plugs in)."""

    def reset(self, task: Task) -> str: ...
    def step(self, assistant_text: str) -> Any: ...
    def snapshot(self) -> object: ...
    def restore(self, state: object) -> None: ...


class ChatCodec:
    """Token ids of the prompt and of observations, and the text of a model turn, for one tokenizer."""

    def __init__(self, tokenizer: Any, system: str | None = None, *, render_tools: bool = True):
        self.tokenizer = tokenizer
        self.system = system
        # False: tool schemas are not rendered into the system prompt (small policies learn the tool format
        # from the warm start; the env still knows the task's tools). Must match the SFT data's setting.
        self.render_tools = render_tools
        self.end_of_turn = int(tokenizer.convert_tokens_to_ids(IM_END))

    def prompt_ids(self, first_observation: str, tools: Sequence[dict[str, object]]) -> list[int]:
        return list(
            self.tokenizer.encode(
                CHAT.prompt(first_observation, tools if self.render_tools else (), self.system),
                add_special_tokens=False,
            )
        )

    def observation_ids(self, observation: str) -> list[int]:
        return list(self.tokenizer.encode(CHAT.observation(observation), add_special_tokens=False))

    def turn_text(self, ids: Sequence[int], stop_ids: Sequence[int] = ()) -> str:
        """Decoded model turn without its trailing stop token (special tokens inside are kept as text)."""
        ids = list(ids)
        if ids and (ids[-1] in stop_ids or ids[-1] == self.end_of_turn):
            ids = ids[:-1]
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))


@dataclass(frozen=True)
class SavePoint:
    """A turn boundary a replay can resume from.

    Attributes:
        token_ids: int64 (T,) the whole context after `depth` turns, ending with the next assistant header.
        env_state: `env.snapshot()` taken right after turn `depth`'s step.
        depth: number of completed turns (>= 1).
        policy_version: the oldest policy version that sampled a model token of `token_ids` (None when the
            backend reports no versions); a replay under a newer version continues a stale prefix.
    """

    token_ids: npt.NDArray[np.int64]
    env_state: object
    depth: int
    policy_version: int | None = None


@dataclass
class Episode:
    """One rollout (or one replay: the turns after its save point).

    Attributes:
        task: the task.
        start_depth: turns already in the context before this episode's first turn (0 for a root rollout).
        prompt_ids: int64 (P,) the context this episode started from (the prompt, or the save point's ids).
        turns: the turns this episode generated, in order.
        reward: terminal reward (0 when the episode hit max_turns or the context limit).
        save_points: save_points[i] is the boundary after turns[i], for every non-final turn.
        finish: "done" (env ended it), "max_turns" or "context".
    """

    task: Task
    start_depth: int
    prompt_ids: npt.NDArray[np.int64]
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    save_points: list[SavePoint] = field(default_factory=list)
    finish: str = ""

    @property
    def sampled_tokens(self) -> int:
        return int(sum(int(t.loss_mask.sum()) for t in self.turns))

    def token_ids(self) -> npt.NDArray[np.int64]:
        """The full context: prompt ids followed by every turn's ids, int64 (T,)."""
        return np.concatenate([self.prompt_ids, *[t.token_ids for t in self.turns]]).astype(np.int64)


def turn_seed(seed: int, depth: int) -> int:
    """Seed of the request for turn `depth` (0-based) of an episode seeded with `seed`."""
    return (seed * 1_000_003 + depth * 7_919 + 1) % (2**63)


async def run_episode(
    backend: GenerationBackend,
    env: EnvLike,
    codec: ChatCodec,
    task: Task,
    sampling: SamplingParams,
    *,
    max_turns: int = 8,
    max_context: int = 4096,
    seed: int = 0,
    start: SavePoint | None = None,
) -> Episode:
    """Run one episode to its end (or resume one from `start`, a save point of an earlier episode of `task`).

    Each turn samples one completion with seed `turn_seed(seed, depth)`, decodes it, calls env.step, and
    appends end-of-turn (if the model did not emit it) + observation ids with loss mask 0.

    Raises:
        ValueError: max_turns < 1, or a save point at or beyond max_turns.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if start is None:
        first = env.reset(task)
        context = codec.prompt_ids(first, task.tools)
        depth = 0
    else:
        if start.depth >= max_turns:
            raise ValueError(f"save point depth {start.depth} leaves no turn under max_turns={max_turns}")
        env.restore(start.env_state)
        context = [int(i) for i in start.token_ids]
        depth = start.depth
    episode = Episode(task, depth, np.asarray(context, np.int64))
    prefix_version = start.policy_version if start is not None else None
    stop = tuple(sampling.stop_ids) if sampling.stop_ids is not None else ()
    while True:
        budget = min(sampling.max_new_tokens, max_context - len(context) - 1)
        if budget < 1:
            episode.finish, episode.reward = "context", 0.0
            if not episode.turns:  # nothing fits: one empty failed turn, so the rollout still counts
                empty = np.zeros(0, np.int64)
                failed: dict[str, object] = {"finish_reason": "context", "span": [len(context)] * 2}
                episode.turns.append(
                    Turn(empty, empty.astype(np.int8), empty.astype(np.float32), "", "", failed)
                )
            return episode
        params = SamplingParams(
            budget, sampling.temperature, sampling.top_p, turn_seed(seed, depth), sampling.stop_ids
        )
        # routing and accounting for server pools: same replica for the whole task, replay flag, prefix age
        resumed = start is not None and depth == start.depth
        token = REQUEST_CONTEXT.set(RequestContext(task.id, start is not None, prefix_version, resumed))
        try:
            (completion,) = await backend.generate(context, params, 1)
        finally:
            REQUEST_CONTEXT.reset(token)
        if completion.policy_version is not None and (
            prefix_version is None or completion.policy_version < prefix_version
        ):
            prefix_version = completion.policy_version
        model_ids = [int(i) for i in completion.token_ids]
        text = codec.turn_text(model_ids, stop)
        # In a worker thread: a slow tool (a sandboxed interpreter, a retriever) must not stall generation
        # for every other episode in flight; each episode has its own env, so steps never share state.
        result = await asyncio.to_thread(env.step, text)
        depth += 1
        tail: list[int] = []
        if completion.finish_reason != "stop":
            tail.append(codec.end_of_turn)  # close a truncated turn so the next turn starts well-formed
        done = bool(result.done)
        hit_limit = not done and depth >= max_turns
        if not done and not hit_limit:
            tail += codec.observation_ids(result.observation)
        n_model = len(model_ids)
        ids = np.asarray(model_ids + tail, np.int64)
        mask = np.zeros(ids.size, np.int8)
        mask[:n_model] = 1
        logprobs = np.zeros(ids.size, np.float32)
        logprobs[:n_model] = completion.logprobs
        info = dict(result.info)
        info.update(finish_reason=completion.finish_reason, span=[len(context), len(context) + ids.size])
        turn = Turn(ids, mask, logprobs, text, "" if done else result.observation, info)
        episode.turns.append(turn)
        context.extend(int(i) for i in ids)
        if done or hit_limit:
            episode.reward = float(result.reward) if done else 0.0
            episode.finish = "done" if done else "max_turns"
            return episode
        episode.save_points.append(
            SavePoint(np.asarray(context, np.int64), env.snapshot(), depth, prefix_version)
        )
