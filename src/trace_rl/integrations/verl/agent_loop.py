"""The TRACE agent loop for verl (``agent_name: trace_agent``): one trace-rl episode per verl session, driven
through verl's own ``LLMServerClient`` (sticky routing, server actors), resumable from a turn prefix.

A session is a root rollout (``trace_prefix`` absent) or a replay: ``trace_prefix`` is a `TracePrefix` (the
parent's prompt ids and turns up to the anchor, its save point: the full token context plus the environment
snapshot), so the replay continues from exactly the state the parent saw (trace-rl's `run_episode(start=...)`).
Every request of every session of a prompt is sent with ``request_id = uid``: verl's load balancer maps a request
id to one server (sticky session), so all roots and replays of a prompt land on the replica whose prefix cache
holds their shared prefix.

The output row (``AgentLoopOutput``) is the whole root-to-leaf path: the prompt, then the prefix turns and the
session's own turns, model tokens with mask 1 and their sampled logprobs, observation tokens with mask 0, and
``reward_score`` from the trace-rl environment (verl's reward loop is then skipped). ``extra_fields`` carries the
row's `trace_rl.integrations.verl.layout.RowLayout` (``trace_sessions``, ``trace_turn_lens``) and the replicas
and prefix-cache hits of its requests.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.integrations.verl.compat import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from trace_rl.integrations.verl.config import TraceVerlConfig
from trace_rl.rollout.agent import ChatCodec, EnvLike, Episode, SavePoint, run_episode
from trace_rl.rollout.backends import Completion, SamplingParams, completion_seed
from trace_rl.types import Task, Turn

TRACE_AGENT = "trace_agent"
EPISODE_KEY = "_trace_episode"  # private extra field: the worker pops it before the row goes to TransferQueue


@dataclass(frozen=True)
class TracePrefix:
    """Where a replay starts: a turn prefix of an earlier session of the same prompt.

    Attributes:
        prompt_ids: int64 (P,) the prompt's token ids (the row's ``prompts``).
        turns: the turns of the path up to the anchor, in order (len == save_point.depth).
        sessions: the session that sampled each of those turns.
        save_point: token context after those turns + environment snapshot (trace-rl `SavePoint`).
    """

    prompt_ids: npt.NDArray[np.int64]
    turns: tuple[Turn, ...]
    sessions: tuple[int, ...]
    save_point: SavePoint

    def __post_init__(self) -> None:
        if not (len(self.turns) == len(self.sessions) == self.save_point.depth >= 1):
            raise ValueError(
                f"a prefix needs depth >= 1 turns with one session each; got {len(self.turns)} turns, "
                f"{len(self.sessions)} sessions, save point depth {self.save_point.depth}"
            )


def task_from_row(row: dict[str, Any]) -> Task:
    """The trace-rl `Task` of a verl dataset row: ``extra_info["trace_task"]`` holds the Task's fields (id, env,
    prompt, answer, tools, metadata) as a JSON string (or a dict), as written by
    `trace_rl.integrations.verl.data.tasks_to_rows`.

    Raises:
        ValueError: the row has no ``extra_info.trace_task``.
    """
    info = row.get("extra_info") or {}
    spec = info.get("trace_task") if isinstance(info, dict) else None
    if isinstance(spec, str):
        spec = json.loads(spec)
    if not isinstance(spec, dict):
        raise ValueError(
            "a trace_agent row needs extra_info.trace_task (see trace_rl.integrations.verl.data)"
        )
    return Task(
        id=str(spec["id"]),
        env=str(spec["env"]),
        prompt=str(spec["prompt"]),
        answer=None if spec.get("answer") is None else str(spec["answer"]),
        tools=tuple(spec.get("tools") or ()),
        metadata=dict(spec.get("metadata") or {}),
    )


def make_trace_env(name: str, max_turns: int) -> EnvLike:
    """A fresh environment: "toy_arith" (trace_rl.rollout.toy_env), a `trace_rl.envs` name, or "module:factory",
    any importable callable ``factory(max_turns=...)`` returning an object with the trace-rl Env protocol (reset,
    step, snapshot, restore), e.g. a user's own environment shipped to Ray workers on their PYTHONPATH.

    Raises:
        ValueError: unknown name. ImportError / AttributeError: a "module:factory" that does not resolve.
    """
    if ":" in name:
        import importlib

        module, attr = name.split(":", 1)
        env: EnvLike = getattr(importlib.import_module(module), attr)(max_turns=max_turns)
        return env
    if name == "toy_arith":
        from trace_rl.rollout.toy_env import make_env

        return make_env(name, max_turns=max_turns)
    from trace_rl.envs import make_env as make_named

    return make_named(name, max_turns=max_turns)


class VerlServerBackend:
    """trace-rl's `GenerationBackend` over verl's ``LLMServerClient`` (token ids in and out).

    Every request goes out as ``server_manager.generate(request_id, prompt_ids=..., sampling_params=...)`` with
    the one `request_id` this backend was made with (the prompt's uid: sticky routing to one replica).
    ``sampling_params``: temperature, top_p, top_k (-1: off), max_tokens, seed, stop_token_ids, logprobs True.

    Attributes:
        replicas: the ``extra_fields["replica"]`` of each response (None where the server does not say).
        cached_tokens: prompt tokens served from the prefix cache per request (None where not reported).
        versions: the weight version (``global_steps``) of each response.
    """

    def __init__(self, server_manager: Any, request_id: str, stop_ids: Sequence[int], top_k: int = -1):
        self.server_manager = server_manager
        self.request_id = request_id
        self.stop_ids = tuple(int(i) for i in stop_ids)
        self.top_k = int(top_k)
        self.replicas: list[str | None] = []
        self.cached_tokens: list[int | None] = []
        self.versions: list[int | None] = []

    async def generate(
        self, prompt_token_ids: Sequence[int], sampling: SamplingParams, n: int = 1
    ) -> list[Completion]:
        """n completions, one request each (seeds `completion_seed(sampling.seed, i)`); finish_reason "stop" when
        the last token is a stop id, else "length"."""
        stop = tuple(sampling.stop_ids) if sampling.stop_ids is not None else self.stop_ids
        out = []
        for i in range(n):
            params = {
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": self.top_k,
                "max_tokens": sampling.max_new_tokens,
                "seed": completion_seed(sampling.seed, i) % (2**31),
                "stop_token_ids": list(stop),
                "logprobs": True,
                "repetition_penalty": 1.0,
            }
            res = await self.server_manager.generate(
                self.request_id, prompt_ids=[int(t) for t in prompt_token_ids], sampling_params=params
            )
            ids = np.asarray(res.token_ids, dtype=np.int64)
            lps = np.asarray(
                res.log_probs if res.log_probs is not None else np.zeros(ids.size), dtype=np.float32
            )
            extra = dict(res.extra_fields or {})
            self.replicas.append(extra.get("replica"))
            self.cached_tokens.append(extra.get("cached_tokens"))
            version = extra.get("global_steps")
            self.versions.append(None if version is None else int(version))
            finish = "stop" if ids.size and int(ids[-1]) in stop else "length"
            out.append(
                Completion(
                    ids,
                    lps,
                    finish,
                    cached_prompt_tokens=extra.get("cached_tokens"),
                    policy_version=None if version is None else int(version),
                )
            )
        return out


def session_seed(uid: str, session_id: int) -> int:
    """Deterministic episode seed of session `session_id` of prompt `uid` (crc32 of both)."""
    return zlib.crc32(f"{uid}/{session_id}".encode())


def build_output(
    episode: Episode,
    prefix: TracePrefix | None,
    session_id: int,
    backend: VerlServerBackend,
    *,
    filler_id: int = 0,
) -> dict[str, Any]:
    """The fields of the row's ``AgentLoopOutput`` (plain types) for an episode (and its prefix, for a replay).

    A turn without tokens (the prompt or prefix filled ``max_context``: `run_episode` ends the episode with one
    empty failed turn, reward 0) becomes one ``filler_id`` token (the end-of-turn token) with loss mask 0, so the
    row is a valid failed rollout: it counts in its group's reward statistics and trains no token.

    Raises:
        ValueError: the episode has no turn at all (a backend that returns none).
    """
    if not episode.turns:
        raise ValueError("the episode has no turn (run_episode always records at least one)")
    turns = tuple(_nonempty(t, filler_id) for t in (prefix.turns if prefix else ()) + tuple(episode.turns))
    sessions = (prefix.sessions if prefix else ()) + (session_id,) * len(episode.turns)
    prompt_ids = prefix.prompt_ids if prefix is not None else episode.prompt_ids
    versions = [v for v in backend.versions if v is not None]
    return {
        "prompt_ids": [int(i) for i in prompt_ids],
        "response_ids": [int(i) for t in turns for i in t.token_ids],
        "response_mask": [int(i) for t in turns for i in t.loss_mask],
        "response_logprobs": [float(x) for t in turns for x in t.logprobs],
        "reward_score": float(episode.reward),
        "num_turns": 1 + 2 * len(turns),
        "extra_fields": {
            "trace_sessions": list(sessions),
            "trace_turn_lens": [int(t.token_ids.size) for t in turns],
            "trace_is_replay": prefix is not None,
            "trace_anchor_depth": prefix.save_point.depth if prefix is not None else 0,
            "trace_replicas": list(backend.replicas),
            "trace_cached_tokens": list(backend.cached_tokens),
            "trace_finish": episode.finish,
            "min_global_steps": min(versions) if versions else None,
            "max_global_steps": max(versions) if versions else None,
            EPISODE_KEY: episode,
        },
    }


def _nonempty(turn: Turn, filler_id: int) -> Turn:
    """``turn``, or for a turn without tokens one ``filler_id`` token with loss mask 0 and logprob 0."""
    if turn.token_ids.size:
        return turn
    return dataclasses.replace(
        turn,
        token_ids=np.array([filler_id], np.int64),
        loss_mask=np.zeros(1, np.int8),
        logprobs=np.zeros(1, np.float32),
    )


@register(TRACE_AGENT)
class TraceAgentLoop(AgentLoopBase):  # type: ignore[misc]
    """verl agent loop running one trace-rl episode (root rollout, or replay when ``trace_prefix`` is set).

    Reads the ``trace`` config section (`TraceVerlConfig`: env, max_turns, max_context, max_new_tokens) and
    the row's ``extra_info.trace_task``; temperature, top_p and top_k come from verl's sampling params. Registered
    with verl's ``register`` as ``trace_agent`` when this module is imported.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.trace = TraceVerlConfig.from_verl(self.config)
        self.codec = ChatCodec(self.tokenizer)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        # a turn ends at the chat template's end-of-turn token (and at EOS, which verl's vLLM server stops on)
        self.stop_ids = tuple(
            dict.fromkeys([self.codec.end_of_turn, *([int(eos)] if eos is not None else [])])
        )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One session: kwargs are the row's fields plus ``uid``, ``session_id`` and optional ``trace_prefix``."""
        task = task_from_row(kwargs)
        prefix: TracePrefix | None = kwargs.get("trace_prefix")
        session_id = int(kwargs["session_id"])
        uid = str(kwargs["uid"])
        top_k = int(sampling_params.get("top_k", -1))
        backend = VerlServerBackend(self.server_manager, uid, self.stop_ids, top_k=top_k)
        seed = session_seed(uid, session_id)
        sampling = SamplingParams(
            max_new_tokens=self.trace.max_new_tokens,
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_p=float(sampling_params.get("top_p", 1.0)),
            seed=seed,
            stop_ids=self.stop_ids,
        )
        episode = await run_episode(
            backend,
            make_trace_env(self.trace.env, self.trace.max_turns),
            self.codec,
            task,
            sampling,
            max_turns=self.trace.max_turns,
            max_context=self.trace.max_context,
            seed=seed,
            start=prefix.save_point if prefix is not None else None,
        )
        return AgentLoopOutput(
            metrics=AgentLoopMetrics(),
            **build_output(episode, prefix, session_id, backend, filler_id=self.codec.end_of_turn),
        )
