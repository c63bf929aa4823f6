"""How much effective ratio any prefix allocation can add on a task: replays from every anchor, then allocations.

For P training prompts of a preset, M root rollouts each, then K replays from *every* anchor (turn prefix) of
every root rollout, with the trainer's own engine, environment and episode loop (`trace_rl.rollout.run_plan`).
From these outcomes it prints

1. the replay flip rate by anchor depth next to the fresh-rollout flip rate of the same prompts (the
   `replay_flip_rate_depth_<d>` / `fresh_flip_rate_depth_<d>` metrics of a training step, measured on every anchor
   instead of the allocated ones);
2. for the trees whose M roots agree (the only trees a replay can make mixed: the effective ratio counts a tree
   once it holds both outcomes), the chance that a local budget of B = N * M replays makes the tree mixed when the
   replays go to anchors drawn uniformly at random (TreePO), to the shallowest anchors first, or to the anchors
   with the highest *measured* flip rates (an oracle that knows each anchor's flip rate: an upper bound on what a
   perfect predictor could do; biased upward, because it picks the anchors whose K replays happened to flip).
   P(mixed) of an allocation k is 1 - prod_j (1 - f_j)^k_j with f_j the anchor's measured flip rate (replays
   independent given the anchor), the quantity the paper's prefix objective maximises (1 - q^k per anchor).

The effective-ratio headroom of the prefix stage over TreePO is then at most
(share of unanimous trees) x (oracle - random). `docs/results.md` (the multistep section) reports a run.

    python benchmarks/prefix_ceiling.py --policy runs/multistep/sft/policy [--preset multistep]
        [--prompts 64 --roots 8 --replays 4 --continuations 2 --out anchors.json]

Needs a warm-started policy folder (a run's ``sft/policy``): an untrained policy has nothing to flip.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def collect(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Root rollouts and K replays from every anchor; one record per prompt."""
    from trace_rl.rollout.scheduler import run_plan
    from trace_rl.train.config import load_config
    from trace_rl.train.run import Trainer
    from trace_rl.types import RootPlan

    overrides = [
        f"policy.name={args.policy}",
        "policy.sft_steps=0",
        "eval_every=0",
        f"threads={args.threads}",
    ]
    cfg = load_config(preset=args.preset, overrides=overrides)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, tmp, log=lambda s: None)
        trainer.setup()  # the trainer's engine, environment, codec and sampling settings
        rng = np.random.default_rng(args.seed)
        pool = [trainer.tasks[i] for i in rng.choice(len(trainer.tasks), args.prompts, replace=False)]
        plan = RootPlan(
            rollouts=np.full(len(pool), args.roots, np.int64),
            replay_budget=np.full(len(pool), 1e9),
            method="every-anchor",
        )

        def every_anchor(task: Any, tree: Any, anchors: Any, points: Any, budget: int) -> np.ndarray:
            return np.full(len(anchors), args.replays, np.int64)

        results = asyncio.run(
            run_plan(
                plan,
                pool,
                trainer.engine,
                trainer.env_factory,
                trainer.codec,
                trainer.sampling,
                every_anchor,
                max_turns=cfg.env.max_turns,
                max_concurrency=cfg.sampling.max_concurrency,
                seed=args.seed,
            )
        )
    prompts = []
    for r in results:
        leaf_of = r.tree.chain_leaf()
        outcome = {}
        for node, ep in r.replays:
            outcome.setdefault(int(node), []).append(float(ep.reward))
        anchors = [
            {
                "depth": int(r.tree.depth[node]),
                "reward": float(r.tree.reward[int(leaf_of[node])]),
                "replays": rewards,
            }
            for node, rewards in sorted(outcome.items())
        ]
        prompts.append({"task": r.task.id, "roots": [float(e.reward) for e in r.roots], "anchors": anchors})
    return prompts


def flip_rate(rewards: list[float], reward: float) -> float:
    """Share of replay rewards that differ from the rollout's own reward."""
    return float(np.mean([abs(x - reward) > 1e-6 for x in rewards])) if rewards else float("nan")


def p_mixed(f: np.ndarray, k: np.ndarray) -> float:
    """1 - prod_j (1 - f_j)^k_j: the chance that at least one of the replays flips (independent given the anchor)."""
    return float(1.0 - np.prod((1.0 - f) ** k))


def allocations(anchors: list[dict[str, Any]], budget: int) -> dict[str, float]:
    """P(mixed) of one unanimous tree under several ways to place ``budget`` replays on its anchors.

    random: each replay's anchor drawn uniformly (TreePO); shallowest: round-robin over the anchors at the smallest
    depth; trace_split: TRACE's objective (`allocate_prefixes` with q_j = 1 - f_j) on flip rates measured from the
    first half of each anchor's replays, scored on the second half (a predictor as good as K/2 replays per anchor);
    random_split: random scored on the second half (its baseline); best_split: every replay on the anchor whose
    first-half flip rate is highest, scored on the second half; best_anchor: every replay on the anchor with the highest measured flip rate (in-sample: an upper bound, biased
    upward by picking the anchor whose replays happened to flip).
    """
    from trace_rl.allocation import allocate_prefixes

    f = np.array([flip_rate(a["replays"], a["reward"]) for a in anchors])
    depth = np.array([a["depth"] for a in anchors])
    half = len(anchors[0]["replays"]) // 2
    f_a = np.array([flip_rate(a["replays"][:half], a["reward"]) for a in anchors])
    f_b = np.array([flip_rate(a["replays"][half:], a["reward"]) for a in anchors])
    shallow = np.flatnonzero(depth == depth.min())
    k_shallow = np.zeros(len(f))
    for i in range(budget):
        k_shallow[shallow[i % len(shallow)]] += 1
    k_split = np.asarray(allocate_prefixes(1.0 - f_a, budget), dtype=np.float64)
    return {
        "random": float(1.0 - np.mean(1.0 - f) ** budget),
        "shallowest": p_mixed(f, k_shallow),
        "trace_split": p_mixed(f_b, k_split),
        "random_split": float(1.0 - np.mean(1.0 - f_b) ** budget),
        "best_split": float(1.0 - (1.0 - f_b[int(np.argmax(f_a))]) ** budget),
        "best_anchor": float(1.0 - (1.0 - f.max()) ** budget),
    }


NAMES = ("random", "shallowest", "trace_split", "random_split", "best_split", "best_anchor")


def report(prompts: list[dict[str, Any]], continuations: int) -> dict[str, Any]:
    """Flip rates by depth and P(mixed) of the unanimous trees under each allocation (see the module doc)."""
    replay: dict[int, list[float]] = {}
    fresh: dict[int, list[float]] = {}
    for p in prompts:
        roots = np.array(p["roots"])
        for a in p["anchors"]:
            replay.setdefault(a["depth"], []).extend(abs(x - a["reward"]) > 1e-6 for x in a["replays"])
            if len(roots) > 1:  # the rollout itself is one of the roots with this reward: leave it out
                other = float(np.sum(np.abs(roots - a["reward"]) > 1e-6)) / (len(roots) - 1)
                fresh.setdefault(a["depth"], []).extend([other] * len(a["replays"]))
    by_depth = {
        d: {"replays": len(replay[d]), "replay": float(np.mean(replay[d])), "fresh": float(np.mean(fresh[d]))}
        for d in sorted(replay)
        if d in fresh
    }
    unanimous = [p for p in prompts if p["anchors"] and len(set(p["roots"])) == 1]
    rows = [allocations(p["anchors"], continuations * len(p["roots"])) for p in unanimous]
    mixed = {n: float(np.mean([r[n] for r in rows])) if rows else float("nan") for n in NAMES}
    share = len(unanimous) / max(len(prompts), 1)
    return {
        "prompts": len(prompts),
        "flip_rates_by_depth": by_depth,
        "unanimous_share": share,
        "unanimous_all_failed": sum(1 for p in unanimous if p["roots"][0] < 0.5),
        "p_mixed_unanimous": mixed,
        "headroom_best_anchor": share * (mixed["best_anchor"] - mixed["random"]),
        "headroom_trace_split": share * (mixed["trace_split"] - mixed["random_split"]),
        "headroom_best_split": share * (mixed["best_split"] - mixed["random_split"]),
        "headroom_shallowest": share * (mixed["shallowest"] - mixed["random"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", help="warm-started policy folder (a run's sft/policy); needed unless --load")
    ap.add_argument("--preset", default="multistep")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--roots", type=int, default=8, help="root rollouts per prompt (M)")
    ap.add_argument("--replays", type=int, default=4, help="replays from every anchor (K)")
    ap.add_argument("--continuations", type=int, default=2, help="N: a tree's local budget is N * M replays")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, help="write the per-anchor outcomes and the summary here (JSON)")
    ap.add_argument(
        "--load", type=Path, help="summarise outcomes written earlier by --out instead of sampling"
    )
    args = ap.parse_args()
    if not args.load and not args.policy:
        ap.error("--policy PATH is needed to sample (or --load FILE to summarise earlier outcomes)")
    t0 = time.perf_counter()
    prompts = json.loads(args.load.read_text())["prompts_data"] if args.load else collect(args)
    seconds = time.perf_counter() - t0
    record = {"args": {k: str(v) for k, v in vars(args).items()}, "seconds": seconds, "prompts_data": prompts}
    if args.out:  # the outcomes first: they took minutes to sample
        args.out.write_text(json.dumps(record))
    summary = report(prompts, args.continuations)
    print(
        f"{summary['prompts']} prompts x {args.roots} roots, {args.replays} replays per anchor ({seconds:.0f} s)"
    )
    print("depth  replays  replay flip  fresh flip  ratio")
    for d, row in summary["flip_rates_by_depth"].items():
        ratio = row["replay"] / row["fresh"] if row["fresh"] > 0 else float("nan")
        print(f"{d:5d}  {row['replays']:7d}  {row['replay']:11.3f}  {row['fresh']:10.3f}  {ratio:5.2f}")
    m = summary["p_mixed_unanimous"]
    print(
        f"unanimous trees: {summary['unanimous_share']:.3f} of prompts ({summary['unanimous_all_failed']} all "
        f"failed); P(mixed) after N*M = {args.continuations * args.roots} replays: "
        + ", ".join(f"{n} {m[n]:.3f}" for n in NAMES)
    )
    print(
        "effective-ratio headroom of prefix selection over random branching: "
        f"best anchor (in-sample bound) {summary['headroom_best_anchor']:+.3f}, "
        f"best anchor on split halves {summary['headroom_best_split']:+.3f}, "
        f"TRACE objective on split-half flip rates {summary['headroom_trace_split']:+.3f}, "
        f"shallowest first {summary['headroom_shallowest']:+.3f}"
    )
    if args.out:
        args.out.write_text(json.dumps({**summary, **record}))


if __name__ == "__main__":
    main()
