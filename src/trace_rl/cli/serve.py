"""`trace-rl serve vllm`: launch local vLLM servers for a policy and keep them up until Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path

from trace_rl.cli.common import UsageError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", help="launch inference servers for a policy (vLLM, from .venv-vllm)")
    engines = p.add_subparsers(dest="engine", required=True)
    v = engines.add_parser(
        "vllm",
        help="vLLM OpenAI-compatible servers (make vllm installs .venv-vllm)",
        description="Export the policy as a Hugging Face folder and start K vLLM servers on ports P..P+K-1 "
        "with the flags trace-rl's VLLMBackend needs (prefix caching, cached-token counts, processed logprobs, "
        "dev-mode weight reload). Prints one line per server and the --set option for trace-rl train; "
        "stops every server on Ctrl-C or SIGTERM.",
    )
    v.add_argument("--policy", required=True, help="tiny | smollm2-135m-instruct | checkpoint folder")
    v.add_argument(
        "--port", type=int, required=True, help="port of the first replica (the next ones count up)"
    )
    v.add_argument("--replicas", type=int, default=1)
    v.add_argument("--host", default="127.0.0.1")
    v.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    v.add_argument("--threads", type=int, default=1, help="CPU threads per server (OMP_NUM_THREADS)")
    v.add_argument("--max-model-len", type=int, default=4096)
    v.add_argument("--max-num-seqs", type=int, default=64)
    v.add_argument("--kv-cache-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE per server (GiB)")
    v.add_argument("--nice", type=int, default=0, help="niceness of the servers (a shared machine: 19)")
    v.add_argument("--seed", type=int, default=0, help="initialisation seed of the tiny policy")
    v.add_argument(
        "--folder",
        type=Path,
        default=None,
        help="where to export the policy (default: ~/.cache/trace-rl/served/NAME)",
    )
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.replicas < 1:
        raise UsageError("--replicas must be at least 1")
    if not 0 < args.port < 65536 - args.replicas:
        raise UsageError(f"--port {args.port} leaves no room for {args.replicas} replica(s)")
    from trace_rl.policy import load_policy
    from trace_rl.policy.models import cache_dir
    from trace_rl.rollout.vllm_server import export_policy, launch_servers, stop_servers, vllm_python

    try:
        vllm_python()
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    policy = load_policy(args.policy, seed=args.seed)
    folder = args.folder or cache_dir() / "served" / Path(str(args.policy)).name
    export_policy(policy, folder)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    servers = []
    try:
        servers = launch_servers(
            folder,
            args.replicas,
            ports=[args.port + i for i in range(args.replicas)],
            host=args.host,
            dtype=args.dtype,
            threads=args.threads,
            max_model_len=args.max_model_len,
            max_num_seqs=args.max_num_seqs,
            kv_cache_gib=args.kv_cache_gib,
            nice=args.nice,
        )
        for i, s in enumerate(servers):
            print(f"replica {i}: {s.url} pid {s.pid} log {s.log_path}", flush=True)
        urls = ",".join(s.url for s in servers)
        print(f"ready: trace-rl train ... --set backend.kind=vllm --set backend.urls={urls}", flush=True)
        while any(s.alive() for s in servers):
            time.sleep(0.5)
        print("every server has exited", flush=True)
        return 1
    except KeyboardInterrupt:
        print("stopping", flush=True)
        return 0
    finally:
        stop_servers(servers)
