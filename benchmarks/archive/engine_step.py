"""One LocalEngine forward step, fast against the original (issue 38), on a fixed cache state.

For each batch size R in --rows, a fresh engine with a cache of R active rows holding --context cached tokens
each (rows 0..R-1, or every other row with --gaps: idle rows between active ones, as after some episodes park)
runs one decode step (one token per row) `--steps` times with the fast forward (`_forward_rows`) and with the
original forward (`_forward` over the slice 0..max row), alternating per repeat. Reported per R: CPU ms per
step of each (medians over --repeats; process CPU time, which with --threads 1 is the work done and depends less
on other processes than wall time), their ratio, and the largest logit difference of the two.

Prints one JSON line. Usage: python benchmarks/archive/engine_step.py [--rows 8,64,256] [--context 250] [--gaps]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time

import numpy as np
import torch

from trace_rl.policy import load_policy
from trace_rl.rollout.engine import LocalEngine


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", default="tiny")
    ap.add_argument("--rows", default="8,64,256", help="comma-separated batch sizes")
    ap.add_argument("--context", type=int, default=250, help="cached tokens per row")
    ap.add_argument("--gaps", action="store_true", help="active rows 0, 2, 4, ... (an idle row between two)")
    ap.add_argument("--steps", type=int, default=10, help="forward steps per timing")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    policy = load_policy(args.policy, seed=args.seed)
    vocab = int(policy.model.config.vocab_size)
    rng = np.random.default_rng(args.seed)
    out: dict[str, object] = {
        "policy": args.policy,
        "context": args.context,
        "gaps": args.gaps,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
    }
    for n in [int(r) for r in args.rows.split(",")]:
        stride = 2 if args.gaps else 1
        rows = np.arange(n, dtype=np.int64) * stride
        engine = LocalEngine(policy, max_batch=n, max_rows=max(2 * n, n * stride))
        engine._grow(max(n * stride, engine._rows_cap), max(args.context + 2, engine._pos_cap))
        # cache contents: keys/values of random tokens (one prefill), the same for both forwards
        prompt = torch.as_tensor(rng.integers(0, vocab, (n, args.context)))
        engine._forward_rows(rows, prompt, np.zeros(n, np.int64))
        ids = torch.as_tensor(rng.integers(0, vocab, (n, 1)))
        start = np.full(n, args.context, np.int64)
        hi = int(rows[-1]) + 1
        ids_hi = torch.zeros(hi, 1, dtype=torch.long)
        ids_hi[rows] = ids
        start_hi = torch.zeros(hi, dtype=torch.long)
        start_hi[rows] = args.context

        fast = functools.partial(engine._forward_rows, rows, ids, start)
        full = functools.partial(engine._forward, slice(0, hi), ids_hi, start_hi, write=rows)
        diff = float((fast() - full()[rows]).abs().max())
        times: dict[str, list[float]] = {"fast": [], "reference": []}
        for rep_i in range(args.repeats):
            order = [("fast", fast), ("reference", full)]
            for name, f in order if rep_i % 2 == 0 else order[::-1]:
                t0 = time.process_time()
                for _ in range(args.steps):
                    f()
                times[name].append((time.process_time() - t0) / args.steps * 1e3)
        med = {k: float(np.median(v)) for k, v in times.items()}
        out[f"rows_{n}"] = {
            "fast_cpu_ms": round(med["fast"], 2),
            "reference_cpu_ms": round(med["reference"], 2),
            "ratio": round(med["fast"] / med["reference"], 3),
            "max_abs_logit_diff": float(f"{diff:.3g}"),
        }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
