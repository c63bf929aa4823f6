"""How much effective ratio any prefix allocation can add on a task: replays from every anchor, then allocations.

For P training prompts of a preset, M root rollouts each, then K replays from *every* anchor (turn prefix) of
every root rollout, with the trainer's own engine, environment and episode loop (`trace_rl.rollout.scheduler.run_plan`).
From these outcomes it prints

1. the replay flip rate by anchor depth next to the fresh-rollout flip rate of the same prompts (the
   `replay_flip_rate_depth_<d>` / `fresh_flip_rate_depth_<d>` metrics of a training step, measured on every anchor
   instead of the allocated ones), over all trees and over the unanimous ones;
2. for the trees whose M roots agree (the only trees a replay can make mixed: the effective ratio counts a tree
   once it holds both outcomes), the chance P(mixed) that a local budget of B = N * M replays holds at least one
   flip, for several ways to place the replays (`allocations`). P(mixed) of an allocation k is
   1 - prod_j (1 - f_j)^k_j (replays independent given the anchor). Note that this is not what TRACE's prefix
   objective maximises: `allocate_prefixes` maximises the expected number of anchors that flip,
   sum_j (1 - q_j^k_j), which spreads replays; P(mixed) alone would put every replay on the best anchor. The
   contrast objective (``budget.prefix_objective=contrast``, `allocate_contrast`; docs/allocation.md) adds
   P(mixed) itself as its tree term: rows ``contrast_split`` (its default sibling weight 1) and
   ``contrast_w0_split`` (weight 0: the tree term alone).

Estimation: (1 - f_j)^k is estimated without bias from an anchor's F flips in K replays by the chance that k of
them, drawn without replacement, all agree with the rollout, C(K - F, k) / C(K, k) (k <= K), so an allocation that
does not look at the outcomes is scored on all K replays, and one chosen from the first K/2 replays of each anchor
(a predictor as good as K/2 replays) is scored on the other K/2, at most K/2 replays per anchor. Plugging measured
rates into (1 - f)^k instead would be biased (downward for concentrated allocations scored on few replays, upward
for anchors picked because their replays happened to flip).

The effective-ratio headroom of an allocation over TreePO's random branching is
(share of unanimous trees) x (its P(mixed) - random's). `docs/notebook/results_history.md` (the multistep section) reports a run.

    python benchmarks/prefix_ceiling.py --policy runs/multistep/sft/policy [--preset multistep]
        [--prompts 64 --roots 8 --replays 4 --continuations 2 --out anchors.json]
        [--set env.task_kwargs.config.max_terms=4 ...]   # the preset's settings changed as in `train --set`
    python benchmarks/prefix_ceiling.py --load anchors.json[.gz] --split-roots 4   # the same outcomes, 4-root trees

Needs a warm-started policy folder (a run's ``sft/policy``): an untrained policy has nothing to flip.

``--out`` writes the summary and ``prompts_data``: per prompt ``task`` (id), ``roots`` (root rewards), ``text`` (the
prompt's predictor text, `serialize_anchor` with ``--max-chars``), ``prompt_ids`` (its token ids) and ``anchors``,
each with ``depth``, ``reward`` (its rollout's reward), ``replays`` (the replays' rewards), ``text`` (the anchor's
predictor text), ``prefix_ids`` (the token context at its save point, what every replay started from), ``leaf`` (the
leaf node of the rollout it lies on), ``observations`` (the environment's replies of its turns, oldest first) and
``group`` (its `trace_rl.predictor.consensus.sibling_consensus` row: what the prompt's other roots say) and
``same_state`` (successes, trials of the other roots in its environment state: `same_state_outcomes`).
``benchmarks/prefix_predictor.py`` scores success predictors on these anchors.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import tempfile
import time
from math import comb
from pathlib import Path
from typing import Any

import numpy as np


def collect(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Root rollouts and K replays from every anchor; one record per prompt."""
    from trace_rl.predictor import serialize_anchor
    from trace_rl.predictor.consensus import same_state_outcomes, sibling_consensus
    from trace_rl.rollout.scheduler import run_plan
    from trace_rl.train.config import load_config
    from trace_rl.train.run import Trainer
    from trace_rl.types import RootPlan

    overrides = [
        f"policy.name={args.policy}",
        "policy.sft_steps=0",
        "eval_every=0",
        f"threads={args.threads}",
        *args.set,
    ]
    cfg = load_config(preset=args.preset, overrides=overrides)
    max_chars = args.max_chars
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
                anchorless_fresh=False,  # replays only: the huge budget must not buy fresh rollouts
            )
        )
    prompts = []
    for r in results:
        leaf_of = r.tree.chain_leaf()
        outcome: dict[int, list[float]] = {}
        prefix_ids: dict[int, list[int]] = {}
        for node, ep in r.replays:
            outcome.setdefault(int(node), []).append(float(ep.reward))
            prefix_ids.setdefault(int(node), [int(t) for t in ep.prompt_ids])  # the save point's context
        anchors = [
            {
                "depth": int(r.tree.depth[node]),
                "reward": float(r.tree.reward[int(leaf_of[node])]),
                "replays": rewards,
                "text": serialize_anchor(
                    r.task.prompt,
                    [r.tree.turns[int(y)] for y in r.tree.path_to(node)[1:]],
                    max_chars=max_chars,
                ),
                "prefix_ids": prefix_ids[node],
                "leaf": int(leaf_of[node]),  # the rollout the anchor lies on (its leaf node)
                "observations": [r.tree.turns[int(y)].observation for y in r.tree.path_to(node)[1:]],
            }
            for node, rewards in sorted(outcome.items())
        ]
        # what the prompt's other roots say, keyed by text as the predictor keys it (consensus module doc)
        nodes = sorted(outcome)
        rows = sibling_consensus(r.tree, nodes, keys=[a["text"] for a in anchors])
        same_s, same_n = same_state_outcomes(r.tree, nodes)
        for a, row, s_, n_ in zip(anchors, rows, same_s, same_n, strict=True):
            a["group"] = row.tolist()
            a["same_state"] = [float(s_), float(n_)]
        prompts.append(
            {
                "task": r.task.id,
                "roots": [float(e.reward) for e in r.roots],
                "root_leaves": [int(x) for x in r.tree.leaves() if not r.tree.is_replay[x]],  # roots in order
                "anchors": anchors,
                "text": serialize_anchor(r.task.prompt, [], max_chars=max_chars),
                "prompt_ids": [int(t) for t in r.roots[0].prompt_ids],
            }
        )
    return prompts


def split_roots(prompts: list[dict[str, Any]], m: int) -> list[dict[str, Any]]:
    """Each prompt's R roots as R / m trees of m roots (in sampling order), each with its own roots' anchors.

    The roots of a prompt are independent rollouts, so m of them with the anchors on their rollouts are exactly what
    sampling m roots would have given: the ceiling at fewer roots per prompt, from outcomes sampled once. An anchor
    belongs to the root whose rollout it lies on (its ``leaf``); files written before ``root_leaves`` was recorded
    map the distinct anchor leaves, in node order, to the roots in order, which needs every root to hold an anchor.

    Raises:
        ValueError: m does not divide a prompt's root count, or an anchor's leaf or reward matches no root.
    """
    out = []
    for p in prompts:
        roots = p["roots"]
        if m < 1 or len(roots) % m:
            raise ValueError(f"--split-roots {m} is not a divisor of prompt {p['task']}'s {len(roots)} roots")
        leaves = p.get("root_leaves") or sorted({a["leaf"] for a in p["anchors"]})
        if len(leaves) != len(roots):
            raise ValueError(
                f"prompt {p['task']}: {len(leaves)} rollouts with anchors for {len(roots)} roots and no root_leaves "
                "recorded: cannot tell which root an anchor belongs to"
            )
        root_of = {leaf: i for i, leaf in enumerate(leaves)}
        for a in p["anchors"]:
            i = root_of.get(a["leaf"])
            if i is None or abs(roots[i] - a["reward"]) > 1e-6:
                raise ValueError(
                    f"prompt {p['task']}: an anchor on leaf {a['leaf']} matches no root's rollout"
                )
        for start in range(0, len(roots), m):
            mine = set(range(start, start + m))
            out.append(
                {
                    **p,
                    "roots": roots[start : start + m],
                    "root_leaves": leaves[start : start + m],
                    "anchors": [a for a in p["anchors"] if root_of[a["leaf"]] in mine],
                }
            )
    return out


def flips(rewards: list[float], reward: float) -> int:
    """How many replay rewards differ from the rollout's own reward (by more than 1e-6)."""
    return sum(abs(x - reward) > 1e-6 for x in rewards)


def p_mixed(flipped: np.ndarray, trials: np.ndarray, k: np.ndarray) -> float:
    """Unbiased estimate of 1 - prod_j (1 - f_j)^k_j from each anchor's ``flipped`` of ``trials`` replays.

    Each factor (1 - f_j)^k_j is estimated by C(trials_j - flipped_j, k_j) / C(trials_j, k_j), the chance that k_j
    of the replays drawn without replacement all agree with the rollout (unbiased for k_j <= trials_j).

    Raises:
        ValueError: an allocation puts more replays on an anchor than it has measured replays.
    """
    if np.any(k > trials):
        raise ValueError(f"allocation {k.tolist()} exceeds the measured replays {trials.tolist()}")
    none = np.prod(
        [comb(int(t - f), int(n)) / comb(int(t), int(n)) for f, t, n in zip(flipped, trials, k, strict=True)]
    )
    return float(1.0 - none)


def allocations(anchors: list[dict[str, Any]], budget: int) -> dict[str, float]:
    """P(mixed) of one unanimous tree under several ways to place ``budget`` replays on its anchors.

    random: each replay's anchor drawn uniformly with replacement (TreePO), P(mixed) = 1 - (mean_j (1 - f_j))^B
    with f pooled over all the tree's replays (a mean over dozens of anchors: its plug-in bias is negligible);
    shallowest: round-robin over the anchors at the smallest depth (the next depth once each has K), scored on all
    K replays; trace_split: TRACE's
    objective (`allocate_prefixes` with q_j = 1 - f_j, at most K/2 per anchor) on the flip rates of the first K/2
    replays of each anchor, scored on the other K/2; best_split: K/2 replays on each of the anchors with the most
    first-half flips (ties to the shallowest), as concentrated as the held-out replays allow, scored on the other
    K/2; contrast_split / contrast_w0_split: the contrast objective (`allocate_contrast`, unanimous tree, sibling
    weight 1 / 0) on the same first-half rates and cap, scored on the other K/2. Needs K >= 2 replays per anchor.
    """
    from trace_rl.allocation import SIBLING_WEIGHT, allocate_contrast, allocate_prefixes

    replays = [a["replays"] for a in anchors]
    if min(len(r) for r in replays) < 2:
        raise ValueError("the split-half allocations need at least 2 replays per anchor")
    reward = [a["reward"] for a in anchors]
    depth = np.array([a["depth"] for a in anchors])
    half = min(len(r) for r in replays) // 2
    f_all = np.array([flips(r, w) for r, w in zip(replays, reward, strict=True)])
    n_all = np.array([len(r) for r in replays])
    f_a = np.array([flips(r[:half], w) for r, w in zip(replays, reward, strict=True)])
    f_b = np.array([flips(r[half:], w) for r, w in zip(replays, reward, strict=True)])
    n_b = np.array([len(r) - half for r in replays])
    cap = int(n_b.min())
    k_shallow = np.zeros(len(anchors), np.int64)  # round-robin at the smallest depth, deeper once it is full
    left = budget
    for d in np.unique(depth):
        level = [int(j) for j in np.flatnonzero(depth == d)]
        while left > 0 and any(k_shallow[j] < n_all[j] for j in level):
            for j in level:
                if left > 0 and k_shallow[j] < n_all[j]:
                    k_shallow[j] += 1
                    left -= 1
    k_trace = np.asarray(allocate_prefixes(1.0 - f_a / half, budget, max_per_prefix=cap), dtype=np.int64)
    k_contrast = {
        w: allocate_contrast(1.0 - f_a / half, budget, unanimous=True, weight=w, max_per_prefix=cap)
        for w in (SIBLING_WEIGHT, 0.0)
    }
    k_best = np.zeros(len(anchors), np.int64)
    for j in np.lexsort((depth, -f_a))[: -(-budget // cap)]:  # most first-half flips, then shallowest
        k_best[j] = min(cap, budget - int(k_best.sum()))
    return {
        "random": float(1.0 - (1.0 - f_all.sum() / n_all.sum()) ** budget),
        "shallowest": p_mixed(f_all, n_all, k_shallow),
        "trace_split": p_mixed(f_b, n_b, k_trace),
        "best_split": p_mixed(f_b, n_b, k_best),
        "contrast_split": p_mixed(f_b, n_b, k_contrast[SIBLING_WEIGHT]),
        "contrast_w0_split": p_mixed(f_b, n_b, k_contrast[0.0]),
    }


NAMES = ("random", "shallowest", "trace_split", "best_split", "contrast_split", "contrast_w0_split")


def unanimous(p: dict[str, Any]) -> bool:
    """All root rewards equal (within 1e-6, the tolerance a flip uses) and at least one anchor to replay from."""
    return bool(p["anchors"]) and max(p["roots"]) - min(p["roots"]) <= 1e-6


def depth_table(prompts: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Per anchor depth: replays, replay flip rate, fresh flip rate (share of the prompt's other roots that differ)."""
    replay: dict[int, list[float]] = {}
    fresh: dict[int, list[float]] = {}
    for p in prompts:
        roots = np.array(p["roots"])
        for a in p["anchors"]:
            replay.setdefault(a["depth"], []).extend(abs(x - a["reward"]) > 1e-6 for x in a["replays"])
            if len(roots) > 1:  # the rollout itself is one of the roots with this reward: leave it out
                other = float(np.sum(np.abs(roots - a["reward"]) > 1e-6)) / (len(roots) - 1)
                fresh.setdefault(a["depth"], []).extend([other] * len(a["replays"]))
    return {
        d: {"replays": len(replay[d]), "replay": float(np.mean(replay[d])), "fresh": float(np.mean(fresh[d]))}
        for d in sorted(replay)
        if d in fresh
    }


def headroom_interval(
    prompts: list[dict[str, Any]], rows: list[dict[str, float] | None], samples: int, seed: int = 0
) -> dict[str, list[float]]:
    """95% percentile intervals of each allocation's headroom, resampling prompts (``task``) with replacement.

    The headroom is a mean over trees, sum over unanimous trees of (P(mixed) - random's) / trees, so each tree
    contributes its own difference (0 when not unanimous); the trees of one prompt (`split_roots`) are resampled
    together, since they share the prompt's difficulty.

    Args:
        prompts: the trees; rows: `allocations` of each tree, None for a tree that is not unanimous.
        samples: bootstrap resamples (e.g. 2000); seed: their generator's seed.
    """
    tasks = sorted({str(p["task"]) for p in prompts})
    index = {t: i for i, t in enumerate(tasks)}
    cluster = np.array([index[str(p["task"])] for p in prompts])
    trees = np.bincount(cluster, minlength=len(tasks)).astype(float)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(tasks), size=(samples, len(tasks)))
    counts = np.stack([np.bincount(d, minlength=len(tasks)) for d in draws]).astype(float)  # (samples, tasks)
    out = {}
    for n in NAMES[1:]:
        diff = np.array([0.0 if r is None else r[n] - r["random"] for r in rows])
        per_task = np.bincount(cluster, weights=diff, minlength=len(tasks))
        boot = (counts @ per_task) / (counts @ trees)
        out[n] = [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))]
    return out


def report(prompts: list[dict[str, Any]], continuations: int, bootstrap: int = 0) -> dict[str, Any]:
    """Flip rates by depth and P(mixed) of the unanimous trees under each allocation (see the module doc);
    with ``bootstrap`` > 0 also `headroom_interval` over that many resamples of the prompts."""
    all_rows = [
        allocations(p["anchors"], continuations * len(p["roots"])) if unanimous(p) else None for p in prompts
    ]
    agree = [p for p, r in zip(prompts, all_rows, strict=True) if r is not None]
    rows = [r for r in all_rows if r is not None]
    mixed = {n: float(np.mean([r[n] for r in rows])) if rows else float("nan") for n in NAMES}
    share = len(agree) / max(len(prompts), 1)
    extra = (
        {"headroom_interval": headroom_interval(prompts, all_rows, bootstrap)}
        if bootstrap and prompts
        else {}
    )
    return {
        **extra,
        "prompts": len(prompts),
        "flip_rates_by_depth": depth_table(prompts),
        "flip_rates_by_depth_unanimous": depth_table(agree),
        "unanimous_share": share,
        "unanimous_all_failed": sum(1 for p in agree if p["roots"][0] < 0.5),
        "p_mixed_unanimous": mixed,
        "headroom": {n: share * (mixed[n] - mixed["random"]) for n in NAMES if n != "random"},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", help="warm-started policy folder (a run's sft/policy); needed unless --load")
    ap.add_argument("--preset", default="multistep")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--roots", type=int, default=8, help="root rollouts per prompt (M)")
    ap.add_argument("--replays", type=int, default=4, help="replays from every anchor (K, >= 2)")
    ap.add_argument("--continuations", type=int, default=2, help="N: a tree's local budget is N * M replays")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        help="config override of the preset (section.key=value, repeatable): a candidate task's settings",
    )
    ap.add_argument(
        "--max-chars",
        type=int,
        default=1024,
        help="serialization budget of the saved predictor texts (the convex predictors' max_chars)",
    )
    ap.add_argument("--out", type=Path, help="write the per-anchor outcomes and the summary here (JSON)")
    ap.add_argument(
        "--load", type=Path, help="summarise outcomes written earlier by --out instead of sampling"
    )
    ap.add_argument(
        "--bootstrap",
        type=int,
        default=2000,
        help="resamples of the prompts for the headroom's 95%% interval (0: none)",
    )
    ap.add_argument(
        "--split-roots",
        type=int,
        metavar="M",
        help="summarise as trees of M roots: each prompt's roots split in order into groups of M (`split_roots`)",
    )
    args = ap.parse_args()
    if not args.load and not args.policy:
        ap.error("--policy PATH is needed to sample (or --load FILE to summarise earlier outcomes)")
    if args.replays < 2:
        ap.error("--replays must be at least 2 (the split-half allocations choose on half and score on half)")
    if args.split_roots is not None and args.split_roots < 1:
        ap.error(f"--split-roots must be at least 1, got {args.split_roots}")
    if args.bootstrap < 0:
        ap.error(f"--bootstrap must be 0 (no interval) or more resamples, got {args.bootstrap}")
    if args.load and not args.load.is_file():
        ap.error(f"--load {args.load}: no such file")
    t0 = time.perf_counter()
    if args.load:  # a file kept in results/ is gzipped
        raw = gzip.decompress(args.load.read_bytes()) if args.load.suffix == ".gz" else args.load.read_bytes()
        prompts = json.loads(raw)["prompts_data"]
    else:
        prompts = collect(args)
    seconds = time.perf_counter() - t0
    record = {"args": {k: str(v) for k, v in vars(args).items()}, "seconds": seconds, "prompts_data": prompts}
    if args.out:  # the outcomes first: they took minutes to sample
        args.out.write_text(json.dumps(record))
    try:
        trees = split_roots(prompts, args.split_roots) if args.split_roots is not None else prompts
    except ValueError as exc:
        ap.error(str(exc))
    # replays per anchor as sampled (a loaded file's own K, not the --replays default)
    k = min((len(a["replays"]) for p in prompts for a in p["anchors"]), default=args.replays)
    summary = report(trees, args.continuations, args.bootstrap)
    roots = len(trees[0]["roots"]) if trees else 0
    print(f"{summary['prompts']} trees x {roots} roots, {k} replays per anchor ({seconds:.0f} s)")
    print("depth  replays  replay flip  fresh flip  | unanimous trees: replays  replay flip")
    agree = summary["flip_rates_by_depth_unanimous"]
    for d, row in summary["flip_rates_by_depth"].items():
        u = agree.get(d, {"replays": 0, "replay": float("nan")})
        print(
            f"{d:5d}  {row['replays']:7d}  {row['replay']:11.3f}  {row['fresh']:10.3f}  |"
            f"{u['replays']:25d}  {u['replay']:11.3f}"
        )
    m = summary["p_mixed_unanimous"]
    print(
        f"unanimous trees: {summary['unanimous_share']:.3f} of trees ({summary['unanimous_all_failed']} all "
        f"failed); P(mixed) after N*M = {args.continuations * roots} replays: "
        + ", ".join(f"{n} {m[n]:.3f}" for n in NAMES)
    )
    band = summary.get("headroom_interval", {})
    print(
        "effective-ratio headroom over random branching: "
        + ", ".join(
            f"{n} {v:+.3f}" + (f" [{band[n][0]:+.3f}, {band[n][1]:+.3f}]" if n in band else "")
            for n, v in summary["headroom"].items()
        )
    )
    if args.out:
        args.out.write_text(json.dumps({**summary, **record}))


if __name__ == "__main__":
    main()
