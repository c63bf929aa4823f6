"""`TraceSpec`, TRACE's settings declared once (issue 60): the native config, the TRL adapter and the verl adapter
build the same spec from their defaults, report its rules under their own keys, and resolve "auto" one way."""

from __future__ import annotations

import dataclasses

import pytest

from trace_rl.integrations.trl.parts import TraceSettings
from trace_rl.integrations.verl.config import TraceVerlConfig
from trace_rl.spec import BudgetSpec, SpecError, TraceSpec, UpdateSpec, resolve_estimator
from trace_rl.train.config import ConfigError, TrainConfig, load_config
from trace_rl.train.config_sections import BackendSection, PredictorSection


def test_the_native_trainer_and_both_adapters_share_every_default() -> None:
    one = TraceSpec()
    assert TrainConfig().spec == one
    assert TraceSettings().spec == one
    assert TraceVerlConfig().spec == one
    # the keys whose defaults drifted before issue 60, read from each adapter's own fields
    native = TrainConfig()
    trl, verl = TraceSettings(), TraceVerlConfig()
    assert (
        native.budget.max_rollouts == trl.max_rollouts == verl.max_rollouts == one.budget.max_rollouts == 16
    )
    assert native.sampling.max_new_tokens == trl.max_new_tokens == verl.max_new_tokens == 128
    assert native.optim.estimator == trl.estimator == one.update.estimator == "auto"
    for shared in ("continuations", "min_rollouts", "replay_cost", "max_turns", "method"):
        values = {getattr(x, shared) for x in (trl, verl)}
        assert values == {getattr(one.budget, shared, getattr(one, shared, None))}, shared


def test_each_adapter_names_a_broken_rule_by_its_own_key() -> None:
    with pytest.raises(ConfigError, match=r"^optim\.minibatches: set exactly one"):
        load_config(preset="smoke", overrides=["optim.minibatch=8"])
    with pytest.raises(ConfigError, match=r"^budget\.coverage: applies to method=trace_adaptive only"):
        load_config(preset="smoke", overrides=["budget.coverage=0.2"])
    with pytest.raises(SpecError, match=r"^max_new_tokens: must be at least 1"):
        TraceSettings(max_new_tokens=0)
    with pytest.raises(ValueError, match=r"^trace\.max_rollouts: must be at least min_rollouts \(3\)"):
        TraceVerlConfig(min_rollouts=3, max_rollouts=2)
    with pytest.raises(SpecError, match="state_evidence: values the anchors of allocate_prefixes"):
        TraceSpec(method="grpo", prefix=dataclasses.replace(TraceSpec().prefix, state_evidence=True))


def test_auto_resolves_one_way_for_every_consumer() -> None:
    assert resolve_estimator("auto", "trace", "math_python") == "treerpo"
    assert resolve_estimator("auto", "trace", "bfcl") == "tree_grpo"
    assert resolve_estimator("auto", "grpo", "math_python") == "grpo"
    assert resolve_estimator("auto", "trace_adaptive", "math_python") == "tree_grpo"
    assert (
        resolve_estimator("auto", "trace", "math_python", node_level=False) == "tree_grpo"
    )  # GRPOTrainer rows
    assert resolve_estimator("grpo", "trace", "math_python") == "grpo"
    cfg = load_config(preset="smoke")
    assert cfg.spec.resolved_update(cfg.env.name).estimator == "treerpo"
    task = type("T", (), {"env": "math_python"})()
    assert TraceSettings().estimator_for(task) == "treerpo"
    assert TraceSettings().estimator_for(task, node_level=False) == "tree_grpo"


def test_a_variants_options_cannot_be_set_on_another_variant() -> None:
    with pytest.raises(SpecError, match="updates: has no effect on the convex predictor 'ngram'"):
        PredictorSection(name="ngram", updates=3)
    with pytest.raises(SpecError, match="history_window: applies to the convex predictors"):
        PredictorSection(name="tiny", history_window=5)
    with pytest.raises(SpecError, match="replicas: applies only to vLLM servers that trace-rl launches"):
        BackendSection(kind="vllm", urls="http://h:1", replicas=2)
    assert BackendSection(kind="vllm", replicas=2).variant == "launched"
    assert PredictorSection(name="ngram").variant == "convex"


def test_parts_check_their_ranges_and_choices_when_built() -> None:
    with pytest.raises(SpecError, match=r"^roots: must be at least 1, got 0"):
        BudgetSpec(roots=0)
    with pytest.raises(SpecError, match=r"^packing: must be tree or none, got 'trie'"):
        UpdateSpec(packing="trie")
    with pytest.raises(SpecError, match=r"^method: unknown method 'nope'"):
        TraceSpec(method="nope")
