"""TRACE's per-prompt stage inside verl's v1 agent-loop workers (`TraceAgentLoopWorker`, `TraceAgentLoopManager`).

verl 0.9.1's ``AgentLoopWorkerTQ._run_prompt`` runs ``__rollout_n__`` sessions of one prompt and tags its uid
``finished`` only after all settle, each session writing its rows to TransferQueue as ``{uid}_{session}_{i}``.
`TraceAgentLoopWorker` overrides exactly that method for ``trace_agent`` rows (validation and other agents keep
verl's path) and, for one prompt:

1. runs its m_i = ``__rollout_n__`` root sessions (sessions 0..m_i-1);
2. builds the prompt's `RolloutTree` from them, takes its anchors (non-root, non-leaf turn prefixes of the roots),
   scores each with the shared predictor (V_j) and sets q_j = r_j V_j + (1 - r_j)(1 - V_j);
3. allocates the local budget of N * m_i replays with `allocate_prefixes` (exact; unit costs);
4. launches the k_j replays of each anchor as sessions m_i, m_i + 1, ... from the anchor's save point (token
   prefix + environment snapshot), with the same request id (the uid) as the roots: verl's sticky routing sends
   them to the replica holding the prefix in its cache;
5. tags the uid ``finished`` (``failure`` if any session raised, after every session settled) and keeps the
   finished tree for the trainer's predictor update (`pop_finished`).

Every session is verl's own ``_run_agent_loop`` + ``_agent_loop_postprocess`` (scoring is skipped: the trace-rl
environment sets the reward), so rows, keys and tags are verl's; `_agent_loop_postprocess` only adds the row
layout fields ``trace_sessions`` and ``trace_turn_lens`` (int64, one entry per turn) and keeps the episode (with
its save points) in the worker instead of TransferQueue.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch
import transfer_queue as tq
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

from trace_rl.allocation import allocate_prefixes, repeat_probability
from trace_rl.integrations.verl.agent_loop import EPISODE_KEY, TRACE_AGENT, TracePrefix, task_from_row
from trace_rl.integrations.verl.config import TraceVerlConfig
from trace_rl.integrations.verl.predictor import predictor_handle
from trace_rl.predictor import node_examples, serialize_anchor
from trace_rl.rollout.agent import Episode, SavePoint
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
        roots: m_i. k: int64 (J,) replays per anchor (anchor order of ``tree.anchors()`` after the roots).
        anchor_values: float64 (J,) the predictor's V_j. replay_budget: N * m_i.
    """

    uid: str
    task: Task
    tree: RolloutTree
    roots: int
    k: np.ndarray
    anchor_values: np.ndarray
    replay_budget: int

    @property
    def replays(self) -> int:
        return int(self.k.sum())

    def summary(self) -> dict[str, Any]:
        """Plain-type record (the tree as `RolloutTree.to_dict`) that crosses Ray and JSON."""
        return {
            "uid": self.uid,
            "task_id": self.task.id,
            "prompt": self.task.prompt,
            "roots": self.roots,
            "replays": self.replays,
            "replay_budget": self.replay_budget,
            "k": [int(x) for x in self.k],
            "anchor_values": [float(x) for x in self.anchor_values],
            "tree": self.tree.to_dict(),
        }


class TraceAgentLoopWorker(_WorkerBase):  # type: ignore[misc, valid-type]
    """verl ``AgentLoopWorkerTQ`` running TRACE's per-prompt stage (module doc). Same constructor as verl's."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.trace = TraceVerlConfig.from_verl(self.config)
        self._episodes: dict[tuple[str, int], Episode] = {}
        self._finished: list[FinishedPrompt] = []
        self._predictor: Any = None  # the shared predictor actor, looked up on first use

    async def _agent_loop_postprocess(self, output: Any, validate: Any, **kwargs: Any) -> Any:
        kwargs.pop("trace_prefix", None)  # a worker-side object, not a row field
        outputs = output if isinstance(output, list) else [output]
        for out in outputs:
            episode = out.extra_fields.pop(EPISODE_KEY, None)
            if episode is not None:
                self._episodes[(str(kwargs["uid"]), int(kwargs["session_id"]))] = episode
        last = outputs[-1].extra_fields if outputs else {}
        if "trace_sessions" in last:
            kwargs["trace_sessions"] = torch.tensor(last["trace_sessions"], dtype=torch.int64)
            kwargs["trace_turn_lens"] = torch.tensor(last["trace_turn_lens"], dtype=torch.int64)
        return await super()._agent_loop_postprocess(output, validate, **kwargs)

    async def _run_prompt(
        self, prompt: dict, sampling_params: dict, trajectory: dict, trace: bool = False
    ) -> None:
        if trajectory["validate"] or prompt.get("agent_name") != TRACE_AGENT:
            return await super()._run_prompt(prompt, sampling_params, trajectory, trace)
        uid = str(prompt["uid"])
        await tq.async_kv_put(key=uid, partition_id="train", tag={"status": "running"})
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
            await tq.async_kv_put(key=uid, partition_id="train", tag={"status": status})

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
        roots = await self._sessions(
            uid, prompt, sampling_params, trajectory, trace, [(i, None) for i in range(m)]
        )
        tree = RolloutTree.new(prompt_ids=roots[0].prompt_ids, meta={"uid": uid, "task_id": task.id})
        origin: dict[int, int] = {}  # node -> session that sampled it
        save_of: dict[int, SavePoint] = {}
        for s, ep in enumerate(roots):
            nodes = tree.add_rollout(ep.turns, ep.reward)
            origin.update({int(n): s for n in nodes})
            save_of.update({int(n): sp for n, sp in zip(nodes[:-1], ep.save_points, strict=False)})
        anchors = [a for a in tree.anchors() if a.node in save_of]
        paths = [tree.path_to(a.node)[1:] for a in anchors]  # the prefix's nodes, first turn first
        prefixes = [
            TracePrefix(
                np.asarray(tree.prompt_ids, dtype=np.int64),
                tuple(t for t in (tree.turn(int(n)) for n in path) if t is not None),
                tuple(origin[int(n)] for n in path),
                save_of[a.node],
            )
            for a, path in zip(anchors, paths, strict=True)
        ]
        budget = self.trace.continuations * m
        values = np.zeros(len(anchors))
        k = np.zeros(len(anchors), dtype=np.int64)
        if anchors and budget > 0:
            texts = [serialize_anchor(task.prompt, p.turns) for p in prefixes]
            if self._predictor is None:
                self._predictor = predictor_handle(self.trace)
            values = np.asarray(await self._predictor.predict.remote(texts), dtype=np.float64)
            q = repeat_probability([a.reward for a in anchors], values)
            k = allocate_prefixes(q, budget, max_per_prefix=self.trace.max_replays_per_anchor or None)
        jobs: list[tuple[int, TracePrefix, int]] = []  # (session id, prefix, anchor node)
        for a, prefix, kj in zip(anchors, prefixes, k.tolist(), strict=True):
            jobs += [(m + len(jobs) + r, prefix, a.node) for r in range(int(kj))]
        replays = await self._sessions(
            uid, prompt, sampling_params, trajectory, trace, [(s, p) for s, p, _ in jobs]
        )
        for (_, _, node), ep in zip(jobs, replays, strict=True):
            tree.add_replay(node, ep.turns, ep.reward)
        return FinishedPrompt(uid, task, tree, m, k, values, budget)

    def pop_finished(self) -> list[dict[str, Any]]:
        """Summaries (`FinishedPrompt.summary`) of the prompts finished since the last call, with the predictor
        examples of each tree (``examples``: text, target, depth, weight) for the trainer's update."""
        out = []
        for f in self._finished:
            rec = f.summary()
            rec["examples"] = [
                {"text": e.text, "target": e.target, "depth": e.depth, "weight": e.weight}
                for e in node_examples(f.tree, f.task.prompt)
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
