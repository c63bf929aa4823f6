"""Packed SFT batches against padded ones on a preset's warm-start data (issue 38 item 1, the warm start's half).

Builds the preset's warm-start examples exactly as `trace_rl.train.warm_start.warm_start_policy` does (its tasks,
gold trajectories, tokenizer and chat layout), draws ``--batches`` batches of ``policy.sft_batch`` examples, and
runs one SFT optimizer step (forward, backward, clip, AdamW) on each batch both ways from the same weights, back to
back in one process, ``--repeats`` times. Prints one JSON line:

- ``tokens_computed``: tokens the forward passes computed over the batches ({"padded", "packed"}: rows x longest
  row, padding included; packed: one row of the examples' own tokens, `trace_rl.policy.segments`) and their
  ratio; ``attention_pairs`` the same for the query-key pairs attention computes (padded: rows x longest squared;
  packed: each example's own square);
- ``wall_ratio``: median packed step seconds / median padded step seconds (and both medians, per batch);
  ``cpu_ratio`` the same in CPU seconds of the process, which a loaded machine disturbs less;
- ``max_rel_loss_err``: max over batches of |packed - padded| / padded of the batch loss at the starting weights;
- ``example_tokens``: mean and max tokens of an example, and the prompt prefix all examples share.

    python benchmarks/archive/sft_packing.py [--preset multistep] [--batches 8] [--repeats 3] [--threads 1]

``--compare dtype`` compares the warm start's precisions instead (``policy.sft_dtype``): float32 against
bfloat16 autocast, both on the preset's packing, with the same JSON keys where the two ways are named
"float32" and "bfloat16" (``wall_ratio`` and ``cpu_ratio`` are bfloat16 / float32, ``max_rel_loss_err`` the
bfloat16 loss against the float32 one). ``--compare compile`` compares today's default (eager float32) against
the forward through ``torch.compile(model, dynamic=True)`` (``policy.sft_compile``) at ``--dtype`` (default
bfloat16), named "eager" and "compiled"; ``first_step_s`` then holds each way's untimed first step (the compile).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from typing import Any

import numpy as np


def examples_of(preset: str) -> tuple[Any, list[Any], Any]:
    """(config, warm-start SFT examples, policy) of ``preset``, as its warm start builds them."""
    from trace_rl.envs import gold_trajectory, make_env
    from trace_rl.policy import load_policy
    from trace_rl.policy.sft import build_sft_examples
    from trace_rl.train.config import load_config
    from trace_rl.train.hygiene import run_tasks

    cfg = load_config(preset=preset)
    tasks = list(run_tasks(cfg).sft)
    policy = load_policy(cfg.policy.name, seed=cfg.seed)
    gold = [gold_trajectory(t, cfg.env.name) for t in tasks]
    examples = build_sft_examples(
        tasks, gold, lambda: make_env(cfg.env.name), policy.tokenizer, render_tools=cfg.policy.render_tools
    )
    return cfg, examples, policy


def step(
    model: Any, batch: list[Any], packed: bool, pad_id: int, dtype: str = "float32", net: Any = None
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one SFT optimizer step on ``batch`` (the
    `trace_rl.policy.sft.train_sft` step); ``net``: what the loss runs through (``model`` compiled), default
    ``model``."""
    import torch

    from trace_rl.policy.sft import batch_loss

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    t0, c0 = time.perf_counter(), time.process_time()
    loss = batch_loss(model if net is None else net, batch, 1024, pad_id, packed=packed, dtype=dtype)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return time.perf_counter() - t0, time.process_time() - c0


def tokens(batch: list[Any], packed: bool) -> int:
    """Tokens a forward pass over ``batch`` computes: padded, rows x longest row; packed, the examples' own tokens
    (one row without padding, `trace_rl.policy.segments`)."""
    seqs = [e.ids[:1024] for e in batch]
    return sum(s.size for s in seqs) if packed else len(seqs) * max(s.size for s in seqs)


def attention_work(batch: list[Any], packed: bool) -> int:
    """Query-key pairs the attention over ``batch`` computes: padded, rows x longest squared; packed, each
    example's own square."""
    seqs = [e.ids[:1024] for e in batch]
    return sum(s.size**2 for s in seqs) if packed else len(seqs) * max(s.size for s in seqs) ** 2


def main() -> None:
    import torch

    from trace_rl.policy.packing import shared_prefix
    from trace_rl.policy.sft import batch_loss

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="multistep")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compare", choices=("packing", "dtype", "compile"), default="packing")
    ap.add_argument(
        "--dtype", choices=("float32", "bfloat16"), default="bfloat16", help="--compare compile's"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg, examples, policy = examples_of(args.preset)
    rng = np.random.default_rng(0)
    batches = [
        [examples[i] for i in rng.choice(len(examples), cfg.policy.sft_batch, replace=False)]
        for _ in range(args.batches)
    ]
    pad_id = int(policy.tokenizer.pad_token_id or 0)
    model = policy.model.train()
    # the two ways: (name, packed, dtype, compiled), the baseline first
    tree = cfg.optim.packing == "tree"
    ways = {
        "packing": [("padded", False, "float32", False), ("packed", True, "float32", False)],
        "dtype": [("float32", tree, "float32", False), ("bfloat16", tree, "bfloat16", False)],
        "compile": [("eager", tree, "float32", False), ("compiled", tree, args.dtype, True)],
    }[args.compare]
    start = copy.deepcopy(model.state_dict())
    # one model per way, reset to the same weights before each step (a compiled way's wrapper shares them)
    nets = {}
    for name, _, _, compiled in ways:
        own = copy.deepcopy(model)
        nets[name] = (own, torch.compile(own, dynamic=True) if compiled else own)
    first: dict[str, float] = {}
    for name, packed, dtype, _ in ways:  # untimed first step: the compile of a compiled way
        own, net = nets[name]
        first[name] = step(own, batches[0], packed, pad_id, dtype, net)[0]
    errs = []
    with torch.no_grad():
        for b in batches:
            loss_base, loss_new = (
                float(batch_loss(nets[name][1], b, 1024, pad_id, packed=p, dtype=d)) for name, p, d, _ in ways
            )
            errs.append(abs(loss_new - loss_base) / abs(loss_base))
    times: dict[str, list[float]] = {name: [] for name, *_ in ways}
    cpu: dict[str, list[float]] = {name: [] for name, *_ in ways}
    for _ in range(args.repeats):
        for b in batches:
            for name, packed, dtype, _ in ways:  # back to back, from the same weights
                own, net = nets[name]
                own.load_state_dict(start)
                wall, used = step(own, b, packed, pad_id, dtype, net)
                times[name].append(wall)
                cpu[name].append(used)
    lengths = [e.ids.size for e in examples]
    common = min(shared_prefix(examples[0].ids, e.ids) for e in examples)
    computed = {name: sum(tokens(b, packed) for b in batches) for name, packed, *_ in ways}
    pairs = {name: sum(attention_work(b, packed) for b in batches) for name, packed, *_ in ways}
    med = {name: statistics.median(v) for name, v in times.items()}
    med_cpu = {name: statistics.median(v) for name, v in cpu.items()}
    (base, *_), (new, *_) = ways
    print(
        json.dumps(
            {
                "preset": args.preset,
                "compare": args.compare,
                "batch": cfg.policy.sft_batch,
                "batches": args.batches,
                "repeats": args.repeats,
                "threads": args.threads,
                "example_tokens": {
                    "mean": float(np.mean(lengths)),
                    "max": int(max(lengths)),
                    "shared": common,
                },
                "tokens_computed": {**computed, "ratio": computed[new] / computed[base]},
                "attention_pairs": {**pairs, "ratio": pairs[new] / pairs[base]},
                "step_s": med,
                "wall_ratio": med[new] / med[base],
                "cpu_s": med_cpu,
                "cpu_ratio": med_cpu[new] / med_cpu[base],
                "max_rel_loss_err": max(errs),
                "first_step_s": first,
            }
        )
    )


if __name__ == "__main__":
    main()
