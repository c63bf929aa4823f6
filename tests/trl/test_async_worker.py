"""AsyncGRPOTrainer (TRL 1.16, experimental) trained on CPU for two optimizer steps with TraceRolloutWorker feeding
it and TraceWeightPush syncing the generator. TRL's FA3 tree attention is swapped for the PyTorch one
(trace_rl.integrations.trl.cpu); everything else is TRL's own code: the rollout queue, the staleness
filter, the tree packer, the collator, the loss, the weight-sync callbacks and the version bookkeeping."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import torch
from datasets import Dataset
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

from tests.trl.helpers import parity_env, parity_tasks
from trace_rl.advantages import token_advantages, tree_grpo_advantages
from trace_rl.allocation import METHODS, Method, allocate_roots
from trace_rl.integrations.trl import TraceSettings, tasks_dataset_rows
from trace_rl.integrations.trl.cpu import enable_cpu_async_grpo
from trace_rl.integrations.trl.worker import TraceRolloutWorker
from trace_rl.policy import load_policy

ROOTS = 4  # M per worker step; N = 1 replay per root


class RecordingAsyncGRPOTrainer(AsyncGRPOTrainer):
    """AsyncGRPOTrainer that keeps the advantage of every token its loss is taken over."""

    trained_advantages: list[np.ndarray]

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        selected = inputs["token_index"] >= 0
        self.trained_advantages.append(inputs["advantages"][selected].detach().numpy().copy())
        return super().compute_loss(model, inputs, *args, **kwargs)


def _recording_trace(plans: list[tuple[np.ndarray, Any]]) -> Method:
    trace = METHODS["trace"]

    def roots(v: np.ndarray, shape: Any, rng: np.random.Generator) -> Any:
        plan = trace.roots(v, shape, rng)
        plans.append((np.asarray(v).copy(), plan))
        return plan

    return Method("trace", roots, trace.prefixes, uses_predictor=True)


def test_async_grpo_trainer_trains_on_trace_worker(tmp_path: Any) -> None:
    torch.manual_seed(0)
    folder = tmp_path / "policy"
    load_policy("tiny", seed=3).save(folder)
    tasks = parity_tasks(8)
    settings = TraceSettings(
        continuations=1, max_turns=3, max_new_tokens=6, max_rollouts=4, estimator="tree_grpo", seed=0
    )  # estimator auto would train TreeRPO on these tasks (not bfcl): one row per turn
    generator = load_policy(str(folder))
    worker = TraceRolloutWorker(
        tasks, generator, parity_env, settings, roots=ROOTS, group_size=2, pool_size=4
    )
    plans: list[tuple[np.ndarray, Any]] = []
    worker.method = _recording_trace(plans)
    args = AsyncGRPOConfig(
        output_dir=str(tmp_path / "async"),
        max_steps=2,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        temperature=settings.temperature,
        token_budget=0,  # fixed-count micro-batches (no vLLM server to ask for max_model_len)
        gradient_checkpointing=False,
        bf16=False,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        max_staleness=4,
    )
    enable_cpu_async_grpo()
    trainer = RecordingAsyncGRPOTrainer(
        model=str(folder),
        args=args,
        train_dataset=Dataset.from_list(tasks_dataset_rows(tasks)),
        rollout_worker=worker,
        weight_transfer=worker.weight_transfer(),
    )
    trainer.trained_advantages = []
    start = time.time()
    trainer.train()
    assert time.time() - start < 300

    # two optimizer steps, and the generator got the weights after each (initial sync + one per step)
    assert trainer.state.global_step == 2
    assert trainer.model_version == 3 and worker.version == 3
    trained = dict(trainer.accelerator.unwrap_model(trainer.model).named_parameters())
    for name, param in generator.model.named_parameters():
        assert torch.equal(param.detach(), trained[name].detach()), name
    history = list(worker.history)
    versions = [h.version for h in history]
    assert (
        versions == sorted(versions) and versions[0] == 1 and versions[-1] >= 2
    )  # later steps: newer weights

    # root allocation: every warm step's roots are allocate_roots(v, M, ...) on that step's predictor values
    warm = [h for h in history if h.record["allocation"] == "trace"]
    assert warm, "the predictor never warmed up"
    assert history[0].record["allocation"] == "treepo"  # cold start: uniform roots before the first update
    assert len(plans) >= len(warm)
    for h, (v, plan) in zip(warm, plans, strict=False):
        shape = worker.shape
        expected = allocate_roots(
            v,
            shape.roots,
            min_rollouts=shape.min_rollouts,
            max_rollouts=shape.max_rollouts,
            max_active=shape.batch_size,
        )
        assert np.array_equal(plan.rollouts, expected)
        assert [len(r.roots) for r in h.results] == expected[expected > 0].tolist()

    for h in history:
        # replays come from turn prefixes of the roots and stay within the prompt's local budget N m_i
        for r in h.results:
            assert len(r.replays) <= settings.continuations * len(r.roots)
            parent, replay = np.asarray(r.tree.parent), np.asarray(r.tree.is_replay)
            for node, _ in r.replays:
                assert node != 0 and not replay[node]
                assert any(not replay[c] for c in np.flatnonzero(parent == node))  # the root went on past it
        # every sample's advantage is trace-rl's Tree-GRPO advantage of its path
        by_group = dict(zip(h.group_ids, h.results, strict=True))
        assert h.samples
        for group, node, advantage in h.samples:
            tree = by_group[group].tree
            ref = {
                int(p.leaf): float(p.advantages[p.loss_mask == 1][0])
                for p in token_advantages(tree, tree_grpo_advantages(tree))
            }
            assert abs(advantage - ref[node]) < 1e-6
    pushed = np.array([a for h in history for _, _, a in h.samples])
    assert np.any(np.abs(pushed) > 0.1)
    # what the trainer's loss used are those advantages (token by token)
    used = np.concatenate(trainer.trained_advantages)
    assert used.size > 0
    assert np.all(np.min(np.abs(used[:, None] - pushed[None, :]), axis=1) < 1e-6)

    # the worker's step records reach TRL's logs
    logged = {k for entry in trainer.state.log_history for k in entry}
    assert {"trace/budget_spent", "trace/effective_ratio", "trace/root_rollouts"} <= logged

    # the predictor was updated between steps
    assert history[0].record["predictor_updates"] > 0
    assert all(h.record["predictor_warm"] == 1.0 for h in history[1:])


def test_worker_refuses_foreign_weights_and_reports_failures() -> None:
    policy = load_policy("tiny", seed=3)

    def broken_env() -> Any:
        raise RuntimeError("env factory exploded")

    worker = TraceRolloutWorker(
        parity_tasks(4),
        policy,
        broken_env,
        TraceSettings(continuations=1),
        roots=4,
        group_size=2,
        pool_size=4,
    )
    with pytest.raises(RuntimeError, match="not running"):
        worker.check_health(60.0)
    with pytest.raises(ValueError, match="generator at 0"):
        worker.update_model_version(1)  # a sync that did not go through TraceWeightPush
    worker.start()
    deadline = time.time() + 60
    while worker._thread is not None and worker._thread.is_alive() and time.time() < deadline:
        time.sleep(0.05)
    with pytest.raises(RuntimeError, match="failed") as info:
        worker.check_health(60.0)
    assert "env factory exploded" in str(info.value)
    worker.stop()
