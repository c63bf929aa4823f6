"""The Qwen3-8B example (examples/verl/trace_qwen3_8b.yaml) composes with verl's own PPO config, passes verl's
`validate_config`, and names classes and knobs that resolve: what can be checked of the GPU recipe on CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

import trace_rl.integrations.verl.register  # noqa: F401
from trace_rl.integrations.verl.config import TraceVerlConfig
from trace_rl.integrations.verl.trainer import TraceTrainer, plan_roots
from trace_rl.integrations.verl.worker import TraceAgentLoopManager

EXAMPLES = Path(__file__).resolve().parents[2] / "examples/verl"


def test_example_config_composes_validates_and_resolves() -> None:
    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
    from verl.utils.config import validate_config
    from verl.utils.import_utils import load_class_from_fqn

    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        cfg = compose(config_name="trace_qwen3_8b")
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert get_trainer_cls(cfg.trainer.v1.trainer_mode) is TraceTrainer
    manager = load_class_from_fqn(
        cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class, "AgentLoopManager"
    )
    assert manager is TraceAgentLoopManager
    assert cfg.algorithm.adv_estimator == "trace_treerpo" and not cfg.algorithm.use_kl_in_reward
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_USE_EXTERNAL_MODULES == "trace_rl.integrations.verl.register"
    trace = TraceVerlConfig.from_verl(cfg)
    tb = int(cfg.data.train_batch_size)
    assert trace.candidate_pool % tb == 0
    # the paper's shape: M = 1024 roots over at most train_batch_size prompts, N = 2
    m = plan_roots(np.linspace(0.02, 0.98, trace.candidate_pool), trace, train_batch_size=tb, rollout_n=8)
    assert m.sum() == 1024 and (m > 0).sum() <= tb and m.max() <= trace.max_rollouts


def test_launch_script_points_at_the_example() -> None:
    script = (EXAMPLES / "run_qwen3_8b.sh").read_text()
    assert "--config-name trace_qwen3_8b" in script and "VERL_USE_EXTERNAL_MODULES" in script


def test_device_script_overrides_compose_with_verls_config() -> None:
    """scripts/device_check_verl.sh runs only on a GPU; its Hydra overrides are checked here against verl's
    config (names, ``+`` for new keys) and verl's validate_config."""
    import shlex

    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    import verl

    script = (EXAMPLES.parents[1] / "scripts/device_check_verl.sh").read_text()
    body = script.split("-m verl.trainer.main_ppo", 1)[1].split("2>&1", 1)[0]
    body = body.replace('"$OUT', '"/tmp/out').replace('"$MODEL"', "/tmp/model")
    overrides = [t for t in shlex.split(body.replace("\\\n", " "))]
    assert len(overrides) > 20
    with initialize_config_dir(
        config_dir=str(Path(verl.__file__).parent / "trainer/config"), version_base=None
    ):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert cfg.trainer.v1.trainer_mode == "trace_sync" and cfg.trainer.total_training_steps == 1
    assert TraceVerlConfig.from_verl(cfg).env == "toy_arith"
