"""The native trainer on one device: 3 RL steps of TRACE on two policies, with tokens/s, step times, peak memory.

Run through scripts/device_check.sh (its header says what it needs and what has been run where). Two checks,
the same on every device, each a full `Trainer` run (local engine, policy update, predictor) on the toy
arithmetic tool env (`trace_rl.rollout.toy_env`, named as ``module:factory``: pure Python, no sandbox, no data
package) with the smoke preset's sizes:

- ``tiny``: the tiny Qwen3 policy of the presets (3.3 M parameters, random init);
- ``qwen3-scratch``: a Qwen3 built from its config here (random init, the tiny tokenizer) and saved as a local
  checkpoint folder: about 100 M parameters on CUDA (hidden 768, 16 layers), 0.1 M on CPU so that the CPU smoke
  test stays short (``--scratch-size`` overrides).

Per step it prints the step's wall-clock, generation tokens/s (tokens sampled / seconds in generation), update
and predictor seconds; per check the peak memory: ``torch.cuda.max_memory_allocated`` on CUDA (reset before each
check), the process's peak resident set size on CPU (``ru_maxrss``; it never decreases, so the second check's
figure includes the first's). Exit status 1 when a check produced no step record.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

ENV = "trace_rl.rollout.toy_env:ArithmeticToolEnv"
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


def run_check(name: str, policy: str, device: str, steps: int, out: Path, extra: list[str]) -> dict[str, Any]:
    """One Trainer run; prints one line per step and returns the check's summary."""
    import torch

    from trace_rl.train.config import load_config
    from trace_rl.train.run import Trainer

    cfg = load_config(
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
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    records = Trainer(cfg, out / name, log=lambda line: None).run(progress=False)
    total = time.perf_counter() - t0
    for r in records:
        gen = r["time_generation_s"]
        print(
            f"{name} step {r['step']}: {r['wall_s']:.2f} s, {r['tokens_generated']} tokens, "
            f"{r['tokens_generated'] / gen if gen > 0 else float('nan'):.0f} tokens/s in generation, "
            f"update {r['time_update_s']:.2f} s, predictor {r['time_predictor_s']:.2f} s"
        )
    peak, what = peak_memory_mib(device)
    print(
        f"{name}: {len(records)} steps in {total:.1f} s (set-up included), peak memory {peak:.0f} MiB ({what})"
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
    }


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
    args = parser.parse_args(argv)
    missing = missing_packages()
    if missing:
        print(
            f"device_check: missing Python packages {', '.join(missing)} (yaml is pyyaml); see scripts/device_check.sh"
        )
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
    params = build_scratch_qwen3(out / "qwen3_scratch", size, seed=0)
    print(f"qwen3-scratch: {params / 1e6:.1f} M parameters ({size})")
    summary = [
        run_check("tiny", "tiny", args.device, args.steps, out, args.set),
        run_check("qwen3-scratch", str(out / "qwen3_scratch"), args.device, args.steps, out, args.set),
    ]
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print("imported third-party packages: " + ", ".join(third_party_modules()))
    failed = [s["check"] for s in summary if s["steps"] != args.steps]
    print("device_check: " + (f"FAIL ({', '.join(failed)})" if failed else "PASS"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
