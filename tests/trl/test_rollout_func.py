"""GRPOTrainer with trace_rollout_func: two real optimizer steps on the tiny policy (TRL 1.16, CPU)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from datasets import Dataset

from tests.trl.helpers import parity_env, parity_tasks
from trace_rl.advantages import token_advantages, tree_grpo_advantages
from trace_rl.integrations.trl import TraceSettings, tasks_dataset_rows
from trace_rl.integrations.trl.rollout_func import (
    trace_advantage_reward,
    trace_env_reward,
    trace_rollout_func,
)
from trace_rl.policy import load_policy
from trl import GRPOConfig, GRPOTrainer

G = 4  # num_generations: cap = G // (1 + N) = 2 roots per prompt with N = 1


class RecordingGRPOTrainer(GRPOTrainer):
    """GRPOTrainer that keeps what its own scoring code hands to the loss."""

    captured: list[dict[str, Any]]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        self.captured.append({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in out.items()})
        return out


def _is_turn_prefix(tree: Any, node: int) -> bool:
    """A non-root node of a root rollout that its rollout continued past (not the rollout's last turn)."""
    parent = np.asarray(tree.parent)
    replay = np.asarray(tree.is_replay)
    children = np.flatnonzero(parent == node)
    return node != 0 and not replay[node] and any(not replay[c] for c in children)


def _config(tmp_path: Any, **overrides: Any) -> GRPOConfig:
    kwargs: dict[str, Any] = dict(
        output_dir=str(tmp_path / "grpo"),
        max_steps=2,
        per_device_train_batch_size=3 * G,  # 3 prompts per step
        num_generations=G,
        learning_rate=1e-3,
        scale_rewards="none",
        gradient_checkpointing=False,
        use_cpu=True,
        bf16=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=0,
        reward_weights=[1.0, 0.0],
    )
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


def _trainer(cls: type[GRPOTrainer], policy: Any, tasks: list[Any], rollout_func: Any, tmp_path: Any) -> Any:
    """A ``cls`` (GRPOTrainer or a subclass) on the tasks' dataset with TRACE's rewards and ``rollout_func``."""
    return cls(
        model=policy.model,
        processing_class=policy.tokenizer,
        reward_funcs=[trace_advantage_reward, trace_env_reward],
        args=_config(tmp_path),
        train_dataset=Dataset.from_list(tasks_dataset_rows(tasks)),
        rollout_func=rollout_func,
    )


def test_grpo_trainer_trains_two_steps_on_trace_rows(tmp_path: Any) -> None:
    torch.manual_seed(0)
    policy = load_policy("tiny", seed=3)
    tasks = parity_tasks(6)
    settings = TraceSettings(continuations=1, max_turns=3, max_new_tokens=6, predictor="ngram", seed=0)
    rollout = trace_rollout_func(tasks, policy, parity_env, settings, root_budget=4)  # 2 of 3 prompts active
    calls: list[tuple[list[Any], dict[str, Any], list[Any]]] = []

    def recording(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out = rollout(prompts, trainer)
        calls.append((prompts, out, list(rollout.last_results)))
        return out

    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    trainer = _trainer(RecordingGRPOTrainer, policy, tasks, recording, tmp_path)
    trainer.captured = []
    trainer.train()

    assert trainer.state.global_step == 2
    assert len(calls) == 2 and len(trainer.captured) == 2
    for (prompts, out, results), seen in zip(calls, trainer.captured, strict=True):
        n = len(prompts)
        assert n == 3 * G
        assert all(len(out[k]) == n for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask"))
        pad = np.array([a is None for a in out["trace_advantage"]])
        assert pad.any() and (~pad).any()
        # padded rows put no token into the loss; every real row has model tokens in it
        loss_mask = (seen["completion_mask"] * seen["tool_mask"]).sum(dim=1).numpy()
        assert np.all(loss_mask[pad] == 0)
        assert np.all(loss_mask[~pad] > 0)
        # the advantages TRL computed (and the loss uses) are the tree advantages; 0 on padding
        ours = np.array([0.0 if a is None else a for a in out["trace_advantage"]])
        assert np.max(np.abs(seen["advantages"].numpy() - ours)) < 1e-6
        assert np.any(np.abs(ours) > 0.1)  # trees with both outcomes: the check is not all zeros
        # ... and those are trace-rl's Tree-GRPO advantages of each prompt's tree, leaf by leaf, padding after
        texts = [p[-1]["content"] for p in prompts[::G]]
        for result in results:
            group = texts.index(result.task.prompt)
            reference = [
                float(t.advantages[t.loss_mask == 1][0])
                for t in token_advantages(result.tree, tree_grpo_advantages(result.tree))
            ]
            got = out["trace_advantage"][group * G : group * G + len(reference)]
            assert np.max(np.abs(np.array(got) - np.array(reference))) < 1e-6
            assert all(
                a is None for a in out["trace_advantage"][group * G + len(reference) : (group + 1) * G]
            )
            assert len(result.roots) == 2 and len(result.replays) <= 2  # m_i = cap, at most N m_i replays
            assert all(_is_turn_prefix(result.tree, node) for node, _ in result.replays)

    # the rows are the trees trace-rl built, with the estimator's leaf advantages
    records = rollout.records
    assert [r["step"] for r in records] == [0, 1]
    assert (
        records[0]["allocation"] == "treepo" and records[1]["allocation"] == "trace"
    )  # cold start, then warm
    assert records[1]["predictor_warm"] == 1.0 and records[0]["predictor_updates"] > 0
    for record, plan in zip(records, rollout.plans, strict=True):
        assert plan.sum() == 4 and set(np.unique(plan)) <= {0, 2}  # root_budget 4, cap 2
        assert record["replays"] <= 1 * record["root_rollouts"]  # N m_i per prompt
        assert record["budget_spent"] == record["root_rollouts"] + 0.5 * record["replays"]

    moved = max(float((p.detach() - before[n]).abs().max()) for n, p in policy.model.named_parameters())
    assert moved > 0.0


def test_refuses_settings_that_cannot_take_effect(tmp_path: Any) -> None:
    policy = load_policy("tiny", seed=3)
    tasks = parity_tasks(2)
    with pytest.raises(ValueError, match="TreeRPO"):
        trace_rollout_func(tasks, policy, parity_env, TraceSettings(estimator="treerpo"))
    with pytest.raises(ValueError, match="tree methods"):
        trace_rollout_func(tasks, policy, parity_env, TraceSettings(method="grpo"))
    with pytest.raises(ValueError, match="hidden states"):  # only trace-rl's own trainer attaches a policy
        TraceSettings(predictor="ngram+minilm+state")
    rollout = trace_rollout_func(tasks, policy, parity_env, TraceSettings(continuations=1))
    trainer = GRPOTrainer(
        model=policy.model,
        processing_class=policy.tokenizer,
        reward_funcs=[trace_advantage_reward],
        args=_config(tmp_path, scale_rewards="group", reward_weights=None, per_device_train_batch_size=G),
        train_dataset=Dataset.from_list(tasks_dataset_rows(tasks)),
        rollout_func=rollout,
    )
    prompts = [[{"role": "user", "content": tasks[0].prompt}]] * G
    trainer.model.train()
    with pytest.raises(ValueError, match="scale_rewards='none'"):
        rollout(prompts, trainer)
    trainer.scale_rewards = "none"
    with pytest.raises(ValueError, match="repeated num_generations"):
        rollout([prompts[0]] * (G - 1) + [[{"role": "user", "content": tasks[1].prompt}]], trainer)
    trainer.model.eval()
    with pytest.raises(ValueError, match="training steps only"):
        rollout(prompts, trainer)


def test_group_predictor_gets_its_consensus_rows_inside_trl(tmp_path: Any) -> None:
    """The group-aware predictors read rows the step registers (`training_step` -> replay_allocator and the
    predictor update): inside TRL the same step runs, so the second, warm step scores anchors with registered rows
    (an unregistered prefix text would raise) and every kept update holds one row per text."""
    torch.manual_seed(0)
    policy = load_policy("tiny", seed=3)
    tasks = parity_tasks(6)
    settings = TraceSettings(
        continuations=1, max_turns=3, max_new_tokens=6, predictor="ngram+minilm+group-prior", seed=0
    )
    rollout = trace_rollout_func(tasks, policy, parity_env, settings, root_budget=4)
    _trainer(GRPOTrainer, policy, tasks, rollout, tmp_path).train()
    assert [r["allocation"] for r in rollout.records] == ["treepo", "trace"]  # step 2 scored with the rows
    predictor = rollout.parts.predictor
    assert predictor.uses_group and predictor.num_updates == 2
    for batch in predictor._batches:
        assert batch.kept["groups"].shape == (len(batch.texts), 3)
        prefix = np.array(["[TURN 1]" in text for text in batch.texts])
        assert (
            prefix.any() and (batch.kept["groups"][~prefix] == 0).all()
        )  # prompt texts: zeros by definition
