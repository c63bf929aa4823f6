"""TRACE's per-prompt stage inside verl's v1 agent-loop workers (`TraceAgentLoopWorker`, `TraceAgentLoopManager`).

verl 0.9.1's ``AgentLoopWorkerTQ._run_prompt`` runs ``__rollout_n__`` sessions of one prompt and tags its uid
``finished`` only after all settle, each session writing its rows to TransferQueue as ``{uid}_{session}_{i}``.
`TraceAgentLoopWorker` overrides exactly that method for ``trace_agent`` rows (validation and other agents keep
verl's path) and, for one prompt:

runs TRACE's per-prompt stage, `trace_rl.rollout.expansion.expand_prompt` (the same function the native
scheduler calls), with the replay allocator of `trace_rl.train.prefixes.replay_allocator` on the shared predictor:

1. its m_i = ``__rollout_n__`` root sessions (sessions 0..m_i-1);
2. the prompt's `RolloutTree`, its anchors (non-root, non-leaf turn prefixes of the roots; with
   ``trace.method=trace_fresh`` also the prompt), V_j from the shared predictor (same texts as the native
   trainer: `serialize_anchor` at the predictor's ``max_chars``; the cold-start rule while it is not warm),
   q_j = r_j V_j + (1 - r_j)(1 - V_j) and the method's prefix strategy on the local budget of N * m_i replays
   (``trace.accounting``: paper or token costs);
3. the k_j replays of each anchor as sessions m_i, m_i + 1, ... from the anchor's save point (token prefix +
   environment snapshot), with the same request id (the uid) as the roots: verl's sticky routing sends them to
   the replica holding the prefix in its cache. A prompt whose roots have no turn prefix spends the budget on
   fresh root sessions instead (docs/rollout.md);
4. tags the uid ``finished`` and keeps the finished tree for the trainer's predictor update (`pop_finished`,
   examples weighted as the predictor expects). If any session raised, the prompt fails: once every session
   settled, the rows its sessions wrote are removed, the uid is tagged ``failure`` and the failure is kept for the
   trainer's metrics (`pop_failed`); `trainer.TraceReplayBuffer` then drops the group from its step.

Every session is verl's own ``_run_agent_loop`` + ``_agent_loop_postprocess`` (scoring is skipped: the trace-rl
environment sets the reward), so rows, keys and tags are verl's; `_agent_loop_postprocess` only adds the row
layout fields ``trace_sessions`` and ``trace_turn_lens`` (int64, one entry per turn) and keeps the episode (with
its save points) in the worker instead of TransferQueue.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch

from trace_rl.allocation import get_method
from trace_rl.integrations.verl.agent_loop import EPISODE_KEY, TRACE_AGENT, TracePrefix, task_from_row
from trace_rl.integrations.verl.compat import AgentLoopManagerTQ, AgentLoopWorkerTQ, tq
from trace_rl.integrations.verl.config import TraceVerlConfig
from trace_rl.integrations.verl.predictor import RemotePredictor, predictor_handle
from trace_rl.predictor import node_examples
from trace_rl.rollout.agent import Episode
from trace_rl.rollout.expansion import PromptResult, Session, expand_prompt
from trace_rl.train.prefixes import effective_method, prefix_budget, replay_allocator
from trace_rl.tree import RolloutTree
from trace_rl.types import Task

logger = logging.getLogger(__name__)

# verl decorates AgentLoopWorkerTQ with @ray.remote, and Ray forbids subclassing an actor class: subclass the
# class Ray wrapped, then make the subclass an actor again (TraceAgentLoopManager does).
_WorkerBase: type = AgentLoopWorkerTQ.__ray_metadata__.modified_class


@dataclass(frozen=True)
class FinishedPrompt:
    """One prompt's finished TRACE stage.

    Attributes:
        uid: verl's prompt uid. task: the trace-rl task. tree: its rollout tree (roots, then replays).
        roots: m_i. anchor_rollouts: int64 (J,) rollouts allocated per anchor (the paper's k_j): replays of its
            turn prefix, and at the depth-0 anchor (first, when offered) fresh root sessions.
        anchor_values: float64 (J,) the predictor's V_j (NaN where not scored). replay_budget: N * m_i.
        fresh: fresh root sessions the prefix budget bought. spent: rollout-equivalents spent (roots + priced
            replays). unspent: prefix budget left unspent (rollout-equivalents). allocation: the method that
            allocated (the cold-start rule may replace the configured one).
    """

    uid: str
    task: Task
    tree: RolloutTree
    roots: int
    anchor_rollouts: np.ndarray
    anchor_values: np.ndarray
    replay_budget: int
    fresh: int = 0
    spent: float = 0.0
    unspent: float = 0.0
    allocation: str = "trace"

    @property
    def k(self) -> np.ndarray:
        """Deprecated name of `anchor_rollouts` (read-only); ``summary()`` keeps the key ``"k"``."""
        return self.anchor_rollouts

    @property
    def replays(self) -> int:
        """Replays from turn prefixes (fresh root sessions not counted)."""
        return int(self.anchor_rollouts.sum()) - self.fresh

    def summary(self) -> dict[str, Any]:
        """Plain-type record (the tree as `RolloutTree.to_dict`) that crosses Ray and JSON."""
        return {
            "uid": self.uid,
            "task_id": self.task.id,
            "prompt": self.task.prompt,
            "roots": self.roots,
            "replays": self.replays,
            "replay_budget": self.replay_budget,
            "fresh": self.fresh,
            "spent": self.spent,
            "unspent": self.unspent,
            "allocation": self.allocation,
            "k": [int(x) for x in self.anchor_rollouts],
            "anchor_values": [float(x) for x in self.anchor_values],
            "tree": self.tree.to_dict(),
        }


class TraceAgentLoopWorker(_WorkerBase):  # type: ignore[misc, valid-type]
    """verl ``AgentLoopWorkerTQ`` running TRACE's per-prompt stage (module doc). Same constructor as verl's."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.trace = TraceVerlConfig.from_verl(self.config)
        self._episodes: dict[
            tuple[str, int], Episode
        ] = {}  # (uid, session) -> episode, while its prompt expands
        self._expanding: dict[
            str, list[str]
        ] = {}  # uid of a prompt in its TRACE stage -> row keys written so far
        self._finished: list[FinishedPrompt] = []
        self._failed: list[dict[str, Any]] = []  # prompts whose TRACE stage failed since the last pop_failed
        self._started: dict[str, int] = {}  # uid of a prompt in its TRACE stage -> sessions started so far
        self._predictor: Any = None  # the shared predictor actor, looked up on first use

    async def _agent_loop_postprocess(self, output: Any, validate: Any, **kwargs: Any) -> Any:
        """verl's row writer, plus: the row layout fields; the episode kept in the worker only while its prompt
        is in the TRACE stage (validation rows and other agents keep none: nothing accumulates)."""
        kwargs.pop("trace_prefix", None)  # a worker-side object, not a row field
        outputs = output if isinstance(output, list) else [output]
        uid, session = str(kwargs["uid"]), int(kwargs["session_id"])
        for out in outputs:
            episode = out.extra_fields.pop(EPISODE_KEY, None)
            if episode is not None and uid in self._expanding and not validate:
                self._episodes[(uid, session)] = episode
        last = outputs[-1].extra_fields if outputs else {}
        if "trace_sessions" in last:
            kwargs["trace_sessions"] = torch.tensor(last["trace_sessions"], dtype=torch.int64)
            kwargs["trace_turn_lens"] = torch.tensor(last["trace_turn_lens"], dtype=torch.int64)
        result = await super()._agent_loop_postprocess(output, validate, **kwargs)
        if uid in self._expanding and not validate:  # verl wrote the rows {uid}_{session}_{i}
            self._expanding[uid] += [f"{uid}_{session}_{i}" for i in range(len(outputs))]
        return result

    async def _run_prompt(
        self, prompt: dict, sampling_params: dict, trajectory: dict, trace: bool = False
    ) -> None:
        """A ``trace_agent`` training prompt runs the TRACE stage; anything else verl's own ``_run_prompt``.

        A failed session fails the prompt: once every session settled, the rows its sessions already wrote are
        removed, the uid is tagged ``failure`` and a record goes to `pop_failed`. `trainer.TraceReplayBuffer`
        drops the group from its step (the other prompts train; no partial tree is trained on) and nothing
        outside the root plan is sampled for it (`TraceTrainer` refuses ``sync_refill_failed_groups``).
        """
        if trajectory["validate"] or prompt.get("agent_name") != TRACE_AGENT:
            return await super()._run_prompt(prompt, sampling_params, trajectory, trace)
        uid = str(prompt["uid"])
        await tq.async_kv_put(key=uid, partition_id="train", tag={"status": "running"})
        self._expanding[uid] = []
        self._started[uid] = 0
        status = "failure"
        try:
            m = int(prompt.pop("__rollout_n__", self.config.actor_rollout_ref.rollout.n))
            prompt.pop("__do_sample__", None)
            self._finished.append(await self._expand(uid, m, prompt, sampling_params, trajectory, trace))
            status = "finished"
        except Exception:
            logger.exception("TRACE stage failed for uid=%s", uid)
        finally:
            for key in [k for k in self._episodes if k[0] == uid]:
                del self._episodes[key]
            written = self._expanding.pop(uid, [])
            started = self._started.pop(uid, 0)
            if status == "failure":
                self._failed.append({"uid": uid, "rollouts": started, "rows_removed": len(written)})
                if written:
                    await tq.async_kv_clear(keys=written, partition_id="train")
            await tq.async_kv_put(key=uid, partition_id="train", tag={"status": status})

    def held_episodes(self) -> int:
        """Episodes the worker holds now (0 between steps: nothing accumulates)."""
        return len(self._episodes)

    def pop_failed(self) -> list[dict[str, Any]]:
        """The prompts whose TRACE stage failed since the last call, one record each: ``uid``; ``rollouts``, the
        sessions (roots, replays, fresh rollouts) it started, each of which generated tokens, so each counts as
        spent; ``rows_removed``, the rows its finished sessions had written, removed from TransferQueue."""
        out, self._failed = self._failed, []
        return out

    async def _sessions(
        self,
        uid: str,
        prompt: dict,
        sampling_params: dict,
        trajectory: dict,
        trace: bool,
        specs: Sequence[tuple[int, TracePrefix | None]],
    ) -> list[Episode]:
        """Run sessions (session id, prefix) concurrently through verl's ``_run_agent_loop``; every session
        settles before the first error, if any, is raised."""
        self._started[uid] = self._started.get(uid, 0) + len(specs)
        tasks = [
            asyncio.create_task(
                self._run_agent_loop(
                    dict(sampling_params), trajectory, trace=trace, session_id=s, trace_prefix=p, **prompt
                )
            )
            for s, p in specs
        ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]
        return [self._episodes.pop((uid, s)) for s, _ in specs]

    async def _expand(
        self, uid: str, m: int, prompt: dict, sampling_params: dict, trajectory: dict, trace: bool
    ) -> FinishedPrompt:
        if m < 1:
            raise ValueError(f"__rollout_n__ must be >= 1 for a submitted prompt, got {m}")
        task = task_from_row(prompt)
        predictor = await self._remote_predictor()
        method = effective_method(get_method(self.trace.method), await predictor.is_warm())
        replays = self.trace.continuations * m
        budget, unit = prefix_budget(
            replays, self.trace.replay_cost, method=method, accounting=self.trace.accounting
        )
        allocator = replay_allocator(
            method,
            predictor,
            replay_cost=self.trace.replay_cost,
            accounting=self.trace.accounting,
            rng_of=lambda t: np.random.default_rng(zlib.crc32(uid.encode())),
            max_per_prefix=self.trace.max_replays_per_anchor or None,
        )
        prompt_ids: list[np.ndarray] = []  # the roots' prompt ids, once they returned

        async def run_sessions(sessions: Sequence[Session]) -> list[Episode]:
            specs = [
                (
                    s.index,
                    None
                    if s.start is None  # roots and fresh rollouts start from the prompt
                    else TracePrefix(
                        np.asarray(prompt_ids[0], dtype=np.int64), s.prefix_turns, s.prefix_sessions, s.start
                    ),
                )
                for s in sessions
            ]
            episodes = await self._sessions(uid, prompt, sampling_params, trajectory, trace, specs)
            if episodes and not prompt_ids:
                prompt_ids.append(episodes[0].prompt_ids)
            return episodes

        result: PromptResult = await expand_prompt(
            task,
            m,
            run_sessions,
            allocator,
            budget,
            unit=unit,
            fresh_anchor=method.fresh,
            meta={"uid": uid, "task_id": task.id},
        )
        return FinishedPrompt(
            uid, task, result.tree, m, result.k, result.values, replays, fresh=result.fresh,
            spent=result.spent, unspent=result.unspent, allocation=method.name,
        )  # fmt: skip

    async def _remote_predictor(self) -> RemotePredictor:
        """The shared predictor actor, looked up on first use, with its current ``is_warm``."""
        if self._predictor is None:
            self._predictor = await RemotePredictor.connect(predictor_handle(self.trace))
        return self._predictor

    def pop_finished(self) -> list[dict[str, Any]]:
        """Summaries (`FinishedPrompt.summary`) of the prompts finished since the last call, with the predictor
        examples of each tree (``examples``: text, target, depth, weight) for the trainer's update."""
        out: list[dict[str, Any]] = []
        profile = self._predictor
        if profile is None:  # no prompt has run on this worker yet, so none has finished
            return out
        for f in self._finished:
            rec = f.summary()
            rec["examples"] = [
                {"text": e.text, "target": e.target, "depth": e.depth, "weight": e.weight}
                for e in node_examples(
                    f.tree,
                    f.task.prompt,
                    max_chars=profile.max_chars,
                    weighting=profile.example_weighting,
                    text_of=profile.text,  # the function the trainer scores prompts with
                )
            ]
            out.append(rec)
        self._finished = []
        return out


class TraceAgentLoopManager(AgentLoopManagerTQ):  # type: ignore[misc]
    """verl ``AgentLoopManagerTQ`` whose workers are `TraceAgentLoopWorker` actors. Select it with
    ``+actor_rollout_ref.rollout.agent.agent_loop_manager_class=trace_rl.integrations.verl.worker.TraceAgentLoopManager``."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = ray.remote(TraceAgentLoopWorker)

    def pop_finished(self) -> list[dict[str, Any]]:
        """`TraceAgentLoopWorker.pop_finished` over every worker."""
        parts = ray.get([w.pop_finished.remote() for w in self.agent_loop_workers])
        return [rec for part in parts for rec in part]

    def pop_failed(self) -> list[dict[str, Any]]:
        """`TraceAgentLoopWorker.pop_failed` over every worker."""
        parts = ray.get([w.pop_failed.remote() for w in self.agent_loop_workers])
        return [rec for part in parts for rec in part]

    def held_episodes(self) -> int:
        """Episodes held by all workers now (`TraceAgentLoopWorker.held_episodes`)."""
        return sum(ray.get([w.held_episodes.remote() for w in self.agent_loop_workers]))
