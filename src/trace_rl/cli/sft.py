"""`trace-rl sft`: supervised warm start on an environment's gold trajectories, with a jump check.

Trains step-based (docs/policy.md), evaluates greedy success every --eval-every steps (the copy-learning jump
of RESOURCES.md shows up there), and at the end samples --samples episodes per prompt at temperature 1 on
--eval-prompts training prompts to report the share of mixed prompts. Writes the policy and sft_report.json to
--out. Exit status 3 when the warm start did not reach a useful spread (mean success 0 or mixed share below
--min-mixed): RL should not start from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trace_rl.cli.common import UsageError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("sft", help="supervised warm start on gold trajectories (loss on model tokens only)")
    p.add_argument(
        "--env",
        required=True,
        help="environment name (toy_arith, an envs package name, or module:factory for your own)",
    )
    p.add_argument("--policy", default="tiny", help="tiny | smollm2-135m-instruct | checkpoint folder")
    p.add_argument("--out", required=True, help="output folder (policy + sft_report.json)")
    p.add_argument("--steps", type=int, default=1900)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--train-limit", type=int, default=2000, help="training tasks")
    p.add_argument("--eval-prompts", type=int, default=32, help="training prompts used to measure the spread")
    p.add_argument("--samples", type=int, default=8, help="samples per prompt for the spread")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--min-mixed", type=float, default=0.2, help="fail (exit 3) below this mixed share")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.steps < 1 or args.batch_size < 1 or args.eval_prompts < 1 or args.samples < 1:
        raise UsageError("--steps, --batch-size, --eval-prompts and --samples must be >= 1")
    import torch

    from trace_rl.cli._envs import resolve_env
    from trace_rl.cli.common import user_input
    from trace_rl.policy import load_policy
    from trace_rl.policy.sft import SFTConfig, build_sft_examples, train_sft

    with user_input():  # SFTConfig checks the command's own --steps, --batch-size, --lr, --eval-every, --seed
        cfg = SFTConfig(
            steps=args.steps,
            batch_size=args.batch_size,
            lr=args.lr,
            eval_every=args.eval_every,
            seed=args.seed,
        )
    from trace_rl.rollout.agent import ChatCodec
    from trace_rl.rollout.backends import SamplingParams
    from trace_rl.rollout.engine import LocalEngine
    from trace_rl.rollout.evaluate import success_spread

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    entry = resolve_env(args.env)
    tasks = entry.load_tasks("train", args.train_limit, args.seed)
    if not tasks:
        raise UsageError(f"environment {args.env!r} has no training tasks")
    policy = load_policy(args.policy, seed=args.seed)
    examples = build_sft_examples(
        tasks, [entry.gold_trajectory(t) for t in tasks], entry.make, policy.tokenizer
    )
    codec = ChatCodec(policy.tokenizer)
    eval_tasks = tasks[: args.eval_prompts]
    factory = lambda: entry.make(max_turns=args.max_turns)  # noqa: E731

    def evaluate(step: int) -> dict[str, float]:
        engine = LocalEngine(policy, max_batch=64)  # fresh: cached keys/values are stale after an update
        greedy = SamplingParams(args.max_new_tokens, 0.0, seed=args.seed)
        m = success_spread(engine, factory, codec, eval_tasks, greedy, samples=1, max_turns=args.max_turns)
        return {"greedy_success": m["mean_success"]}

    result = train_sft(
        policy.model,
        examples,
        cfg,
        pad_id=int(policy.tokenizer.pad_token_id),
        evaluate=evaluate,
        log=lambda s: print(s, file=sys.stderr, flush=True),
    )
    engine = LocalEngine(policy, max_batch=64)
    sampling = SamplingParams(args.max_new_tokens, 1.0, seed=args.seed + 1)
    spread = success_spread(
        engine,
        factory,
        codec,
        eval_tasks,
        sampling,
        samples=args.samples,
        max_turns=args.max_turns,
        seed=args.seed,
    )
    ok = spread["mean_success"] > 0 and spread["mixed_share"] >= args.min_mixed
    out = Path(args.out)
    policy.save(out)
    report = {
        "env": args.env,
        "policy": args.policy,
        "examples": len(examples),
        "model_tokens_per_example": float(sum(int(e.loss_mask.sum()) for e in examples) / len(examples)),
        "sft": result.to_dict(),
        "spread": {**spread, "prompts": len(eval_tasks), "samples": args.samples, "temperature": 1.0},
        "jump_verified": ok,
    }
    (out / "sft_report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"out": str(out), "jump_verified": ok, **spread}))
    if not ok:
        print(
            f"trace-rl sft: warm start not useful yet (mean success {spread['mean_success']:.3f}, mixed share "
            f"{spread['mixed_share']:.3f} < {args.min_mixed}); train longer before RL",
            file=sys.stderr,
        )
        return 3
    return 0
