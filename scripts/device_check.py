"""The native trainer on one device: 3 RL steps of TRACE on two policies, with tokens/s, step times, peak memory.

Run through scripts/device_check.sh (its header says what it needs and what has been run where). Two checks,
the same on every device, each a full `Trainer` run (local engine, policy update, predictor) on the toy
arithmetic tool env with a coin-like reward (`trace_rl.rollout.toy_env.ParityToolEnv`, named as
``module:factory``: pure Python, no sandbox, no data package; the last turn scores 1 when its text has an even
number of characters) with the smoke preset's sizes. A random-init policy earns that reward about half the time,
so groups are mixed, advantages are non-zero and the update runs a real policy-gradient step (under the plain
arithmetic env a random policy never scores, every group agrees and the update forwards nothing):

- ``tiny``: the tiny Qwen3 policy of the presets (3.3 M parameters, random init);
- ``qwen3-scratch``: a Qwen3 built from its config here (random init, the tiny tokenizer) and saved as a local
  checkpoint folder: about 100 M parameters on CUDA (hidden 768, 16 layers), 0.1 M on CPU so that the CPU smoke
  test stays short (``--scratch-size`` overrides).

Per step it prints the step's wall-clock, generation tokens/s (tokens sampled / seconds in generation), update
seconds, ``update_rows`` (root-to-leaf paths with a non-zero advantage, of all paths) with the update's gradient
norm (before clipping) and the predictor seconds; per check the update rows and seconds over its steps and the
peak memory: ``torch.cuda.max_memory_allocated`` on CUDA (reset before each check), the process's peak resident
set size on CPU (``ru_maxrss``; it never decreases, so the second check's figure includes the first's).

Exit status 1 (a ``FAIL`` line naming each failed check and why) when a check did not record all its steps, when
no step of a check had a row with signal (``update_rows`` 0 in every step: the policy-gradient part never ran),
or when a step with rows had a gradient norm or loss that is not finite and positive (norm) / finite (loss). A bad
setting (``SET`` / ``--set``) is one ``device_check: bad setting ...`` line and exit status 1 before anything is
built; a setting refused once the policy has loaded (``sampling.max_new_tokens`` above its context) is one line too.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

ENV = "trace_rl.rollout.toy_env:ParityToolEnv"
# the smoke preset's sizes, with the toy env and without held-out evaluation
OVERRIDES = [
    f"env.name={ENV}",
    "env.train_limit=64",
    "env.eval_tasks=0",
    "eval_every=0",
    "checkpoint_every=1000",
]
# hidden, layers, attention heads, KV heads, MLP width of the from-scratch Qwen3
SCRATCH_SIZES = {"100m": (768, 16, 12, 4, 2048), "small": (64, 2, 2, 1, 128)}
CHECKS = ("tiny", "qwen3-scratch")


def build_scratch_qwen3(folder: Path, size: str, seed: int) -> int:
    """Save a randomly initialised Qwen3 of ``size`` with the tiny tokenizer as a checkpoint folder; returns its
    parameter count."""
    import torch
    from transformers import Qwen3ForCausalLM
    from transformers.utils import logging as hf_logging

    from trace_rl.policy.models import tiny_config
    from trace_rl.policy.tokenizer import load_tiny_tokenizer

    hidden, layers, heads, kv_heads, mlp = SCRATCH_SIZES[size]
    tok = load_tiny_tokenizer()
    torch.manual_seed(seed)
    config = tiny_config(
        len(tok),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate_size=mlp,
    )
    model = Qwen3ForCausalLM(config)
    hf_logging.disable_progress_bar()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def peak_memory_mib(device: str) -> tuple[float, str]:
    """Peak memory in MiB and what it measures."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.max_memory_allocated(device) / 2**20, "GPU, torch.cuda.max_memory_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "CPU process peak RSS"


def check_config(policy: str, device: str, steps: int, extra: list[str]) -> Any:
    """The `TrainConfig` of one check: the smoke preset with `OVERRIDES`, then ``extra`` (SET / --set).

    Raises:
        trace_rl.train.config.ConfigError: a bad override (one line naming the key).
    """
    from trace_rl.train.config import load_config

    return load_config(
        preset="smoke",
        overrides=[
            *OVERRIDES,
            f"steps={steps}",
            f"device={device}",
            f"policy.name={policy}",
            *(["threads=1"] if device == "cpu" else []),  # CI: one core, no OpenMP spinning on a second
            *extra,
        ],
    )


def run_check(name: str, policy: str, device: str, steps: int, out: Path, extra: list[str]) -> dict[str, Any]:
    """One Trainer run; prints one line per step and returns the check's summary."""
    import torch

    from trace_rl.train.run import Trainer

    cfg = check_config(policy, device, steps, extra)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    records = Trainer(cfg, out / name, log=lambda line: None).run(progress=False)
    total = time.perf_counter() - t0
    for r in records:
        gen = r["time_generation_s"]
        grad = r.get("update_grad_norm")
        print(
            f"{name} step {r['step']}: {r['wall_s']:.2f} s, {r['tokens_generated']} tokens, "
            f"{r['tokens_generated'] / gen if gen > 0 else float('nan'):.0f} tokens/s in generation, "
            f"update {r['time_update_s']:.2f} s, update_rows {int(r.get('update_rows', 0))} of "
            f"{int(r.get('update_paths', 0))} paths, grad norm "
            f"{'-' if grad is None else f'{grad:.3g}'}, predictor {r['time_predictor_s']:.2f} s"
        )
    peak, what = peak_memory_mib(device)
    rows = [int(r.get("update_rows", 0)) for r in records]
    update_s = [float(r["time_update_s"]) for r in records]
    print(
        f"{name}: {len(records)} steps in {total:.1f} s (set-up included), update_rows "
        f"{', '.join(map(str, rows)) or '-'} ({sum(rows)} in all), update {sum(update_s):.2f} s in all, "
        f"peak memory {peak:.0f} MiB ({what})"
    )
    tokens = sum(r["tokens_generated"] for r in records)
    gen_s = sum(r["time_generation_s"] for r in records)
    return {
        "check": name,
        "steps": len(records),
        "seconds": total,
        "step_seconds": [r["wall_s"] for r in records],
        "tokens_per_s": tokens / gen_s if gen_s > 0 else None,
        "peak_memory_mib": peak,
        "peak_memory": what,
        "update_rows": rows,
        "update_paths": [int(r.get("update_paths", 0)) for r in records],
        "update_seconds": update_s,
        "update_grad_norm": [r.get("update_grad_norm") for r in records],
        "update_loss": [r.get("update_loss") for r in records],
    }


def check_problems(summary: dict[str, Any], steps: int) -> list[str]:
    """Why one check's summary (`run_check`) fails, one line each; empty when it passes.

    It fails when it recorded fewer than ``steps`` steps, when no step had a row with signal (``update_rows`` > 0:
    a path with a non-zero advantage, so the policy-gradient loss has a gradient), or when a step with rows has a
    gradient norm that is missing, not finite or 0, or a loss that is missing or not finite.
    """
    import math

    problems = []
    if summary["steps"] != steps:
        problems.append(f"{summary['steps']} of {steps} steps recorded")
    rows = summary["update_rows"]
    if not any(n > 0 for n in rows):
        problems.append(
            f"no step had a row with signal (update_rows {', '.join(map(str, rows)) or '-'}): every group's "
            "rewards agreed, so the policy-gradient update was not exercised"
        )
    for i, (n, grad, loss) in enumerate(
        zip(rows, summary["update_grad_norm"], summary["update_loss"], strict=True), start=1
    ):
        if n > 0 and (grad is None or not math.isfinite(grad) or grad <= 0):
            problems.append(f"step {i}: {n} rows with signal but gradient norm {grad}")
        if n > 0 and (loss is None or not math.isfinite(loss)):
            problems.append(f"step {i}: {n} rows with signal but loss {loss}")
    return problems


NEEDED = ("numpy", "yaml", "torch", "transformers", "tokenizers", "safetensors")


def missing_packages() -> list[str]:
    """The packages this check imports that are not installed (pip names in the message)."""
    import importlib.util

    return [name for name in NEEDED if importlib.util.find_spec(name) is None]


def third_party_modules() -> list[str]:
    """Top-level modules imported so far that are neither the standard library nor trace_rl (what a bare
    machine must provide for this check)."""
    names = {m.split(".")[0] for m in list(sys.modules)}
    return sorted(
        n for n in names if n not in sys.stdlib_module_names and not n.startswith("_") and n != "trace_rl"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default="device_check", help="run folders and summary.json go here")
    parser.add_argument(
        "--scratch-size", choices=sorted(SCRATCH_SIZES), default=None, help="100m on CUDA, small on CPU"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="more config overrides"
    )
    parser.add_argument(
        "--checks",
        default=",".join(CHECKS),
        help=f"comma-separated checks to run, in this order (default {','.join(CHECKS)})",
    )
    args = parser.parse_args(argv)
    checks = [c for c in args.checks.split(",") if c]
    unknown = [c for c in checks if c not in CHECKS]
    if unknown or not checks:
        print(
            f"device_check: --checks {args.checks!r}: expected a comma-separated subset of {', '.join(CHECKS)}"
        )
        return 1
    if args.steps < 1:
        print(f"device_check: --steps must be >= 1, got {args.steps}")
        return 1
    missing = missing_packages()
    if missing:
        print(
            f"device_check: missing Python packages {', '.join(missing)} (yaml is pyyaml); see scripts/device_check.sh"
        )
        return 1
    from trace_rl.errors import UserError

    try:  # a bad SET / --set is one line before anything is built (the tiny policy stands in for every check)
        check_config("tiny", args.device, args.steps, args.set)
    except UserError as exc:
        print(f"device_check: bad setting (SET / --set): {exc}")
        return 1
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"device_check: --device {args.device} but torch {torch.__version__} sees no CUDA device")
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    size = args.scratch_size or ("small" if args.device == "cpu" else "100m")
    where = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    print(
        f"device_check: {where}, torch {torch.__version__}, python {sys.version.split()[0]}, {args.steps} steps"
    )
    policies = {"tiny": "tiny", "qwen3-scratch": str(out / "qwen3_scratch")}
    if "qwen3-scratch" in checks:
        params = build_scratch_qwen3(out / "qwen3_scratch", size, seed=0)
        print(f"qwen3-scratch: {params / 1e6:.1f} M parameters ({size})")
    try:
        summary = [run_check(c, policies[c], args.device, args.steps, out, args.set) for c in checks]
    except (
        UserError
    ) as exc:  # a setting only the loaded policy refuses (sampling.max_new_tokens), bad task data
        print(f"device_check: {exc}")
        return 1
    for s in summary:
        s["problems"] = check_problems(s, args.steps)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print("imported third-party packages: " + ", ".join(third_party_modules()))
    failed = [s for s in summary if s["problems"]]
    for s in failed:
        for problem in s["problems"]:
            print(f"device_check: {s['check']}: {problem}")
    print("device_check: " + (f"FAIL ({', '.join(s['check'] for s in failed)})" if failed else "PASS"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
