"""Every verl (and TransferQueue) symbol trace_rl.integrations.verl uses, at the pinned version, with the
signatures and behaviours the adapter relies on. A verl upgrade that moves or changes one fails here first."""

from __future__ import annotations

import importlib
import inspect

import pytest

from trace_rl.integrations.verl import VERL_VERSION

SYMBOLS = [
    ("verl.trainer.ppo.v1.agent_loop_tq", "AgentLoopWorkerTQ"),
    ("verl.trainer.ppo.v1.agent_loop_tq", "AgentLoopManagerTQ"),
    ("verl.trainer.ppo.v1.trainer_sync", "PPOTrainerSync"),
    ("verl.trainer.ppo.v1.trainer_base", "register_trainer"),
    ("verl.trainer.ppo.v1.trainer_base", "get_trainer_cls"),
    ("verl.trainer.ppo.v1.replay_buffer", "ReplayBuffer"),
    ("verl.trainer.ppo.core_algos", "register_adv_est"),
    ("verl.trainer.ppo.core_algos", "get_adv_estimator_fn"),
    ("verl.trainer.ppo.core_algos", "ADV_ESTIMATOR_REGISTRY"),
    ("verl.trainer.ppo.ray_trainer", "compute_advantage"),
    ("verl.experimental.agent_loop.agent_loop", "AgentLoopBase"),
    ("verl.experimental.agent_loop.agent_loop", "AgentLoopOutput"),
    ("verl.experimental.agent_loop.agent_loop", "AgentLoopMetrics"),
    ("verl.experimental.agent_loop.agent_loop", "register"),
    ("verl.experimental.agent_loop.agent_loop", "_agent_loop_registry"),
    ("verl.workers.rollout.llm_server", "LLMServerClient"),
    ("verl.workers.rollout.router", "GlobalRequestLoadBalancer"),
    ("verl.workers.rollout.router", "get_router_handle"),
    ("verl.workers.rollout.replica", "TokenOutput"),
    ("verl.utils.tensordict_utils", "index_select_tensor_dict"),
    ("verl.utils.tensordict_utils", "get_tensordict"),
    ("verl.utils.tensordict_utils", "assign_non_tensor_data"),
    ("verl.protocol", "DataProto"),
    ("verl.utils.import_utils", "load_class_from_fqn"),
    ("transfer_queue", "init"),
    ("transfer_queue", "async_kv_put"),
    ("transfer_queue", "kv_batch_get"),
    ("transfer_queue", "kv_batch_put"),
]


def test_pinned_verl_version() -> None:
    import verl

    assert verl.__version__ == VERL_VERSION


@pytest.mark.parametrize(("module", "name"), SYMBOLS)
def test_symbol_exists(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"{module}.{name} is gone"


def test_the_seams_the_adapter_overrides_keep_their_signatures() -> None:
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    worker = AgentLoopWorkerTQ.__ray_metadata__.modified_class  # Ray forbids subclassing the actor class

    def params(fn: object) -> list[str]:  # Ray adds a tracing keyword to actor methods
        return [p for p in inspect.signature(fn).parameters if p != "_ray_trace_ctx"]  # type: ignore[arg-type]

    assert params(worker._run_prompt) == [
        "self", "prompt", "sampling_params", "trajectory", "trace",
    ]  # fmt: skip
    assert params(worker._agent_loop_postprocess)[:3] == ["self", "output", "validate"]
    assert "__rollout_n__" in inspect.getsource(worker._run_prompt)
    for method, expected in [
        ("prepare_step", ["self"]),
        ("_step_once", ["self", "metrics", "timing_raw", "sample_batch_size"]),
        ("_compute_advantage", ["self", "batch", "metrics"]),
        ("_build_replay_buffer", ["self"]),
        ("on_step_end", ["self"]),
        ("_next_train_batch", ["self", "num_prompts"]),
        ("_submit_batch_to_rollout", ["self", "batch"]),
    ]:
        assert params(getattr(PPOTrainer, method)) == expected, method
    # TraceReplayBuffer: verl's sync buffer selects groups in _select_prompt_uids, then materializes them
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    assert params(ReplayBuffer._select_prompt_uids) == [
        "self",
        "partition_id",
        "sampleable_keys",
        "batch_size",
    ]
    assert params(ReplayBuffer._clear_groups) == ["self", "partition_id", "uids"]
    assert params(ReplayBuffer.sample) == ["self", "global_steps", "partition_id", "batch_size"]
    sample_src = inspect.getsource(ReplayBuffer.sample)
    assert "self._select_prompt_uids(" in sample_src and "self._materialize_batch(" in sample_src
    assert "failure_keys" in inspect.getsource(ReplayBuffer._sync_metadata_from_transfer_queue)
    # estimators other than GAE/GRPO get these keywords from verl (the tree estimators read them)
    from verl.trainer.ppo import ray_trainer

    src = inspect.getsource(ray_trainer.compute_advantage)
    for kw in ('"token_level_rewards"', '"response_mask"', '"config"', 'adv_kwargs["index"]'):
        assert kw in src


def test_register_module_registers_all_three_extensions() -> None:
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    import trace_rl.integrations.verl.register  # noqa: F401
    from trace_rl.integrations.verl.estimators import (
        compute_trace_tree_grpo_advantage,
        compute_trace_treerpo_advantage,
    )
    from trace_rl.integrations.verl.trainer import TraceTrainer

    assert get_trainer_cls("trace_sync") is TraceTrainer and issubclass(TraceTrainer, PPOTrainerSync)
    assert core_algos.get_adv_estimator_fn("trace_treerpo") is compute_trace_treerpo_advantage
    assert core_algos.get_adv_estimator_fn("trace_tree_grpo") is compute_trace_tree_grpo_advantage
    assert _agent_loop_registry["trace_agent"] == {
        "_target_": "trace_rl.integrations.verl.agent_loop.TraceAgentLoop"
    }
    from trace_rl.integrations.verl.estimators import register_estimators

    register_estimators()  # idempotent: a second registration of the same functions is accepted
    assert core_algos.get_adv_estimator_fn("trace_treerpo") is compute_trace_treerpo_advantage


def test_external_modules_variable_loads_the_adapter_in_a_fresh_process() -> None:
    import os
    import subprocess
    import sys

    code = (
        "import verl\n"
        "from verl.trainer.ppo.v1.trainer_base import get_trainer_cls\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "print(get_trainer_cls('trace_sync').__name__, get_adv_estimator_fn('trace_treerpo').__name__)\n"
    )
    env = dict(os.environ, VERL_USE_EXTERNAL_MODULES="trace_rl.integrations.verl.register")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["TraceTrainer", "compute_trace_treerpo_advantage"]
