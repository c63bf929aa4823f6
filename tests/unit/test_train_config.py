"""Typed configs: presets load, overrides apply, and every bad key or value is one clear ConfigError."""

import pytest

from trace_rl.train.config import ConfigError, estimator_for, load_config, preset_names


def test_presets_exist_and_validate() -> None:
    names = preset_names()
    for required in ("smoke", "demo", "smollm2-math", "bfcl", "multihop_qa"):
        assert required in names
    for name in names:
        cfg = load_config(preset=name)
        assert cfg.preset == name


def test_overrides_and_types() -> None:
    cfg = load_config(
        preset="smoke", overrides=["budget.roots=16", "optim.lr=3e-4", "method=grpo", "env.train_limit=none"]
    )
    assert cfg.budget.roots == 16 and cfg.optim.lr == pytest.approx(3e-4) and cfg.method == "grpo"
    assert cfg.env.train_limit is None
    assert estimator_for(cfg) == "grpo"  # flat method
    assert estimator_for(load_config(preset="smoke")) == "treerpo"  # math + tree method
    assert estimator_for(load_config(preset="bfcl")) == "tree_grpo"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["budget.rootz=3"], "budget.rootz: unknown key"),
        (["nonsense=1"], "nonsense: unknown key"),
        (["budget.roots=abc"], "budget.roots: expected an integer"),
        (["budget.roots=10"], "multiple of group_size"),
        (["method=ppo"], "method: unknown method 'ppo'"),
        (["sampling.temperature=0"], "sampling.temperature"),
        (["env.pool_size=2"], "env.pool_size: must be at least the baselines' batch size"),
        (["optim.estimator=magic"], "optim.estimator"),
        (["budget.accounting=tokens"], "budget.accounting"),
        (["env=3"], "env: expected a section"),
        (["policy.sft_stop_success=1.5"], "policy.sft_stop_success: must lie in"),
        (["policy.sft_stop_mixed=-0.1"], "policy.sft_stop_mixed: must lie in"),
        (["policy.sft_eval_every=0"], "policy.sft_eval_every: must be at least 1"),
        (["policy.sft_probe_prompts=0"], "policy.sft_probe_prompts: must be at least 1"),
        (["policy.sft_task_kwargs=3"], "policy.sft_task_kwargs: expected a mapping"),
        (["justtext"], "expected section.key=value"),
        (["budget.min_rollouts=1"], "budget.min_rollouts: must be at least 2"),
        (["budget.max_rollouts=2"], "budget.max_rollouts: must be at least budget.group_size"),
        (["predictor.name=ngram", "predictor.history_window=-1"], "predictor.history_window: must be >= 0"),
        (
            ["predictor.name=ngram", "predictor.history_decay=0"],
            "predictor.history_decay: must lie in (0, 1]",
        ),
        (["budget.max_num_gen_batches=2"], "budget.max_num_gen_batches: only method dapo"),
        (
            ["predictor.name=ngram", "predictor.updates=8", "predictor.batch_size=32", "predictor.lr=0.01"],
            "predictor.lr: has no effect",
        ),
        (["predictor.name=ngram"], "predictor.updates: has no effect on the convex predictor 'ngram'"),
        (["backend.replicas=2"], "backend.replicas: applies only to vLLM servers that trace-rl launches"),
        (
            ["backend.kind=vllm", "backend.urls=http://h:1", "backend.kv_cache_gib=2"],
            "backend.kv_cache_gib: applies only to vLLM servers",
        ),
        (["backend.urls=http://h:1"], "backend.urls: the local engine generates in-process"),
        (["backend.max_in_flight=8"], "backend.max_in_flight: applies to server replicas only"),
        (
            ["predictor.history_window=5"],
            "predictor.history_window: applies to the convex predictors",
        ),
    ],
)
def test_bad_values_are_one_line_errors(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        load_config(preset="smoke", overrides=overrides)
    assert "\n" not in str(info.value)


def test_unknown_preset_and_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        load_config(preset="nope")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(file=tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n- not a mapping\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(file=bad)
    good = tmp_path / "good.yaml"
    good.write_text("method: pcl\nbudget: {roots: 16}\n")
    assert load_config(file=good).method == "pcl"


@pytest.mark.parametrize(
    ("override", "key", "accepted"),
    [
        ("optim.max_grad_norm=-1", "optim.max_grad_norm", "> 0"),
        ("optim.max_grad_norm=0", "optim.max_grad_norm", "> 0"),
        ("optim.lr=inf", "optim.lr", "> 0"),
        ("optim.lr=nan", "optim.lr", "> 0"),
        ("steps=inf", "steps", ">= 1"),
        ("steps=nan", "steps", ">= 1"),
        ("steps=1e400", "steps", ">= 1"),
        ("steps=1e30", "steps", ">= 1"),
        ("steps=2.5", "steps", ">= 1"),
        ("steps=+-5", "steps", "expected an integer"),
        ("predictor.batch_size=0", "predictor.batch_size", "at least 1"),
        ("policy.sft_lr=-1", "policy.sft_lr", "> 0"),
        ("env.train_limit=-5", "env.train_limit", "[1, 100000]"),
        ("optim.weight_decay=-0.1", "optim.weight_decay", ">= 0"),
        ("budget.replay_cost=0", "budget.replay_cost", "(0, 1]"),
        ("seed=-1", "seed", "[0, 2147483648)"),
        ("total_budget=.inf", "total_budget", ">= 0"),
    ],
)
def test_numbers_out_of_range_name_the_key_and_the_range(override, key, accepted) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(preset="smoke", overrides=[override])
    message = str(info.value)
    assert message.startswith(f"{key}: ") and accepted in message and "\n" not in message, message


def test_every_numeric_key_has_a_range_and_the_defaults_lie_inside() -> None:
    from trace_rl.train.config import TrainConfig
    from trace_rl.train.config_check import check_ranges
    from trace_rl.train.config_ranges import RANGES, numeric_keys

    keys = numeric_keys(TrainConfig)
    assert "optim.max_grad_norm" in keys and "env.train_limit" in keys and "budget.max_rollouts" in keys
    assert set(keys) == set(RANGES)  # no range for a key that does not exist either
    check_ranges(TrainConfig())  # the defaults are valid


def test_weight_decay_default_is_torchs_adamw_default() -> None:
    import inspect

    import torch

    default = inspect.signature(torch.optim.AdamW).parameters["weight_decay"].default
    assert load_config(preset="smoke").optim.weight_decay == default == 0.01
    assert load_config(preset="smoke", overrides=["optim.weight_decay=0"]).optim.weight_decay == 0.0


def test_integers_keep_their_exact_value() -> None:
    cfg = load_config(preset="smoke", overrides=["env.data_seed=2147483647", "steps=1e3", "seed=2147483647"])
    assert cfg.env.data_seed == 2**31 - 1 and cfg.steps == 1000 and cfg.seed == 2**31 - 1


@pytest.mark.parametrize(
    ("key", "bound"),
    [
        ("predictor.updates", "[0, 10000]"),
        ("optim.epochs", "[1, 100]"),
        ("optim.minibatches", "[0, 4096]"),
        ("env.max_turns", "[1, 1024]"),
        ("env.eval_tasks", "[0, 10000]"),
        ("env.train_limit", "[1, 100000]"),
        ("backend.replicas", "[1, 1024]"),
        ("backend.kv_cache_gib", "[1, 4096]"),
    ],
)
def test_counts_of_work_inside_a_step_are_bounded(key, bound) -> None:
    # issue 60: predictor.updates=1e15 passed validation and the step's predictor update never ended
    with pytest.raises(ConfigError) as info:
        load_config(preset="smoke", overrides=[f"{key}=1e15"])
    message = str(info.value)
    assert message.startswith(f"{key}: must lie in {bound}") and "\n" not in message, message
    assert message.endswith("got 1000000000000000"), message


def test_eval_samples_are_bounded_where_they_apply() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(preset="smoke", overrides=["env.eval_temperature=1", "env.eval_samples=1e15"])
    assert str(info.value).startswith("env.eval_samples: must lie in [1, 1000]"), str(info.value)
    assert load_config(preset="smoke", overrides=["env.eval_temperature=1", "env.eval_samples=1000"])


def test_the_count_bounds_leave_every_preset_and_kept_run_valid() -> None:
    # the bounds sit far above what the presets and the kept runs of results/ use (the largest: train_limit 5000)
    import json
    from pathlib import Path

    from trace_rl.train.config_ranges import RANGES

    def numbers(data: dict, prefix: str = "") -> dict[str, float]:
        out: dict[str, float] = {}
        for key, value in data.items():
            if isinstance(value, dict):
                out.update(numbers(value, f"{prefix}{key}."))
            elif isinstance(value, int | float) and not isinstance(value, bool):
                out[f"{prefix}{key}"] = value
        return out

    root = Path(__file__).resolve().parents[2] / "results"
    kept = [json.loads(p.read_text()) for p in sorted(root.glob("**/config.json"))]
    assert len(kept) > 10, root
    presets = [load_config(preset=name).to_dict() for name in preset_names()]
    checked = 0
    for config in kept + presets:
        for key, value in numbers(config).items():
            if key in RANGES and RANGES[key].hi is not None:
                assert RANGES[key].contains(value), (key, value)
                checked += 1
    assert checked > len(kept)


def test_max_new_tokens_must_fit_the_policys_context() -> None:
    # issue 60: sampling.max_new_tokens=1e12 passed validation and every turn ran to the context limit
    from types import SimpleNamespace

    from trace_rl.train.run_policy import check_context

    def policy(context: int | None) -> SimpleNamespace:
        config = SimpleNamespace() if context is None else SimpleNamespace(max_position_embeddings=context)
        return SimpleNamespace(model=SimpleNamespace(config=config))

    too_long = load_config(preset="smoke", overrides=["sampling.max_new_tokens=1000000000000"])
    with pytest.raises(ConfigError) as info:
        check_context(too_long, policy(4096))
    message = str(info.value)
    assert message.startswith(
        "sampling.max_new_tokens: must be below the context of policy tiny (4096 tokens"
    )
    assert message.endswith("got 1000000000000") and "\n" not in message
    with pytest.raises(ConfigError, match=r"got 4096$"):
        check_context(load_config(preset="smoke", overrides=["sampling.max_new_tokens=4096"]), policy(4096))
    check_context(load_config(preset="smoke", overrides=["sampling.max_new_tokens=4095"]), policy(4096))
    check_context(too_long, policy(None))  # a model config without a context length is not checked


def test_min_rollouts_above_the_roots_is_refused() -> None:
    # found in review: a step could not place one group of min_rollouts and crashed after the first step's spend
    from trace_rl.train.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"budget\.min_rollouts"):
        load_config(preset="smoke", overrides=["budget.min_rollouts=9", "budget.max_rollouts=9"])
