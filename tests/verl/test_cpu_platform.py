"""The CPU pieces for verl (issue 61) one by one, in-process and fast; `test_fit_cpu.py` runs them together.

`trace_rl.integrations.verl.cpu` registers the CPU platform, the FSDP engines for device ``cpu``, the
``trace_vllm_cpu`` rollout and the ``cpu:gloo`` process-group default; `check.cpu_overrides` composes with
verl's config, with the Qwen3-8B example and the documented `trace-rl verl-check` overrides, and passes verl's
``validate_config``; `check.verify` names each failure it is meant to catch on hand-written run files.
"""

from __future__ import annotations

import inspect
import json
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import trace_rl.integrations.verl.cpu  # noqa: F401  (registers the CPU pieces)
from trace_rl.integrations.verl.check import CheckPaths, cpu_env, cpu_overrides, verify
from trace_rl.integrations.verl.cpu_platform import CPU_DEVICE, PlatformCPU
from trace_rl.integrations.verl.cpu_rollout import (
    ROLLOUT_NAME,
    SYNC_LOG,
    CPUServerAdapter,
    CPUvLLMReplica,
    tensors_digest,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_cpu_platform_is_registered_and_never_auto_detected() -> None:
    from verl.plugin.platform import PlatformRegistry

    platform = PlatformRegistry.get("cpu")()
    assert isinstance(platform, PlatformCPU)
    assert platform.device_name == "cpu" and platform.communication_backend_name() == "gloo"
    assert platform.current_device() == "cpu"  # a device= argument, not an accelerator index
    assert platform.ray_resource_name() == "GPU"  # logical, from ray.init(num_gpus=...)
    assert not platform.is_platform_available(use_smi_check=True)  # only VERL_PLATFORM=cpu selects it
    available, total = CPU_DEVICE.mem_get_info()
    assert 0 < available <= total
    assert CPU_DEVICE.max_memory_allocated() >= CPU_DEVICE.memory_allocated() > 0
    assert CPU_DEVICE.empty_cache() is None and CPU_DEVICE.device_count() == 1


def test_fsdp_engines_rollout_and_backend_are_registered_for_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.utils.distributed import initialize_global_process_group_ray
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class

    monkeypatch.setenv("VERL_ENGINE_DEVICE", "cpu")
    assert EngineRegistry.get_engine_cls("language_model", "fsdp2") is FSDPEngineWithLMHead
    assert get_rollout_class(ROLLOUT_NAME, "async") is CPUServerAdapter
    assert get_rollout_replica_class(ROLLOUT_NAME) is CPUvLLMReplica
    default = inspect.signature(initialize_global_process_group_ray).parameters["backend"].default
    assert default == "cpu:gloo"  # verl's own default builds "cpu:gloo,cpu:gloo", which torch refuses


def _compose(config_dir: Path, name: str, overrides: list[str]):  # type: ignore[no-untyped-def]
    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name=name, overrides=[o for o in overrides if not o.startswith("hydra.")])
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    return cfg


def test_cpu_overrides_compose_with_the_example_and_the_documented_check(tmp_path: Path) -> None:
    """The command docs/integrations.md gives for `trace-rl verl-check` on the Qwen3-8B example composes and
    validates, and the CPU settings win over the example's GPU ones."""
    doc = (ROOT / "docs/integrations.md").read_text()
    command = doc.split(".venv-verl/bin/trace-rl verl-check", 1)[1].split("```", 1)[0]
    tokens = shlex.split(command.replace("\\\n", " "))
    user = [t for t in tokens if "=" in t and not t.startswith("--")]
    assert tokens[:4] == ["--config-path", "examples/verl", "--config-name", "trace_qwen3_8b"]
    paths = CheckPaths(tmp_path)
    env = cpu_env(paths)
    cfg = _compose(
        ROOT / "examples/verl", "trace_qwen3_8b", user + cpu_overrides(paths, ["http://h:1"], env=env)
    )
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.name == ROLLOUT_NAME and rollout.tensor_model_parallel_size == 1
    assert list(rollout.custom.trace_vllm_urls) == ["http://h:1"]
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2" and cfg.trainer.device == "cpu"
    assert cfg.actor_rollout_ref.model.path == str(paths.model)
    assert cfg.trainer.total_training_steps == 2 and cfg.trainer.n_gpus_per_node == 1
    env_vars = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert env_vars.VERL_USE_EXTERNAL_MODULES == "trace_rl.integrations.verl.cpu"  # the example's is replaced
    assert env_vars.VERL_PLATFORM == "cpu" and cfg.trace.record_dir == str(paths.records)


def _write_run(
    paths: CheckPaths, *, same_weights: bool = False, same_logprobs: bool = False, signal: bool = True
) -> None:
    """Run files as a healthy two-step run leaves them, or with one fault."""
    paths.records.mkdir(parents=True)
    paths.sync.mkdir(parents=True)
    for k in (1, 2):
        record = {
            "step": k,
            "plan": {"v": [0.5, 0.5], "m": [2, 0], "uids": [f"u{k}"], "m_active": [2]},
            "batch": {
                "keys": [f"u{k}_0_0"],
                "padding_rows": 0,
                "advantages": [[0.5 if signal else 0.0, 0.0]],
            },
            "trees": [{"uid": f"u{k}", "roots": 2, "replays": 4, "replay_budget": 4}],
            "predictor": {"before": [0.5], "after": [0.6], "metrics": {}},
        }
        (paths.records / f"step{k}.json").write_text(json.dumps(record))
    lines = []
    for k in (0, 1, 2):
        digest = "a" if same_weights or k == 0 else f"d{k}"
        probe = [-1.0] if same_logprobs or k == 0 else [-1.0 - k]
        lines.append(json.dumps({"global_steps": k, "digest": digest, "probe_logprobs": probe}))
    (paths.sync / SYNC_LOG).write_text("\n".join(lines) + "\n")
    metrics = [{"step": k, "data": {"actor/pg_loss": 0.1}} for k in (1, 2)]
    paths.metrics.write_text("\n".join(json.dumps(m) for m in metrics) + "\n")


def test_verify_passes_a_healthy_run_and_names_each_fault(tmp_path: Path) -> None:
    def check(paths: CheckPaths, steps: int = 2):  # type: ignore[no-untyped-def]
        return verify(
            paths, steps, check_server=False
        )  # no model folder here; test_fit_cpu checks the server

    healthy = CheckPaths(tmp_path / "ok")
    _write_run(healthy)
    assert check(healthy).failures == [] and check(healthy).notes == []
    frozen = CheckPaths(tmp_path / "frozen")
    _write_run(frozen, same_weights=True)
    assert "the weights synced after step 1 equal those before it" in check(frozen).failures
    stale = CheckPaths(tmp_path / "stale")
    _write_run(stale, same_logprobs=True)
    assert "the server's log-probs did not change after the step-1 weight sync" in check(stale).failures
    assert any("2 step record(s) written, expected 3" in f for f in check(healthy, 3).failures)
    flat = CheckPaths(tmp_path / "flat")  # every advantage 0: unchanged weights are expected, not a failure
    _write_run(flat, same_weights=True, same_logprobs=True, signal=False)
    assert check(flat).failures == []
    assert "step 1 had no signal: the weight-change checks after it are skipped" in check(flat).notes


def test_tensors_digest_sees_one_changed_value() -> None:
    import torch

    a = {"w": torch.zeros(3, 2), "b": torch.ones(2)}
    b = {"w": torch.zeros(3, 2), "b": torch.ones(2)}
    assert tensors_digest(a) == tensors_digest(b)
    b["w"][1, 1] = 1e-7
    assert tensors_digest(a) != tensors_digest(b)
