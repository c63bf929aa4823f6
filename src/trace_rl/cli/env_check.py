"""`trace-rl env-check NAME [--limit N] [--json]`: play gold and empty attempts through an environment.

For each task: the gold trajectory runs through reset/step; halfway it takes a snapshot, restores it into a
fresh env (made by make_env with the same name) and finishes on BOTH envs; gold succeeds only when both reach
reward 1 with identical observations (the save point reproduced the state). The empty attempt answers ""
every turn until the episode ends; it must score 0. Exit status 1 when gold < tasks or empty > 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from trace_rl.cli.common import UsageError
from trace_rl.errors import UserError


def check_env(name: str, limit: int, split: str = "train", seed: int = 0) -> dict[str, Any]:
    """Run the check; returns {"env", "tasks", "gold_success", "empty_success", "snapshot_mismatch", "failures"}."""
    from trace_rl.envs import gold_trajectory, load_tasks, make_env

    tasks = load_tasks(name, split=split, limit=limit, seed=seed)
    gold_ok = empty_ok = mismatches = 0
    failures: list[str] = []
    env = make_env(name)
    for task in tasks:
        turns = gold_trajectory(task)
        env.reset(task)
        mid = len(turns) // 2
        results = [env.step(t) for t in turns[:mid]]
        if results and results[-1].done:
            failures.append(f"{task.id}: gold ended early at turn {mid}")
            continue
        state = env.snapshot()
        fresh = make_env(name)
        fresh.restore(state)
        rest_a = [env.step(t) for t in turns[mid:]]
        rest_b = [fresh.step(t) for t in turns[mid:]]
        same = [r.observation for r in rest_a] == [r.observation for r in rest_b]
        mismatches += not same
        final_a, final_b = rest_a[-1], rest_b[-1]
        if same and final_a.done and final_a.reward == 1.0 and final_b.reward == 1.0:
            gold_ok += 1
        else:
            failures.append(
                f"{task.id}: gold reward {final_a.reward}/{final_b.reward}, same={same}, info={final_a.info}"
            )
        env.reset(task)
        for _ in range(1000):
            res = env.step("")
            if res.done:
                break
        else:
            failures.append(f"{task.id}: empty attempt never ended")
            continue
        empty_ok += res.reward == 1.0
    return {
        "env": name,
        "tasks": len(tasks),
        "gold_success": gold_ok,
        "empty_success": empty_ok,
        "snapshot_mismatch": mismatches,
        "failures": failures[:10],
    }


def _run(args: argparse.Namespace) -> int:
    from trace_rl.envs import ENV_NAMES

    if args.name not in ENV_NAMES:
        raise UsageError(f"unknown environment {args.name!r}; expected one of {', '.join(ENV_NAMES)}")
    if args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    report = check_env(args.name, args.limit, args.split, args.seed)
    if args.json:
        print(json.dumps(report))
    else:
        print(
            f"{report['env']}: {report['tasks']} tasks, gold {report['gold_success']}/{report['tasks']}, "
            f"empty {report['empty_success']}/{report['tasks']}, snapshot mismatches {report['snapshot_mismatch']}"
        )
        for line in report["failures"]:
            print("  " + line)
    ok = report["gold_success"] == report["tasks"] and report["empty_success"] == 0
    return 0 if ok else 1


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("env-check", help="play gold and empty attempts through an environment")
    p.add_argument("name", help="math_python, bfcl or multihop_qa")
    p.add_argument("--limit", type=int, default=40, help="number of tasks (default 40)")
    p.add_argument("--split", default="train", help="task split (default train)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (``python -m trace_rl.cli.env_check``), same arguments as the subcommand."""
    parser = argparse.ArgumentParser(prog="trace-rl")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["env-check", *(sys.argv[1:] if argv is None else argv)])
    try:
        return _run(args)
    except UserError as exc:  # anything else is a bug: its traceback shows
        print(f"trace-rl env-check: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
