"""Issue 22: runs of one compare share held-out tasks; prompt sampling and allocation draw from their own RNG
stream, so how much randomness the policy update consumes never changes what later steps see."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trace_rl.train.step as step_module
import trace_rl.train.update as update_module
from trace_rl.train.config import load_config
from trace_rl.train.run import Trainer

REAL_STEP = step_module.training_step


def test_runs_with_different_seeds_evaluate_on_the_same_held_out_tasks(tmp_path: Path) -> None:
    cfg = load_config(preset="demo", overrides=["env.train_limit=200", "env.eval_tasks=64"])
    lists = {}
    for seed in (0, 1, 3):
        trainer = Trainer(replace(cfg, seed=seed), tmp_path / f"s{seed}", log=lambda _: None)
        trainer._load_tasks()
        lists[seed] = trainer
    ids = {seed: [t.id for t in tr.eval_tasks] for seed, tr in lists.items()}
    assert len(ids[0]) == 64 and ids[0] == ids[1] == ids[3]
    assert [t.prompt for t in lists[0].eval_tasks] == [t.prompt for t in lists[3].eval_tasks]
    # the RL pool too: a seed only orders it
    assert [t.id for t in lists[0].tasks] == [t.id for t in lists[1].tasks]


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, draws: int) -> list[dict[str, Any]]:
    """A 2-step smoke run whose policy update draws ``draws`` numbers from the rng it is given (and trains
    nothing); returns what each step saw: candidate pool ids, the allocation and the sampling rng state."""

    def fake_update(model: Any, optimizer: Any, trees: Any, settings: Any, *, rng: Any, **_: Any) -> dict:
        rng.random(draws)
        return {"rows": 0.0, "tokens": 0.0}

    seen: list[dict[str, Any]] = []

    def spy_step(
        step: int, pool: Any, method: Any, shape: Any, parts: Any, rng: np.random.Generator, **kwargs: Any
    ) -> Any:
        state = rng.bit_generator.state["state"]["state"]
        record, results = REAL_STEP(step, pool, method, shape, parts, rng, **kwargs)
        seen.append(
            {
                "pool": [t.id for t in pool],
                "rng_state": state,
                "allocation": [(r.task.id, len(r.roots), np.asarray(r.k).tolist()) for r in results],
            }
        )
        return record, results

    monkeypatch.setattr(update_module, "policy_update", fake_update)
    monkeypatch.setattr(step_module, "training_step", spy_step)
    cfg = load_config(
        preset="smoke", overrides=["steps=2", "eval_every=0", "checkpoint_every=5", "threads=1"]
    )
    Trainer(cfg, tmp_path / f"draws_{draws}", log=lambda _: None).run(progress=False)
    return seen


def test_update_randomness_does_not_change_later_pools_or_allocations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    few = _run(tmp_path, monkeypatch, draws=1)
    many = _run(tmp_path, monkeypatch, draws=1000)
    assert len(few) == len(many) == 2
    assert few == many  # same pools, same sampling/allocation stream state at every step, same allocations


def test_too_few_warm_start_tasks_after_filtering_is_one_error_line(tmp_path: Path) -> None:
    # smoke's 64 training tasks: a warm start that needs 100 probe prompts cannot have them
    cli = [
        sys.executable,
        "-m",
        "trace_rl.cli.main",
        "train",
        "--preset",
        "smoke",
        "--out",
        str(tmp_path / "x"),
    ]
    res = subprocess.run(
        [*cli, "--set", "policy.sft_steps=5", "--set", "policy.sft_probe_prompts=100"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert "the warm start keeps 64 of" in res.stderr and "policy.sft_probe_prompts=100" in res.stderr


def test_warm_start_trains_on_its_own_tasks_and_probes_the_rl_pool(tmp_path: Path) -> None:
    import json

    from trace_rl.train.hygiene import normalize_prompt

    cfg = load_config(
        preset="smoke",
        overrides=[
            *("policy.sft_steps=2", "policy.sft_evals=1", "policy.sft_probe_prompts=4", "policy.sft_batch=4"),
            *("policy.require_jump=false", "threads=1", "env.train_limit=16"),
        ],
    )
    lines: list[str] = []
    trainer = Trainer(cfg, tmp_path / "ws", log=lines.append)
    policy_dir = trainer.prepare_policy_only()
    assert any(f"SFT steps on {len(trainer.sft_tasks)} gold trajectories" in line for line in lines)
    sft_texts = {normalize_prompt(t.prompt) for t in trainer.sft_tasks}
    pool_texts = {normalize_prompt(t.prompt) for t in trainer.tasks}
    assert len(trainer.sft_tasks) == 16 and not sft_texts & pool_texts
    probe = json.loads((policy_dir / "probe_outcomes.json").read_text())
    assert probe["task_ids"] == [t.id for t in trainer.tasks[:4]]  # the predictor learns on the RL pool
    assert len(probe["rewards"]) == 4 and all(len(r) == 8 for r in probe["rewards"])


def test_the_rl_pool_probe_samples_as_the_rollouts_and_the_stop_rule_at_temperature_1(
    tmp_path: Path, monkeypatch
) -> None:
    import json

    import trace_rl.rollout.evaluate as evaluate

    seen: list[tuple[float, float]] = []
    sample_episodes = evaluate.sample_episodes

    async def recording(engine, make_env, codec, prompts, sampling, **kwargs):
        seen.append((sampling.temperature, sampling.top_p))
        return await sample_episodes(engine, make_env, codec, prompts, sampling, **kwargs)

    monkeypatch.setattr(evaluate, "sample_episodes", recording)
    cfg = load_config(
        preset="smoke",
        overrides=[
            *("policy.sft_steps=2", "policy.sft_evals=1", "policy.sft_probe_prompts=4", "policy.sft_batch=4"),
            *("policy.require_jump=false", "threads=1", "env.train_limit=16"),
            *("sampling.temperature=0.7", "sampling.top_p=0.9"),
        ],
    )
    policy_dir = Trainer(cfg, tmp_path / "ws", log=lambda _: None).prepare_policy_only()
    assert seen == [(1.0, 1.0), (0.7, 0.9)]  # the stop rule's probe, then the RL-pool probe
    manifest = json.loads((policy_dir / "warm_start.json").read_text())
    assert manifest["config"]["sampling.temperature"] == 0.7 and manifest["config"]["sampling.top_p"] == 0.9


def test_a_compare_warm_start_runs_at_the_config_threads_and_seed_as_train_does(
    tmp_path: Path, monkeypatch
) -> None:
    """Found building the `agentic` preset: `prepare_policy_only` (compare's warm start) left torch at its default
    thread count and its generator unseeded, so compare and train built different warm starts from one config
    (float reduction order depends on the threads: c10's SFT loss at step 300 was 0.00858 one way, 0.00762 the
    other)."""
    import torch

    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(
        Trainer, "_warm_start", lambda self: seen.append((torch.get_num_threads(), torch.initial_seed()))
    )
    cfg = load_config(preset="smoke", overrides=["threads=1", "seed=3"])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # whatever the process held before
        torch.manual_seed(12345)
        Trainer(cfg, tmp_path / "ws", log=lambda _: None).prepare_policy_only()
    finally:
        torch.set_num_threads(before)
    assert seen == [(1, 3)]
