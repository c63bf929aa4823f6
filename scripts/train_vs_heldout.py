"""Pass@1 of policies on RL-pool prompts next to held-out prompts: does a run fit the prompts it trains on?

For each ``--policy`` (a policy folder, or a run folder whose latest ``checkpoints/step_*/policy`` is taken), the
same evaluation as a run's held-out one (`trace_rl.train.evaluation.evaluate_held_out`: ``env.eval_samples``
seeded samples per task at ``env.eval_temperature``) on the preset's held-out tasks and on ``--pool-tasks`` tasks
drawn (``--seed``) from its RL pool (`trace_rl.train.hygiene.run_tasks`, the prompts every method trains on).
With ``--trained-from RUN`` it also evaluates on the prompts that run trained on in its last steps (the prompt-level
outcomes in the online predictor's buffer of its latest checkpoint, ``predictor.pt``), as ``trained`` next to
``trained_observed``, the success those rollouts had in training. Prints one JSON line per policy: ``held_out``,
``rl_pool`` and their difference ``gap`` (and ``trained``). A method whose RL-pool
pass@1 rises above the warm start's much more than its held-out pass@1 does is fitting the training prompts it
keeps revisiting (issue 37: PCL's and TRACE's training success on ``agentic``).

    python scripts/train_vs_heldout.py --preset agentic --policy results/c37/c1c/sft/policy \
      --policy runs/c37/grpo/seed_1 --policy runs/c37/pcl/seed_1 --pool-tasks 128 --trained-from runs/c37/pcl/seed_1
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path


def policy_folder(path: Path) -> Path:
    """``path`` itself when it holds a policy, else its run's latest checkpoint policy.

    Raises:
        ValueError: neither.
    """
    if (path / "config.json").is_file() and (path / "model.safetensors").is_file():
        return path
    steps = sorted(
        (int(m.group(1)), p)
        for p in (path / "checkpoints").glob("step_*")
        if (m := re.fullmatch(r"step_(\d+)", p.name)) and (p / "policy").is_dir()
    )
    if not steps:
        raise ValueError(f"{path}: neither a policy folder nor a run folder with checkpoints/step_*/policy")
    return steps[-1][1] / "policy"


def trained_prompts(run: Path) -> dict[str, float]:
    """Prompt text -> mean training success of the prompt-level outcomes (depth 0) in the online predictor's buffer
    of ``run``'s latest checkpoint (weighted by their rollout counts).

    Raises:
        ValueError: no checkpoint with a predictor.pt, or no prompt-level outcome in its buffer.
    """
    import torch

    ckpt = policy_folder(run).parent / "predictor.pt"
    if not ckpt.is_file():
        raise ValueError(f"{run}: no predictor.pt next to its latest checkpoint policy")
    state = torch.load(ckpt, weights_only=False)
    sums: dict[str, list[float]] = {}
    for step in state.get("online", {}).get("buffer", []):
        for ex in step:
            if ex.get("depth") == 0:
                w = float(ex.get("weight", 1.0))
                acc = sums.setdefault(ex["text"], [0.0, 0.0])
                acc[0] += w * float(ex["target"])
                acc[1] += w
    if not sums:
        raise ValueError(f"{ckpt}: no prompt-level outcome in the online predictor's buffer")
    return {text: a / w for text, (a, w) in sums.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", required=True)
    p.add_argument("--policy", action="append", required=True, type=Path, help="repeatable")
    p.add_argument("--pool-tasks", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--trained-from", type=Path, help="a run folder: also evaluate on its last trained prompts"
    )
    args = p.parse_args(argv)
    if args.pool_tasks < 1 or args.threads < 1:
        p.error("--pool-tasks and --threads must be >= 1")
    try:
        folders = [policy_folder(path) for path in args.policy]
        trained = trained_prompts(args.trained_from) if args.trained_from is not None else {}
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2

    import numpy as np

    from trace_rl.train.config import load_config
    from trace_rl.train.evaluation import evaluate_held_out
    from trace_rl.train.run import Trainer
    from trace_rl.types import Task

    for given, folder in zip(args.policy, folders, strict=True):
        overrides = [f"policy.name={folder}", "policy.sft_steps=0", f"threads={args.threads}", *args.set]
        cfg = load_config(preset=args.preset, overrides=overrides)
        with tempfile.TemporaryDirectory() as tmp:
            trainer = Trainer(cfg, tmp, log=lambda s: None)
            trainer.setup()
            rng = np.random.default_rng(args.seed)
            k = min(args.pool_tasks, len(trainer.tasks))
            pool = [trainer.tasks[i] for i in sorted(rng.choice(len(trainer.tasks), k, replace=False))]
            run = (trainer.engine, trainer.env_factory, trainer.codec)
            held = evaluate_held_out(cfg, *run, trainer.eval_tasks, 0)["eval_accuracy"]
            train = evaluate_held_out(cfg, *run, pool, 0)["eval_accuracy"]
            from trace_rl.predictor import serialize_anchor

            by_prompt: dict[str, Task] = {}  # one task per distinct prompt: the pool can hold a prompt twice
            for t in trainer.tasks:
                if (key := serialize_anchor(t.prompt)) in trained:
                    by_prompt.setdefault(key, t)
            seen = list(by_prompt.values())
            if len(seen) < len(trained):
                print(
                    f"{len(trained) - len(seen)} trained prompts are not in this preset's RL pool",
                    file=sys.stderr,
                )
            extra = {}
            if seen:
                extra = {
                    "trained": evaluate_held_out(cfg, *run, seen, 0)["eval_accuracy"],
                    "trained_tasks": len(seen),
                    "trained_observed": float(np.mean([trained[serialize_anchor(t.prompt)] for t in seen])),
                }
        row = {
            "policy": str(given),
            "folder": str(folder),
            "held_out": held,
            "held_out_tasks": len(trainer.eval_tasks),
            "rl_pool": train,
            "rl_pool_tasks": k,
            "samples": cfg.env.eval_samples,
            "gap": train - held,
            **extra,
        }
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
