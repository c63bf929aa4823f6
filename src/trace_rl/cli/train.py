"""`trace-rl train`: run (or resume) TRACE or a baseline on a task, logging metrics and checkpoints.

trace-rl train --preset demo --out runs/demo
trace-rl train --config my.yaml --method grpo --steps 20 --seed 1 --out runs/grpo
trace-rl train --preset demo --out runs/demo --set budget.roots=64 --set optim.lr=1e-4
trace-rl train --resume runs/demo
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    from trace_rl.allocation import METHODS
    from trace_rl.train.config import preset_names

    p = sub.add_parser("train", help="train a policy with TRACE or a baseline at equal budget")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--preset",
        default=None,
        help=f"a shipped preset ({', '.join(preset_names())})",
    )
    src.add_argument("--config", default=None, metavar="FILE", help="a YAML config file")
    p.add_argument(  # not in the group: combined with --preset/--config it gets its own one-line error
        "--resume", default=None, metavar="DIR", help="continue the run in DIR from its last checkpoint"
    )
    p.add_argument(
        "--method",
        default=None,
        help=f"one of {', '.join(METHODS)} (default: the preset's)",
    )
    p.add_argument("--steps", type=int, default=None, help="training steps")
    p.add_argument("--seed", type=int, default=None, help="random seed")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (metrics, checkpoints, report)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. budget.roots=64",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier run in --out (its metrics, checkpoints, logs and report) instead of refusing",
    )
    p.add_argument(
        "--no-progress", action="store_true", help="log one line per step instead of a progress bar"
    )
    p.set_defaults(func=run)


def overrides_from(args: argparse.Namespace) -> list[str]:
    """The --set overrides plus --method/--steps/--seed as section.key=value strings."""
    out = list(args.set)
    for key in ("method", "steps", "seed"):
        if getattr(args, key) is not None:
            out.append(f"{key}={getattr(args, key)}")
    return out


def run(args: argparse.Namespace) -> int:
    from trace_rl.cli.common import UsageError, output_folder
    from trace_rl.train.config import load_config

    if args.resume:
        from trace_rl.train.run import train
        from trace_rl.train.rundir import resume_config

        if args.preset or args.config:
            given = f"--preset {args.preset}" if args.preset else f"--config {args.config}"
            raise UsageError(f"--resume DIR continues the run with its saved config; do not pass {given}")
        if args.out and args.out != args.resume:
            raise UsageError("--resume DIR continues the run in DIR; do not pass a different --out")
        if args.overwrite:
            raise UsageError("--overwrite starts a new run; it cannot be combined with --resume")
        if overrides_from(args):
            raise UsageError("--resume continues a run with its saved config; overrides are not allowed")
        from trace_rl.train.checkpoint import completed_step, finished_run

        cfg = resume_config(args.resume)
        done = completed_step(args.resume)
        if done is not None and done >= cfg.steps:
            print(f"the run in {args.resume} is complete ({done}/{cfg.steps} steps); nothing to resume")
            print(summary_line(args.resume))
            return 0
        if done is not None and finished_run(args.resume):  # stopped on total_budget: another step overspends
            print(
                f"the run in {args.resume} is finished: total_budget {cfg.total_budget:g} could not pay another "
                f"step after step {done} of {cfg.steps}; nothing to resume"
            )
            print(summary_line(args.resume))
            return 0
        train(cfg, args.resume, resume=True, progress=not args.no_progress)
        return _finish(args.resume)
    if not args.out:
        raise UsageError("--out DIR is required (or --resume DIR)")
    output_folder(args.out)
    cfg = load_config(
        preset=args.preset if args.preset or args.config else "demo",
        file=args.config,
        overrides=overrides_from(args),
    )
    from trace_rl.train.run import train

    train(cfg, args.out, progress=not args.no_progress, overwrite=args.overwrite)
    return _finish(args.out)


def _finish(out: str) -> int:
    """After a run (new or resumed): the summary line and the report."""
    from trace_rl.metrics.report import write_report

    print(summary_line(out))
    print(f"report: {write_report(out)}")
    return 0


def summary_line(out: str) -> str:
    """One line on what the run did: held-out pass@1 first -> last, mean effective ratio and success rate."""
    from trace_rl.train.rundir import read_metrics, summarize

    records = read_metrics(f"{out}/metrics.jsonl")
    s = summarize(records)
    train_recs = [r for r in records if r.get("kind", "train") == "train"]
    parts = [f"{len(train_recs)} steps"]
    if "eval_accuracy" in s:
        parts.append(f"held-out pass@1 {s['eval_accuracy_first']:.3f} -> {s['eval_accuracy']:.3f}")
    for key, label, fmt in (
        ("effective_ratio", "mean effective ratio", ".3f"),
        ("success_rate", "mean success rate", ".3f"),
        ("budget_spent", "budget spent per step", ".1f"),
    ):
        if train_recs and key in s:  # summarize leaves out a metric some step did not log as a number
            parts.append(f"{label} {s[key]:{fmt}}")
    return "summary: " + ", ".join(parts)
