"""Peak memory and time of one policy update against `optim.micro_tokens` (gradient accumulation per forward pass).

Builds trees shaped like a `multistep` step (tiny policy; by default 16 prompts x 8 paths of 4 turns, a prompt of
120 tokens and turns of 60 tokens, so 132-token to 360-token paths, rewards mixed) and runs `policy_update` once
(minibatch 64) per setting, each in a fresh subprocess so that its peak RSS (``ru_maxrss``) is its own. Prints the
peak RSS, the update's seconds (median of --repeats) and the largest weight difference against micro_tokens=0.

    python benchmarks/archive/update_memory.py [--micro-tokens 0,8192,4096] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np


def one(micro_tokens: int, repeats: int, threads: int, prompts: int, paths: int) -> dict[str, float]:
    import torch

    from trace_rl.policy import load_policy
    from trace_rl.spec import UpdateSpec
    from trace_rl.train.update import policy_update
    from trace_rl.tree import RolloutTree
    from trace_rl.types import Turn

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    policy = load_policy("tiny", seed=0)
    start = [p.detach().clone() for p in policy.model.parameters()]

    def turn(n_model: int, n_obs: int) -> Turn:
        ids = rng.integers(3, 500, n_model + n_obs).astype(np.int64)
        mask = np.r_[np.ones(n_model, np.int8), np.zeros(n_obs, np.int8)]
        return Turn(ids, mask, (-rng.uniform(0.1, 3.0, ids.size) * mask).astype(np.float32))

    trees = []
    for _ in range(prompts):
        tree = RolloutTree.new(prompt_ids=rng.integers(3, 500, 120).astype(np.int64))
        for j in range(paths):
            turns = [turn(48, 12) for _ in range(int(rng.integers(1, 5)))]
            tree.add_rollout(turns, reward=float(j % 3 == 0))
        trees.append(tree)
    settings = UpdateSpec(estimator="treerpo", minibatch=64, minibatches=0, micro_tokens=micro_tokens)
    seconds = []
    for _ in range(repeats):
        with torch.no_grad():
            for p, s in zip(policy.model.parameters(), start, strict=True):
                p.copy_(s)
        opt = torch.optim.SGD(policy.model.parameters(), lr=1e-3)
        t0 = time.perf_counter()
        policy_update(policy.model, opt, trees, settings, pad_id=0, rng=np.random.default_rng(1))
        seconds.append(time.perf_counter() - t0)
    weights = torch.cat([p.detach().reshape(-1) for p in policy.model.parameters()]).numpy()
    np.save(f"/tmp/update_memory_{micro_tokens}.npy", weights)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB -> GB
    return {"micro_tokens": micro_tokens, "peak_rss_gb": peak, "seconds": float(np.median(seconds))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--micro-tokens", default="0,8192,4096")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--paths", type=int, default=8)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(one(args.child, args.repeats, args.threads, args.prompts, args.paths)))
        return
    rows = []
    for mt in (int(x) for x in args.micro_tokens.split(",")):
        cmd = [sys.executable, __file__, "--child", str(mt), "--repeats", str(args.repeats)]
        cmd += ["--threads", str(args.threads), "--prompts", str(args.prompts), "--paths", str(args.paths)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    base = np.load(f"/tmp/update_memory_{rows[0]['micro_tokens']}.npy")
    print(f"{args.prompts} trees x {args.paths} paths, minibatch 64, {args.threads} thread(s)")
    print("micro_tokens  peak RSS (GB)  update s (median)  max |w - w(first)|")
    for r in rows:
        diff = np.abs(np.load(f"/tmp/update_memory_{r['micro_tokens']}.npy") - base).max()
        print(f"{r['micro_tokens']:12d}  {r['peak_rss_gb']:13.2f}  {r['seconds']:17.2f}  {diff:.2e}")


if __name__ == "__main__":
    main()
