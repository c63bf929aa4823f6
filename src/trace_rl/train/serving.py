"""The generation backend of a training run: the in-process LocalEngine, or vLLM / SGLang servers behind a
ReplicaPool.

`open_backend(cfg, policy, out)` returns a `RunBackend`; the trainer generates through ``.backend``, calls
``sync(policy)`` after every policy update (local: drop cached keys/values; servers: write the weights to
``out/served/v<N>``, reload every replica from there, reset their prefix caches, bump the policy version), reads
``step_metrics()`` once per step and calls ``close()`` when the run ends (launched servers are stopped; a SIGTERM
to the trainer becomes SystemExit so that this happens; the servers also die with the trainer process).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_rl.rollout.pool import ReplicaPool, backend_metrics
from trace_rl.train.config import ConfigError, TrainConfig

SERVED_DIR = "served"
SERVERS_FILE = "servers.json"


@dataclass
class RunBackend:
    """A run's generation backend (see the module doc). servers: the vLLM servers this run launched."""

    backend: Any
    out: Path
    servers: list[Any] = field(default_factory=list)
    _old_sigterm: Any = None

    @property
    def is_pool(self) -> bool:
        return isinstance(self.backend, ReplicaPool)

    def sync(self, policy: Any) -> None:
        """Make the backend generate from the policy's current weights (call after each update)."""
        if not self.is_pool:
            self.backend.clear_cache()  # cached keys/values belong to the old weights
            return
        from trace_rl.rollout.vllm_server import export_policy

        pool: ReplicaPool = self.backend
        root = self.out / SERVED_DIR
        folder = export_policy(policy, root / f"v{pool.policy_version + 1}")
        asyncio.run(pool.push_weights(str(folder)))
        for old in root.glob("v*"):
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)

    def begin_step(self) -> None:
        """Start a new metrics window (evaluation requests between steps are not counted)."""
        if self.is_pool:
            self.backend.take_stats()

    def step_metrics(self) -> dict[str, Any]:
        """`trace_rl.rollout.pool.backend_metrics` of the window since `begin_step`."""
        return backend_metrics(self.backend)

    def close(self) -> None:
        """Stop the servers this run launched (idempotent)."""
        from trace_rl.rollout.vllm_server import stop_servers

        if self.servers:
            stop_servers(self.servers)
            self.servers = []
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def open_backend(cfg: TrainConfig, policy: Any, out: Path, log: Callable[[str], None] = print) -> RunBackend:
    """The backend ``cfg.backend`` asks for (docs/serving.md).

    With ``kind: vllm`` or ``kind: sglang`` and ``urls`` set, the servers must read this machine's ``out``
    folder (weight pushes go through it) and serve the policy's architecture; the current weights are pushed
    at once (version 1). With ``kind: vllm`` and no URLs, ``replicas`` servers are launched from the exported
    policy and ``out/servers.json`` lists their ports and process ids.

    Raises:
        ValueError: ``kind: sglang`` without ``urls`` (no SGLang server is launched). FileNotFoundError: no
        vLLM environment (run `make vllm`). RuntimeError / TimeoutError: a server failed to start (every
        started one is stopped first). ServerError / OSError / TimeoutError: the initial push to given
        servers failed.
    """
    b = cfg.backend
    if b.kind == "local":
        from trace_rl.rollout.engine import LocalEngine

        return RunBackend(LocalEngine(policy, max_batch=cfg.sampling.max_concurrency), out)
    from trace_rl.rollout.servers import SGLangBackend, VLLMBackend

    urls = [u.strip() for u in b.urls.split(",") if u.strip()]
    if b.kind == "sglang" and not urls:
        raise ConfigError(
            "backend.kind=sglang needs backend.urls (the running SGLang servers): trace-rl launches only vLLM"
        )
    client = SGLangBackend if b.kind == "sglang" else VLLMBackend
    run = RunBackend(None, out)
    if not urls:
        from trace_rl.rollout.vllm_server import export_policy, launch_servers

        folder = export_policy(policy, out / SERVED_DIR / "v0")
        if threading.current_thread() is threading.main_thread():
            run._old_sigterm = signal.signal(signal.SIGTERM, _sigterm)
        log(
            f"starting {b.replicas} vLLM server(s) for {cfg.policy.name} ({b.dtype}, {b.threads} thread(s) each)"
        )
        run.servers = launch_servers(
            folder,
            b.replicas,
            dtype=b.dtype,
            threads=b.threads,
            nice=b.nice,
            max_num_seqs=b.max_in_flight,
            kv_cache_gib=b.kv_cache_gib,
        )
        urls = [s.url for s in run.servers]
        (out / SERVERS_FILE).write_text(
            json.dumps([{"url": s.url, "port": s.port, "pid": s.pid} for s in run.servers], indent=2)
        )
        log(f"vLLM servers ready: {', '.join(urls)}")
    run.backend = ReplicaPool(
        [client(u, stop_ids=policy.stop_ids) for u in urls], max_in_flight=b.max_in_flight
    )
    if not run.servers:
        run.sync(policy)  # servers started elsewhere: make them serve this run's weights
    return run
