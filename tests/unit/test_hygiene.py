"""Data hygiene (issue 22): held-out, RL-pool and warm-start prompts are disjoint by normalised text."""

from __future__ import annotations

import pytest

from trace_rl.train.hygiene import disjoint_tasks, normalize_prompt, shared_prompts
from trace_rl.types import Task


def _tasks(prefix: str, prompts: list[str]) -> list[Task]:
    return [Task(id=f"{prefix}-{i}", env="toy", prompt=p) for i, p in enumerate(prompts)]


def test_normalize_prompt_ignores_case_width_and_spacing() -> None:
    assert normalize_prompt("  What is 3 +\n 4?\t") == "what is 3 + 4?"
    assert normalize_prompt("ＡＢＣ  1") == normalize_prompt("abc 1")  # NFKC: full-width letters
    assert normalize_prompt("3 + 4") != normalize_prompt("3 + 5")


def test_held_out_first_then_rl_pool_then_sft() -> None:
    held = _tasks("test", ["1 + 1", "2 + 2"])
    train = _tasks("train", ["1 + 1", "3 + 3", " 2 +  2 ", "4 + 4", "3 + 3"])
    sft = _tasks("sft", ["3 + 3", "5 + 5", "1 + 1", "6 + 6", "4 + 4", "5 + 5"])
    splits = disjoint_tasks(held, train, sft)
    assert [t.id for t in splits.held_out] == ["test-0", "test-1"]
    # training tasks whose text is held out go; order and the repeated "3 + 3" stay
    assert [t.id for t in splits.rl_pool] == ["train-1", "train-3", "train-4"]
    # warm-start tasks lose held-out AND RL-pool texts
    assert [t.id for t in splits.sft] == ["sft-1", "sft-3", "sft-5"]
    assert (splits.rl_dropped, splits.sft_dropped) == (2, 3)
    assert shared_prompts(splits.held_out, splits.rl_pool) == 0
    assert shared_prompts(splits.held_out, splits.sft) == 0
    assert shared_prompts(splits.rl_pool, splits.sft) == 0


def test_no_warm_start_gives_an_empty_sft_list() -> None:
    splits = disjoint_tasks(_tasks("t", ["a"]), _tasks("r", ["b", "c"]))
    assert splits.sft == () and len(splits.rl_pool) == 2


def test_too_few_rl_pool_tasks_is_an_error_with_counts() -> None:
    held = _tasks("test", ["a", "b"])
    train = _tasks("train", ["a", "b", "c"])
    with pytest.raises(
        ValueError, match=r"RL pool keeps 1 of 3 training tasks .* 2 whose prompt is a held-out"
    ):
        disjoint_tasks(held, train, min_rl=2)
    assert len(disjoint_tasks(held, train, min_rl=1).rl_pool) == 1


def test_too_few_sft_tasks_is_an_error_with_counts() -> None:
    held = _tasks("test", ["a"])
    train = _tasks("train", ["b", "c"])
    sft = _tasks("sft", ["a", "b", "c", "d"])
    with pytest.raises(ValueError, match=r"warm start keeps 1 of 4 tasks .* 3 whose prompt"):
        disjoint_tasks(held, train, sft, min_sft=2)
    with pytest.raises(ValueError, match="must be >= 0"):
        disjoint_tasks(held, train, sft, min_rl=-1)


def test_shared_prompts_counts_distinct_texts() -> None:
    a = _tasks("a", ["x", "x", "Y", "z"])
    b = _tasks("b", ["y", "x"])
    assert shared_prompts(a, b) == 2


def test_sft_limit_keeps_the_first_tasks_after_filtering() -> None:
    held = _tasks("test", ["a"])
    train = _tasks("train", ["b"])
    sft = _tasks("sft", ["a", "c", "b", "d", "e"])
    splits = disjoint_tasks(held, train, sft, sft_limit=2, min_sft=2)
    assert [t.id for t in splits.sft] == ["sft-1", "sft-3"]
    assert splits.sft_dropped == 2  # removed by the filter, not by the limit


def test_compare_variants_cannot_change_the_task_data() -> None:
    from trace_rl.train.compare_shared import parse_variant
    from trace_rl.train.config import ConfigError

    for key in ("env.data_seed=1", "env.train_limit=50", "env.eval_tasks=8", "env.task_kwargs.generators={}"):
        with pytest.raises(ConfigError, match="cannot differ"):
            parse_variant(f"x=trace@{key}")
    assert parse_variant("x=trace@env.pool_size=64") == ("x", "trace", ("env.pool_size=64",))


def test_plan_runs_checks_every_run_before_the_warm_start(tmp_path) -> None:
    # the demo's warm start takes minutes: a bad label, seed or override fails first, and nothing is written
    from trace_rl.train.compare import plan_runs
    from trace_rl.train.compare_shared import parse_variant
    from trace_rl.train.config import ConfigError, load_config

    cfg = load_config(preset="demo")
    assert cfg.policy.sft_steps > 0
    root = tmp_path / "cmp"
    cases = [
        (["a=grpo", "a=trace"], [0], ConfigError, "label twice"),
        (["grpo"], [4, 4], ValueError, "distinct"),
        (["grpo"], [-1], ValueError, "distinct"),
        (["x=trace@budget.roots=-3"], [0], ConfigError, "roots"),
        (["grpo", "x=trace@budget.roots=32"], [0], ConfigError, "total budgets differ"),
    ]
    for methods, seeds, error, match in cases:
        with pytest.raises(error, match=match):
            plan_runs(cfg, [parse_variant(m) for m in methods], seeds, root)
        assert not root.exists()
    with pytest.raises(ValueError, match="jobs"):
        plan_runs(cfg, [parse_variant("grpo")], [0], root, jobs=0)
