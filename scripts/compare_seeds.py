"""Chosen seeds of a `trace-rl compare` plan: the same run configs, folder layout and shared warm start.

`trace-rl compare --seeds K` runs seeds 0..K-1 and reads back the runs whose checkpoints it finds. When the
earlier seeds' folders are gone (a wiped machine; only their numbers were kept in docs/notebook/results_history.md) or another
session runs them, this runs just the listed seeds, exactly as compare would have run them:

    python scripts/compare_seeds.py --preset demo --steps 100 --set eval_every=25 --set env.eval_tasks=256 \
      --methods "grpo3=grpo@optim.lr=0.0003,trace3=trace@optim.lr=0.0003" --seeds 4 --jobs 2 --out runs/c22

Same as compare: the config is the preset plus ``--set`` and ``steps``; the warm start is
`trace_rl.train.compare_shared.warm_start_once` under OUT/warm_start (trained once, then reused); with ``--jobs`` > 1
every run gets one torch thread unless the config sets ``threads``; ``total_budget`` defaults to steps x the
per-step budget (so `dapo` runs as many steps as the budget pays for); runs land in OUT/<label>/seed_<s>/ and an
interrupted run resumes from its checkpoint. Read the finished runs with `scripts/paired_runs.py`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trace_rl.allocation import get_method
from trace_rl.train.compare import parse_seeds, plan_runs, train_runs
from trace_rl.train.compare_shared import parse_variant
from trace_rl.train.config import load_config


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", help="a named preset (default: demo unless --config is given)")
    p.add_argument("--config", help="a YAML config file, as compare's --config")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int)
    p.add_argument(
        "--methods", required=True, help="compare's --methods: METHOD or LABEL=METHOD@KEY=VALUE;..."
    )
    p.add_argument("--seeds", required=True, help="comma-separated seeds to run, e.g. 4 or 0,1")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    try:  # every check runs before the warm start, which can take many minutes
        overrides = list(args.set) + ([f"steps={args.steps}"] if args.steps is not None else [])
        cfg = load_config(
            preset=args.preset if args.preset or args.config else "demo",
            file=args.config,
            overrides=overrides,
        )
        variants = [parse_variant(m) for m in args.methods.split(",") if m.strip()]
        if not variants:
            raise ValueError("--methods needs at least one method")
        for _, method, _ in variants:
            get_method(method)
        _, plan = plan_runs(cfg, variants, parse_seeds(args.seeds), args.out, jobs=args.jobs)
    except (ValueError, KeyError) as exc:  # ConfigError is a ValueError
        p.error(str(exc))
    train_runs(plan, jobs=args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
