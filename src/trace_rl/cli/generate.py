"""`trace-rl generate`: sample one reply from a policy (a quick check that a policy loads and works)."""

from __future__ import annotations

import argparse

from trace_rl.cli.common import UsageError, user_input


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "generate", help="sample a reply from a policy (tiny, smollm2-135m-instruct, or a path)"
    )
    p.add_argument("--policy", required=True, help="tiny | smollm2-135m-instruct | checkpoint folder")
    p.add_argument("--prompt", required=True, help="the user message")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tools", action="store_true", help="show the python tool schema in the system prompt")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.prompt.strip():
        raise UsageError("--prompt is empty")
    from trace_rl.policy import CHAT, load_policy
    from trace_rl.rollout.backends import SamplingParams
    from trace_rl.rollout.engine import LocalEngine
    from trace_rl.rollout.toy_env import PYTHON_TOOL

    with user_input():  # SamplingParams checks --max-new-tokens, --temperature and --top-p
        sampling = SamplingParams(args.max_new_tokens, args.temperature, args.top_p, args.seed)
    policy = load_policy(args.policy, seed=args.seed)
    text = CHAT.prompt(args.prompt, (PYTHON_TOOL,) if args.tools else ())
    ids = policy.tokenizer.encode(text, add_special_tokens=False)
    engine = LocalEngine(policy, max_batch=1)
    (completion,) = engine.generate_sync(ids, sampling)
    out = [int(i) for i in completion.token_ids if int(i) not in policy.stop_ids]
    print(policy.tokenizer.decode(out, skip_special_tokens=False))
    return 0
