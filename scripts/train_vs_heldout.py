"""Pass@1 of policies on RL-pool prompts next to held-out prompts: does a run fit the prompts it trains on?

For each ``--policy`` (a policy folder, or a run folder whose latest ``checkpoints/step_*/policy`` is taken), the
same evaluation as a run's held-out one (`trace_rl.train.evaluation.evaluate_held_out`: ``env.eval_samples``
seeded samples per task at ``env.eval_temperature``) on the preset's held-out tasks and on ``--pool-tasks`` tasks
drawn (``--seed``) from its RL pool (`trace_rl.train.hygiene.run_tasks`, the prompts every method trains on).
Prints one JSON line per policy: ``held_out``, ``rl_pool`` and their difference ``gap``. A method whose RL-pool
pass@1 rises above the warm start's much more than its held-out pass@1 does is fitting the training prompts it
keeps revisiting (issue 37: PCL's and TRACE's training success on ``agentic``).

    python scripts/train_vs_heldout.py --preset agentic --policy results/c37/c1c/sft/policy \
      --policy runs/c37/grpo/seed_1 --policy runs/c37/pcl/seed_1 --pool-tasks 128
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", required=True)
    p.add_argument("--policy", action="append", required=True, type=Path, help="repeatable")
    p.add_argument("--pool-tasks", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    if args.pool_tasks < 1 or args.threads < 1:
        p.error("--pool-tasks and --threads must be >= 1")
    try:
        folders = [policy_folder(path) for path in args.policy]
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2

    import numpy as np

    from trace_rl.train.config import load_config
    from trace_rl.train.evaluation import evaluate_held_out
    from trace_rl.train.run import Trainer

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
        row = {
            "policy": str(given),
            "folder": str(folder),
            "held_out": held,
            "held_out_tasks": len(trainer.eval_tasks),
            "rl_pool": train,
            "rl_pool_tasks": k,
            "samples": cfg.env.eval_samples,
            "gap": train - held,
        }
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
