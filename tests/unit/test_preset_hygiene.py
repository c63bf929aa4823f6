"""Every shipped preset: no held-out prompt in its RL pool or warm start, no RL-pool prompt in its warm start
(issue 22), with the task lists the trainer loads (`trace_rl.train.hygiene.run_tasks`)."""

from __future__ import annotations

import pytest

from trace_rl.train.config import load_config, preset_names
from trace_rl.train.hygiene import run_tasks, shared_prompts

# Presets whose full task lists take long to generate: smaller but real limits (the same loaders and streams).
_SMALLER = {"smollm2-math": ["env.train_limit=140"]}


def test_every_preset_is_covered() -> None:
    assert set(_SMALLER) <= set(preset_names())
    assert {"demo", "multistep", "agentic", "smoke", "bfcl", "multihop_qa", "smollm2-math"} <= set(
        preset_names()
    )


@pytest.mark.parametrize("preset", preset_names())
def test_held_out_rl_pool_and_warm_start_share_no_prompt(preset: str) -> None:
    cfg = load_config(preset=preset, overrides=_SMALLER.get(preset, []))
    splits = run_tasks(cfg)
    assert len(splits.held_out) == cfg.env.eval_tasks > 0
    assert len(splits.rl_pool) >= cfg.env.pool_size
    assert shared_prompts(splits.held_out, splits.rl_pool) == 0
    if cfg.policy.sft_steps > 0:
        assert len(splits.sft) >= cfg.policy.sft_probe_prompts
        assert shared_prompts(splits.held_out, splits.sft) == 0
        assert shared_prompts(splits.rl_pool, splits.sft) == 0
    else:
        assert splits.sft == ()
