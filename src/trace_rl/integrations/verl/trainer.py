"""`TraceTrainer`: verl's synchronous v1 trainer with TRACE's root allocation, registered as
``trainer.v1.trainer_mode=trace_sync`` through verl's ``register_trainer``.

Only four methods differ from ``PPOTrainerSync``; ``fit()`` (validation, checkpoints, logging, TransferQueue
cleanup), the replay buffer and the update are verl's:

- `prepare_step`: fetch a candidate pool (``trace.candidate_pool`` prompts), score each prompt with the shared
  predictor (v_i), solve ``allocate_roots(v, M, min_rollouts, max_rollouts, max_active)`` and submit only the
  prompts with m_i > 0, each with ``__rollout_n__ = m_i`` (the agent-loop worker then adds N * m_i replays).
- `_step_once`: sample exactly the submitted (active) prompt groups from the replay buffer, so it never waits for
  skipped prompts. The buffer is `TraceReplayBuffer`: verl's sync ``ReplayBuffer`` that drops a failed prompt's
  group from the step's selection (the step trains on the other prompts).
- `_compute_advantage`: for ``trace_treerpo`` / ``trace_tree_grpo``, fetch each row's tree layout from
  TransferQueue and run verl's own ``_compute_advantage`` with it (`estimators.tree_layouts`).
- `on_step_end`: verl's weight sync, then `trace_step_metrics`: one predictor update on the finished trees' nodes
  (target: mean leaf reward below the node) and TRACE metrics (``trace/*``, failed prompts included).

verl checks ``trainer_mode == "sync"`` in several places (replay buffer class, checkpoint and prompt persistence),
so the trainer runs with ``self.trainer_mode = "sync"`` once constructed: it is verl's sync mode plus the above.
``parameter_sync_step`` must be 1 (one update per step, on-policy replays).

Epochs: a step reads ``trace.candidate_pool`` prompts, so `_init_dataloader` sets verl's ``steps_per_epoch`` to
len(train dataset) // candidate_pool (and the step total from it, unless ``trainer.total_training_steps`` is
set): one epoch is one pass over the data, whatever the pool. Refused settings (they cannot take effect within the
root plan): ``trainer.v1.sampler.sync_refill_failed_groups`` (refills would run ``rollout.n`` sessions of new
prompts outside it), ``algorithm.filter_groups.enable`` (DAPO refills, likewise) and
``trainer.v1.sampler.custom_sampler`` (the failed-prompt rule lives in `TraceReplayBuffer`). Needs verl >= 0.9.1
(`check_verl_version`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import ray
import torch
from omegaconf import OmegaConf

from trace_rl.allocation import allocate_roots
from trace_rl.integrations.verl import check_verl_version
from trace_rl.integrations.verl.agent_loop import task_from_row
from trace_rl.integrations.verl.compat import (
    PPOTrainerSync,
    ReplayBuffer,
    register_trainer,
    tq,
    tu,
    verl_version,
)
from trace_rl.integrations.verl.config import TraceVerlConfig
from trace_rl.integrations.verl.estimators import TRACE_ESTIMATORS, tree_layouts
from trace_rl.integrations.verl.layout import RowLayout
from trace_rl.integrations.verl.predictor import predictor_handle, predictor_text
from trace_rl.integrations.verl.record import RECORD_FIELDS, StepRecorder

LAYOUT_FIELDS = ["trace_sessions", "trace_turn_lens"]


def plan_roots(
    v: npt.ArrayLike, config: TraceVerlConfig, *, train_batch_size: int, rollout_n: int
) -> npt.NDArray[np.int64]:
    """Root rollouts per candidate: ``allocate_roots(v, M, min_rollouts, max_rollouts, max_active)``.

    Args:
        v: float (P,) predicted success of each candidate prompt, in [0, 1].
        config: ``trace.root_budget`` (M; 0 means rollout_n * train_batch_size, GRPO's spend on roots),
            ``max_active`` (0 means train_batch_size), ``min_rollouts``, ``max_rollouts``.

    Returns:
        int64 (P,) m with sum(m) == M, each 0 or in [min, max], at most max_active non-zero.

    Raises:
        ValueError: from `allocate_roots` (invalid v, or a budget the caps cannot absorb).
    """
    budget = config.root_budget or rollout_n * train_batch_size
    return allocate_roots(
        v,
        budget,
        min_rollouts=config.min_rollouts,
        max_rollouts=config.max_rollouts,
        max_active=config.max_active or train_batch_size,
    )


def refuse_unsupported(config: Any) -> None:
    """Raise ValueError for verl settings that cannot take effect with TRACE's root plan (module doc)."""
    sampler = OmegaConf.select(config, "trainer.v1.sampler.sync_refill_failed_groups", default=False)
    if sampler:
        raise ValueError(
            "trace_sync cannot refill failed prompt groups (trainer.v1.sampler.sync_refill_failed_groups): a "
            "refill would run rollout.n sessions of prompts outside the root plan; a failed prompt is dropped "
            "for its step instead (docs/integrations.md)"
        )
    if OmegaConf.select(config, "algorithm.filter_groups.enable", default=False):
        raise ValueError(
            "trace_sync cannot use algorithm.filter_groups (DAPO refills submit prompts outside the root plan; "
            "TRACE's root allocation replaces that filter)"
        )
    custom = OmegaConf.select(config, "trainer.v1.sampler.custom_sampler", default=None)
    if custom is not None and custom.get("path") and custom.get("name"):
        raise ValueError(
            "trace_sync cannot use trainer.v1.sampler.custom_sampler: its replay buffer is TraceReplayBuffer, "
            "which drops failed prompts from a step (docs/integrations.md); to customise sampling, return a "
            "TraceReplayBuffer subclass from a TraceTrainer subclass's _build_replay_buffer"
        )


class FailedStepError(RuntimeError):
    """Every prompt group a step selected failed: the step has no row to train on."""


class TraceReplayBuffer(ReplayBuffer):  # type: ignore[misc]
    """verl's synchronous ``ReplayBuffer`` with TRACE's rule for failed prompts.

    verl 0.9.1 selects terminal groups (uid tagged ``finished`` or ``failure``) in `_select_prompt_uids`, then
    `sample` raises "selected terminal groups with no materializable trajectories" when no selected group has a
    row, unless ``sync_refill_failed_groups`` refills failed groups with new prompts (outside TRACE's root plan,
    so `TraceTrainer` refuses it). Here, in the ``train`` partition, a selected group tagged ``failure`` is removed
    from the selection and from TransferQueue (its prompt key and any row left; `TraceAgentLoopWorker` already
    removed its sessions' rows) before verl materializes the batch: the step trains on the other selected
    prompts, nothing is refilled, no partial tree is trained on. The count is reported under verl's own metric
    ``training/rollout_failure/evicted_samples``. Validation (``val``) keeps verl's behaviour.

    Raises:
        FailedStepError: from `sample`, when every selected group failed (nothing to train on; the failed groups
            are removed first, so nothing stays behind in TransferQueue).
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._dropped_failed = 0  # failed groups dropped from the current sample's selection

    def _select_prompt_uids(
        self, partition_id: str, sampleable_keys: set[str], batch_size: int
    ) -> tuple[list[str], dict[str, dict], dict[str, int]]:
        selected, partition, steps = super()._select_prompt_uids(partition_id, sampleable_keys, batch_size)
        if partition_id == "val":
            return selected, partition, steps
        failed = {uid for uid in selected if uid in self.failure_keys[partition_id]}
        if failed:
            self._clear_groups(partition_id, failed)
            self._dropped_failed += len(failed)
            selected = [uid for uid in selected if uid not in failed]
        if not selected:
            raise FailedStepError(
                f"every prompt selected for this step failed ({len(failed)} prompt group(s); the sessions' errors "
                "are in the agent-loop workers' log): no row to train on. A failed prompt is dropped from its "
                "step and the other prompts train (docs/integrations.md); when all fail, the cause is systemic "
                "(a server or environment down)"
            )
        return selected, partition, steps

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        """verl's sync `sample` with failed groups dropped from the selection (class doc)."""
        self._dropped_failed = 0
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        if self._dropped_failed:
            key = f"{self._metrics_prefix(partition_id)}/rollout_failure/evicted_samples"
            metrics[key] = metrics.get(key, 0) + self._dropped_failed
        return batch, metrics


def row_prompt(row: dict[str, Any]) -> str:
    """The prompt of a verl row: ``extra_info.trace_task.prompt`` (what the agent loop runs, `task_from_row`),
    else the last user message of ``raw_prompt`` (or ``prompt``); "" when there is none."""
    info = row.get("extra_info") or {}
    if isinstance(info, dict) and info.get("trace_task") is not None:
        return task_from_row(row).prompt
    messages = row.get("raw_prompt") or row.get("prompt") or []
    users = [m.get("content", "") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1] if users else "")


def root_anchor_text(row: dict[str, Any], *, max_chars: int) -> str:
    """The text the predictor scores for a prompt: `predictor_text` of `row_prompt` (a depth-0 anchor) at the
    predictor's own ``max_chars``, the same text its training examples hold for that prompt's root.

    Raises:
        ValueError: ``max_chars`` below 64, or a row whose ``trace_task`` cannot be read.
    """
    return predictor_text(row_prompt(row), max_chars=max_chars)


def _field_rows(column: Any) -> list[Any]:
    """One item per row of a TransferQueue field: a (nested) tensor's rows, or the items of a list."""
    if isinstance(column, torch.Tensor):
        return list(column.unbind()) if column.is_nested else [column[i] for i in range(column.shape[0])]
    return list(column)


def fetch_layouts(
    keys: Sequence[str], tags: Sequence[dict[str, Any]], partition_id: str
) -> list[RowLayout | None]:
    """Each row's `RowLayout` from TransferQueue (None for verl's padding rows, tagged ``is_padding``)."""
    real = [i for i, t in enumerate(tags) if not t.get("is_padding", False)]
    out: list[RowLayout | None] = [None] * len(keys)
    if not real:
        return out
    data = tq.kv_batch_get(
        keys=[keys[i] for i in real], partition_id=partition_id, select_fields=LAYOUT_FIELDS
    )
    sessions, lens = _field_rows(data["trace_sessions"]), _field_rows(data["trace_turn_lens"])
    for j, i in enumerate(real):
        out[i] = RowLayout(
            np.asarray(torch.as_tensor(sessions[j]).cpu(), dtype=np.int64),
            np.asarray(torch.as_tensor(lens[j]).cpu(), dtype=np.int64),
        )
    return out


def _column(batch: Any, key: str) -> list[Any]:
    value = batch[key]
    if hasattr(value, "tolist"):
        return list(value.tolist())
    return list(value)


@register_trainer("trace_sync")
class TraceTrainer(PPOTrainerSync):  # type: ignore[misc]
    """verl ``PPOTrainerSync`` + TRACE root allocation and predictor (module doc). Same constructor."""

    def __init__(self, config: Any):
        check_verl_version(verl_version())  # compat checked it at import; a clear error if it was bypassed
        self.trace = TraceVerlConfig.from_verl(config)
        refuse_unsupported(config)
        super().__init__(config)
        if self.parameter_sync_step != 1:
            raise ValueError("trace_sync needs parameter_sync_step == 1 (one update per step)")
        self._active: int | None = None
        self._plan_metrics: dict[str, float] = {}
        self._predictor: Any = None
        self._recorder = StepRecorder(self.trace.record_dir) if self.trace.record_dir else None

    def candidate_pool(self) -> int:
        """Prompts read and scored per step: ``trace.candidate_pool``, default 2 x ``data.train_batch_size``."""
        return int(self.trace.candidate_pool or 2 * int(self.config.data.train_batch_size))

    def _init_dataloader(self) -> None:
        """verl's dataloaders, with ``steps_per_epoch`` counted in candidate pools (module doc)."""
        super()._init_dataloader()
        self.steps_per_epoch = max(len(self.train_dataset) // self.candidate_pool(), 1)
        if self.config.trainer.get("total_training_steps", None) is None:
            self.total_training_steps = self.steps_per_epoch * int(self.config.trainer.total_epochs)
            from omegaconf import open_dict

            with open_dict(self.config):
                for section in ("actor_rollout_ref.actor.optim", "critic.optim"):
                    optim = OmegaConf.select(self.config, section)
                    if optim is not None:
                        optim.total_training_steps = self.total_training_steps * self.parameter_sync_step

    def _build_replay_buffer(self) -> Any:
        """A `TraceReplayBuffer` with verl's sampler settings and no refill function: the settings that refill
        (DAPO, ``sync_refill_failed_groups``) and custom samplers are refused at construction."""
        self.trainer_mode = "sync"  # verl's sync mode everywhere it asks (module doc)
        sampler = self.config.trainer.v1.sampler
        return TraceReplayBuffer(
            trainer_mode=self.trainer_mode,
            trainer_config=self.config.trainer.v1.get(self.trainer_mode, {}),
            max_off_policy_threshold=sampler.max_off_policy_threshold,
            max_off_policy_strategy=sampler.max_off_policy_strategy,
            sampler_kwargs=sampler.sampler_kwargs,
        )

    def init(self) -> None:
        super().init()
        self._predictor = predictor_handle(self.trace, create=True)

    def prepare_step(self) -> dict:
        """Score a candidate pool, allocate roots, submit the active prompts; returns ``trace/*`` metrics."""
        tb = int(self.config.data.train_batch_size)
        pool = self._next_train_batch(self.candidate_pool())
        n = len(pool)
        rows = [
            {k: _column(pool, k)[i] for k in ("extra_info", "raw_prompt") if k in pool.keys()}
            for i in range(n)
        ]
        max_chars = int(ray.get(self._predictor.profile.remote())["max_chars"])  # the predictor's own limit
        v = np.asarray(
            ray.get(self._predictor.predict.remote([root_anchor_text(r, max_chars=max_chars) for r in rows])),
            dtype=np.float64,
        )
        m = plan_roots(
            v, self.trace, train_batch_size=tb, rollout_n=int(self.config.actor_rollout_ref.rollout.n)
        )
        active = np.flatnonzero(m)
        if active.size == 0:  # allocate_roots spends a positive budget: unreachable unless the budget is 0
            raise ValueError("the root allocation selected no prompt")
        batch = tu.index_select_tensor_dict(pool, torch.as_tensor(active, dtype=torch.long))
        batch["__rollout_n__"] = torch.as_tensor(m[active], dtype=torch.int64)
        self._submit_batch_to_rollout(batch)
        if self._recorder is not None:
            self._recorder.plan(self.global_steps, v, m, [str(u) for u in _column(batch, "uid")])
        self._active = int(active.size)
        self._plan_metrics = {
            "trace/candidates": float(n),
            "trace/active_prompts": float(active.size),
            "trace/skip_rate": float(1.0 - active.size / max(n, 1)),
            "trace/root_rollouts": float(m.sum()),
            "trace/rollouts_per_active_prompt": float(m[active].mean()) if active.size else 0.0,
        }
        return dict(self._plan_metrics)

    def _step_once(self, metrics: dict, timing_raw: dict, sample_batch_size: int) -> Any:
        return super()._step_once(metrics, timing_raw, self._active if self._active else sample_batch_size)

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        if self.config.algorithm.adv_estimator not in TRACE_ESTIMATORS:
            return super()._compute_advantage(batch, metrics)
        with tree_layouts(fetch_layouts(batch.keys, batch.tags, batch.partition_id)):
            out = super()._compute_advantage(batch, metrics)
        if self._recorder is not None:  # what verl wrote back, as the update will read it
            real = [k for k, t in zip(out.keys, out.tags, strict=True) if not t.get("is_padding", False)]
            data = tq.kv_batch_get(keys=real, partition_id=out.partition_id, select_fields=RECORD_FIELDS)
            self._recorder.batch(list(out.keys), list(out.tags), data)
        return out

    def update_predictor(self, finished: Sequence[dict[str, Any]]) -> dict[str, float]:
        """One predictor update on the nodes of finished trees (`TraceAgentLoopManager.pop_finished` records:
        text = serialized prefix, target = mean leaf reward below the node, weight as `node_examples`).

        Returns:
            ``trace/*`` metrics: the predictor's own (``trace/predictor_*``), replays and replay budget spent.
        """
        examples = [e for rec in finished for e in rec["examples"]]
        out: dict[str, float] = {}
        texts = [e["text"] for e in examples]
        before = ray.get(self._predictor.predict.remote(texts)) if self._recorder and texts else []
        if examples:
            stats = ray.get(
                self._predictor.update.remote(
                    [e["text"] for e in examples],
                    [e["target"] for e in examples],
                    [e["weight"] for e in examples],
                )
            )
            out.update(
                {f"trace/predictor_{k}": float(v) for k, v in stats.items() if isinstance(v, int | float)}
            )
            out["trace/predictor_examples"] = float(len(examples))
        if finished:
            out["trace/replays"] = float(sum(r["replays"] for r in finished))
            out["trace/replay_budget"] = float(sum(r["replay_budget"] for r in finished))
        if self._recorder is not None:
            after = ray.get(self._predictor.predict.remote(texts)) if texts else []
            self._recorder.trees(list(finished))
            self._recorder.predictor([float(x) for x in before], [float(x) for x in after], dict(out))
        return out

    def trace_step_metrics(self) -> dict[str, float]:
        """The step's TRACE metrics, from the prompts the workers finished or failed since the last call.

        Runs `update_predictor` on the finished trees and adds ``trace/failed_prompts`` (prompts dropped from
        the step because a session raised) and ``trace/failed_rollouts`` (the sessions those prompts started:
        they generated tokens, so they count as spent even though no row of theirs is trained on).
        """
        metrics = self.update_predictor(self.agent_loop_manager.pop_finished())
        failed = self.agent_loop_manager.pop_failed()
        metrics["trace/failed_prompts"] = float(len(failed))
        metrics["trace/failed_rollouts"] = float(sum(rec["rollouts"] for rec in failed))
        if self._recorder is not None:
            self._recorder.flush()
        return metrics

    def on_step_end(self) -> None:
        super().on_step_end()  # verl's weight sync to the rollout replicas
        metrics = self.trace_step_metrics()
        self._pending_sync_metrics = {**(getattr(self, "_pending_sync_metrics", None) or {}), **metrics}
