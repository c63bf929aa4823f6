"""The kb_hops oracle (issue 59 item 2): every save point's true continuation success, by Monte Carlo, and what TRACE's
prefix stage could gain with it.

From a policy snapshot (a run's ``sft/policy`` or a checkpoint's ``policy`` folder), for P prompts of the ``kb_hops``
preset (the RL pool, or ``--split held_out``) it runs M root rollouts each, then K replays from *every* anchor (turn
prefix) of every root rollout, with the trainer's own engine, environment and episode loop
(`trace_rl.rollout.scheduler.run_plan`). The environment is deterministic, so the K replays of an anchor are K
independent draws of its continuation's outcome under the policy: the anchor's true success s_j is estimated by their
mean, with standard error sqrt(s_j (1 - s_j) / K) (at most 0.5 / sqrt(K); ``mc_se_*`` in the output).

From these it computes, per tree (one prompt's M roots) and a prefix budget of B = N * M replays:

- the true repeat probability q_j = r_j s_j + (1 - r_j)(1 - s_j) (r_j: the reward of the rollout the anchor lies on),
  i.e. one minus the anchor's flip rate;
- TRACE's prefix objective sum_j flip_probability(q_j, k_j) = sum_j 1 - q_j^k_j (the expected number of anchors whose
  replays hold at least one flip; paper, prefix expansion) of three allocations k:
  ``oracle``: `allocate_prefixes` on the true q (the ceiling of TRACE's objective); ``trace``: TRACE's own replay
  allocator (`trace_rl.train.prefixes.replay_allocator` with the preset's predictor, warm-started from the snapshot's
  probe as the trainer does, on the roots-only tree: exactly the k a training step would draw); ``random``: TreePO's
  `random_prefixes` (each replay's anchor uniform), in exact expectation over its draws.
- The predictor's V_j against the estimated s_j: Spearman rank correlation and calibration (mean V, mean s, mean
  squared error) by anchor depth.
- For the root rollouts: pass@1 by question depth and where failed rollouts first left the gold path (the env's
  ``hops_right``: hop h = 1..d a wrong or miscopied lookup, d + 1 the answer turn).

Estimation (the same device as `benchmarks/prefix_ceiling.py`): q_j^k is estimated without bias from an anchor's F
flips in n replays by C(n - F, k) / C(n, k) (k <= n). The K replays are split in halves: the oracle chooses its
allocation on the first half's q and every allocation is scored on the second half, so the oracle's choice never sees
the replays that score it (``oracle_objective``; a ceiling that noise can only lower). ``oracle_objective_insample``
chooses and scores on all K (noise can only raise it): the true-q ceiling lies between the two up to sampling error,
and both converge to it as K grows. Needs K / 2 >= B.

    python benchmarks/kb_oracle.py --policy runs/kb_hops/sft/policy [--split pool|held_out] [--prompts 32]
        [--roots 4 --mc 16 --continuations 1 --seed 0 --threads 1] [--set key=value ...] [--out outcomes.json]

Prints a few readable lines, then one JSON line last: ``oracle_objective``, ``oracle_objective_insample``,
``trace_objective``, ``random_objective`` (means over trees, with ``*_se``), paired differences with their standard
errors, ``predictor_spearman_by_depth``, ``predictor_calibration_by_depth``, ``true_success_by_depth``,
``mc_se_mean``/``mc_se_max``, ``root_success_by_question_depth``, ``first_wrong_hop_by_question_depth``,
``overshoot_share_of_failures_by_question_depth`` (failed roots that called the tool again after the last gold hop)
(null where undefined: a Spearman of a constant or of fewer than 3 anchors).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from math import comb
from pathlib import Path
from typing import Any

import numpy as np


def mc_success(rewards: Sequence[float]) -> tuple[float, float]:
    """Monte Carlo estimate of a save point's success probability from its K replay rewards (binary: success is
    reward >= 0.5): (mean, standard error sqrt(mean (1 - mean) / K)).

    Raises:
        ValueError: no rewards.
    """
    r = np.asarray(rewards, dtype=np.float64) >= 0.5
    if r.size == 0:
        raise ValueError("a Monte Carlo estimate needs at least one replay")
    s = float(r.mean())
    return s, float(np.sqrt(s * (1.0 - s) / r.size))


def unbiased_power(flipped: int, trials: int, k: int) -> float:
    """Unbiased estimate of q^k from ``flipped`` flips in ``trials`` replays (q = 1 - flip rate): C(n - F, k) / C(n, k),
    the chance that k replays drawn without replacement all repeat the rollout's outcome.

    Raises:
        ValueError: k > trials (no unbiased estimate), or negative or inconsistent counts.
    """
    if k < 0 or flipped < 0 or flipped > trials:
        raise ValueError(f"need 0 <= flipped <= trials and k >= 0, got {flipped}, {trials}, {k}")
    if k > trials:
        raise ValueError(f"cannot estimate q^{k} without bias from {trials} replays")
    return comb(trials - flipped, k) / comb(trials, k)


def flip_objective(flipped: np.ndarray, trials: np.ndarray, k: np.ndarray) -> float:
    """Unbiased estimate of TRACE's prefix objective sum_j 1 - q_j^k_j (`trace_rl.allocation.flip_probability`) of the
    allocation k (J,), from each anchor's ``flipped`` of ``trials`` replays (J,) (`unbiased_power`)."""
    return float(
        sum(1.0 - unbiased_power(int(f), int(n), int(x)) for f, n, x in zip(flipped, trials, k, strict=True))
    )


def random_objective(flipped: np.ndarray, trials: np.ndarray, budget: int) -> float:
    """The expectation of `flip_objective` over TreePO's draws (`trace_rl.allocation.random_prefixes` with unit costs:
    k ~ Multinomial(budget, uniform over the J anchors), so each k_j ~ Binomial(budget, 1/J)), computed exactly.

    Raises:
        ValueError: budget > min(trials) (a draw could put more replays on an anchor than it has measured).
    """
    j = len(flipped)
    if j == 0 or budget <= 0:
        return 0.0
    if budget > int(np.min(trials)):
        raise ValueError(f"budget {budget} exceeds the {int(np.min(trials))} replays measured on some anchor")
    p = 1.0 / j
    law = [comb(budget, x) * p**x * (1 - p) ** (budget - x) for x in range(budget + 1)]
    return float(
        sum(
            1.0 - sum(w * unbiased_power(int(f), int(n), x) for x, w in enumerate(law))
            for f, n in zip(flipped, trials, strict=True)
        )
    )


def flips(rewards: Sequence[float], reward: float) -> int:
    """How many replay rewards differ from the rollout's own reward (by more than 1e-6)."""
    return sum(abs(x - reward) > 1e-6 for x in rewards)


def tree_objectives(anchors: Sequence[dict[str, Any]], budget: int) -> dict[str, float]:
    """The prefix objective of one tree's anchors under the oracle, TRACE and random allocations (module doc).

    Each anchor holds ``reward`` (its rollout's), ``replays`` (K >= 2 Monte Carlo replay rewards) and ``trace_k``
    (TRACE's allocation). The oracle chooses with `allocate_prefixes` on the first half's q and is scored with the
    others on the second half; ``oracle_insample`` chooses and scores on all K.

    Raises:
        ValueError: fewer than 2 replays on an anchor, or K / 2 < budget.
    """
    from trace_rl.allocation import allocate_prefixes

    if not anchors:
        return dict.fromkeys(("oracle", "oracle_insample", "trace", "random"), 0.0)
    reps = [a["replays"] for a in anchors]
    half = min(len(r) for r in reps) // 2
    if half < max(budget, 1):
        raise ValueError(
            f"{2 * half} replays per anchor cannot score a budget of {budget}: need at least {2 * budget}"
        )
    rew = [float(a["reward"]) for a in anchors]
    f_a = np.array([flips(r[:half], w) for r, w in zip(reps, rew, strict=True)])
    f_b = np.array([flips(r[half:], w) for r, w in zip(reps, rew, strict=True)])
    n_b = np.array([len(r) - half for r in reps])
    f_all = np.array([flips(r, w) for r, w in zip(reps, rew, strict=True)])
    n_all = np.array([len(r) for r in reps])
    k_oracle = allocate_prefixes(1.0 - f_a / half, budget)
    k_insample = allocate_prefixes(1.0 - f_all / n_all, budget)
    k_trace = np.array([int(a["trace_k"]) for a in anchors])
    return {
        "oracle": flip_objective(f_b, n_b, k_oracle),
        "oracle_insample": flip_objective(f_all, n_all, k_insample),
        "trace": flip_objective(f_b, n_b, k_trace),
        "random": random_objective(f_b, n_b, budget),
    }


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties); NaN with fewer than 3 points or a constant side."""
    from scipy.stats import spearmanr

    if len(x) < 3 or np.ptp(np.asarray(x, float)) == 0 or np.ptp(np.asarray(y, float)) == 0:
        return float("nan")
    return float(spearmanr(x, y).statistic)


def _mean_se(values: Sequence[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")


def summarize(prompts: Sequence[dict[str, Any]], budget: int) -> dict[str, Any]:
    """The oracle's report (module doc) from per-prompt records: ``roots`` (root rewards), ``question_depth``,
    ``first_wrong_hop`` and ``overshoot`` (per failed root, `overshot`), and ``anchors`` each with ``depth``, ``reward``, ``replays``, ``value`` (the
    predictor's V) and ``trace_k``."""
    rows = [tree_objectives(p["anchors"], budget) for p in prompts]
    out: dict[str, Any] = {"trees": len(prompts), "budget_per_tree": budget}
    for name in ("oracle", "oracle_insample", "trace", "random"):
        key = "oracle_objective_insample" if name == "oracle_insample" else f"{name}_objective"
        out[key], out[f"{key}_se"] = _mean_se([r[name] for r in rows])
    for a, b in (("oracle", "trace"), ("trace", "random"), ("oracle", "random")):
        out[f"{a}_minus_{b}"], out[f"{a}_minus_{b}_se"] = _mean_se([r[a] - r[b] for r in rows])
    anchors = [a for p in prompts for a in p["anchors"]]
    by_depth: dict[int, list[dict[str, Any]]] = {}
    for a in anchors:
        by_depth.setdefault(int(a["depth"]), []).append(a)
    spear, calib, truth = {}, {}, {}
    ses = []
    for d in sorted(by_depth):
        s = [mc_success(a["replays"])[0] for a in by_depth[d]]
        v = [float(a["value"]) for a in by_depth[d]]
        spear[str(d)] = spearman(v, s)
        calib[str(d)] = {
            "anchors": len(s),
            "mean_value": float(np.mean(v)),
            "mean_success": float(np.mean(s)),
            "mse": float(np.mean((np.asarray(v) - np.asarray(s)) ** 2)),
        }
        truth[str(d)] = {
            "anchors": len(s),
            "mean": float(np.mean(s)),
            "undecided_share": float(np.mean([0 < x < 1 for x in s])),
        }
    ses = [mc_success(a["replays"])[1] for a in anchors]
    root_by_q: dict[int, list[float]] = {}
    wrong_hop: dict[int, dict[int, int]] = {}
    over: dict[int, list[bool]] = {}
    for p in prompts:
        d = int(p["question_depth"])
        root_by_q.setdefault(d, []).extend(float(r >= 0.5) for r in p["roots"])
        for h in p["first_wrong_hop"]:
            wrong_hop.setdefault(d, {}).setdefault(int(h), 0)
            wrong_hop[d][int(h)] += 1
        over.setdefault(d, []).extend(p.get("overshoot", []))
    out.update(
        anchors=len(anchors),
        replays_per_anchor=min((len(a["replays"]) for a in anchors), default=0),
        mc_se_mean=float(np.mean(ses)) if ses else float("nan"),
        mc_se_max=float(np.max(ses)) if ses else float("nan"),
        predictor_spearman_by_depth=spear,
        predictor_spearman_all=spearman(
            [float(a["value"]) for a in anchors], [mc_success(a["replays"])[0] for a in anchors]
        ),
        predictor_calibration_by_depth=calib,
        true_success_by_depth=truth,
        root_success_by_question_depth={str(d): float(np.mean(v)) for d, v in sorted(root_by_q.items())},
        roots_by_question_depth={str(d): len(v) for d, v in sorted(root_by_q.items())},
        first_wrong_hop_by_question_depth={
            str(d): {str(h): n for h, n in sorted(c.items())} for d, c in sorted(wrong_hop.items())
        },
        overshoot_share_of_failures_by_question_depth={
            str(d): float(np.mean(v)) for d, v in sorted(over.items()) if v
        },
    )
    return out


def overshot(turns: Sequence[Any], depth: int) -> bool:
    """Whether an episode called a tool after its lookups had followed all ``depth`` gold hops (the env's
    ``hops_right`` reached ``depth``): it went past the answer instead of giving it."""
    for i, t in enumerate(turns):
        if _as_int(t.info.get("hops_right"), 0) >= depth:
            return any(u.info.get("role") == "tool" for u in turns[i + 1 :])
    return False


def generated_tokens(turns: Sequence[Any]) -> int:
    """Model-sampled tokens of an episode's turns (the 1s of their loss masks; template and observation tokens
    excluded)."""
    return int(sum(int(np.asarray(t.loss_mask).sum()) for t in turns))


def _as_int(value: object, default: int) -> int:
    """``value`` as an int when it is a number, else ``default`` (a field an env did not set)."""
    return int(value) if isinstance(value, (int, float)) else default


async def sample(
    pool: Sequence[Any],
    backend: Any,
    env_factory: Any,
    codec: Any,
    sampling: Any,
    allocator: Any,
    *,
    roots: int,
    mc: int,
    budget: int,
    max_turns: int,
    max_concurrency: int = 64,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Root rollouts and ``mc`` replays from every anchor of every prompt of ``pool``, plus the allocation TRACE's
    ``allocator`` (a `trace_rl.rollout.expansion.ReplayAllocator`) makes of ``budget`` replays on the roots-only tree;
    one record per prompt in the shape `summarize` reads.

    Raises:
        ValueError: roots < 1 or mc < 2.
    """
    from trace_rl.rollout.expansion import PrefixChoice
    from trace_rl.rollout.scheduler import run_plan
    from trace_rl.types import RootPlan

    if roots < 1 or mc < 2:
        raise ValueError(f"need roots >= 1 and mc >= 2, got {roots}, {mc}")
    traced: dict[str, PrefixChoice] = {}

    async def every_anchor(task: Any, tree: Any, anchors: Any, points: Any, _budget: int) -> np.ndarray:
        choice = (
            await allocator(task, tree, anchors, points, budget)
            if anchors
            else PrefixChoice(np.zeros(0, np.int64))
        )
        traced[task.id] = (
            choice if isinstance(choice, PrefixChoice) else PrefixChoice(np.asarray(choice, np.int64))
        )
        return np.full(len(anchors), mc, np.int64)

    plan = RootPlan(
        rollouts=np.full(len(pool), roots, np.int64),
        replay_budget=np.full(len(pool), 1e9),
        method="kb-oracle",
    )
    results = await run_plan(
        plan,
        pool,
        backend,
        env_factory,
        codec,
        sampling,
        every_anchor,
        max_turns=max_turns,
        max_concurrency=max_concurrency,
        seed=seed,
        anchorless_fresh=False,  # replays only: the huge budget must not buy fresh rollouts
    )
    prompts = []
    for r in results:
        outcome: dict[int, list[float]] = {}
        spent: dict[int, list[int]] = {}
        prefill: dict[int, int] = {}
        for node, ep in r.replays:
            outcome.setdefault(int(node), []).append(float(ep.reward))
            spent.setdefault(int(node), []).append(generated_tokens(ep.turns))
            prefill[int(node)] = len(ep.prompt_ids)
        choice = traced.get(r.task.id, PrefixChoice(np.zeros(0, np.int64)))
        values = choice.values if choice.values is not None else np.full(len(r.anchors), np.nan)
        leaf_of = r.tree.chain_leaf()
        roots_of = {
            int(p[-1]): i for i, p in enumerate(q for q in r.tree.paths() if not r.tree.is_replay[int(q[-1])])
        }
        anchors = []
        for j, a in enumerate(r.anchors):
            turn = r.tree.turns[a.node]
            info = turn.info if turn is not None else {}
            anchors.append(
                {
                    "node": int(a.node),
                    "depth": int(a.depth),
                    "reward": float(r.tree.reward[int(leaf_of[a.node])]),
                    "replays": outcome.get(int(a.node), []),
                    "value": float(values[j]),
                    "trace_k": int(choice.k[j]),
                    "hops_right": _as_int(info.get("hops_right"), -1),
                    "rollout": roots_of.get(int(leaf_of[a.node]), -1),
                    "replay_tokens": spent.get(int(a.node), []),
                    "prefix_tokens": prefill.get(int(a.node), 0),
                }
            )
        depth = _as_int(r.task.metadata.get("depth"), 0)
        failed = [e for e in r.roots if e.reward < 0.5 and e.turns]
        wrong = [_as_int(e.turns[-1].info.get("hops_right"), 0) + 1 for e in failed]
        overshoot = [overshot(e.turns, depth) for e in failed]
        prompts.append(
            {
                "task": r.task.id,
                "question_depth": depth,
                "roots": [float(e.reward) for e in r.roots],
                "root_tokens": [generated_tokens(e.turns) for e in r.roots],
                "root_turns": [len(e.turns) for e in r.roots],
                "prompt_tokens": len(r.roots[0].prompt_ids) if r.roots else 0,
                "first_wrong_hop": wrong,
                "overshoot": overshoot,
                "anchors": anchors,
            }
        )
    return prompts


def collect(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Set up the trainer's parts from the preset and the snapshot, and `sample` the chosen prompts."""
    from trace_rl.allocation import get_method
    from trace_rl.train.config import load_config
    from trace_rl.train.prefixes import replay_allocator
    from trace_rl.train.run import Trainer

    overrides = [
        f"policy.name={args.policy}",
        "policy.sft_steps=0",
        "policy.sft_compile=false",  # the snapshot is trained: no warm start to compile
        f"eval_every={1 if args.split == 'held_out' else 0}",
        f"threads={args.threads}",
        *args.set,
    ]
    cfg = load_config(preset=args.preset, overrides=overrides)
    budget = args.continuations * args.roots
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, tmp, log=lambda s: None)
        trainer.setup()  # the trainer's engine, environment, codec, sampling, and warm predictor
        tasks = trainer.eval_tasks if args.split == "held_out" else trainer.tasks
        if args.prompts > len(tasks):
            raise ValueError(f"--prompts {args.prompts} but the {args.split} split has {len(tasks)} tasks")
        rng = np.random.default_rng(args.seed)
        pool = [tasks[int(i)] for i in rng.choice(len(tasks), args.prompts, replace=False)]
        allocator = replay_allocator(
            get_method("trace"),
            trainer.predictor,
            replay_cost=cfg.budget.replay_cost,
            rng_of=lambda task: np.random.default_rng(args.seed),
        )
        prompts = asyncio.run(
            sample(
                pool,
                trainer.engine,
                trainer.env_factory,
                trainer.codec,
                trainer.sampling,
                allocator,
                roots=args.roots,
                mc=args.mc,
                budget=budget,
                max_turns=cfg.env.max_turns,
                max_concurrency=cfg.sampling.max_concurrency,
                seed=args.seed,
            )
        )
        meta = {
            "predictor": cfg.predictor.name,
            "predictor_warm": trainer.predictor_warm_record is not None,
            "temperature": cfg.sampling.temperature,
        }
    return prompts, meta


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float (NaN: an undefined Spearman or standard error) as None, so that the
    printed line is strict JSON."""
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--policy", required=True, help="policy snapshot folder (a run's sft/policy)")
    ap.add_argument("--preset", default="kb_hops")
    ap.add_argument(
        "--split", choices=("pool", "held_out"), default="pool", help="RL-pool or held-out prompts"
    )
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--roots", type=int, default=4, help="root rollouts per prompt (M)")
    ap.add_argument("--mc", type=int, default=16, help="Monte Carlo replays from every anchor (K, >= 2 N M)")
    ap.add_argument("--continuations", type=int, default=1, help="N: a tree's prefix budget is N * M replays")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--set", action="append", default=[], help="config override of the preset (section.key=value)"
    )
    ap.add_argument("--out", type=Path, help="write the per-anchor outcomes and the summary here (JSON)")
    args = ap.parse_args()
    if args.prompts < 1 or args.roots < 1 or args.continuations < 0:
        ap.error("--prompts and --roots must be >= 1, --continuations >= 0")
    if args.mc < max(2, 2 * args.continuations * args.roots):
        ap.error(
            f"--mc must be at least 2 N M = {2 * args.continuations * args.roots} (half chooses, half scores)"
        )
    t0 = time.perf_counter()
    prompts, meta = collect(args)
    seconds = time.perf_counter() - t0
    summary = {**summarize(prompts, args.continuations * args.roots), **meta, "seconds": round(seconds, 1)}
    summary["args"] = {k: str(v) for k, v in vars(args).items()}
    if args.out:
        args.out.write_text(json.dumps(strict_json({**summary, "prompts_data": prompts})))
    print(
        f"{summary['trees']} trees x {args.roots} roots, {summary['anchors']} anchors x {args.mc} replays ({seconds:.0f} s)"
    )
    print("root pass@1 by question depth: " + json.dumps(summary["root_success_by_question_depth"]))
    print("first wrong hop of failed roots: " + json.dumps(summary["first_wrong_hop_by_question_depth"]))
    print(
        "failed roots that looked up past the last gold hop: "
        + json.dumps(summary["overshoot_share_of_failures_by_question_depth"])
    )
    print(
        "prefix objective per tree (B = {}): oracle {:.3f} (in-sample {:.3f}), trace {:.3f}, random {:.3f}".format(
            summary["budget_per_tree"],
            summary["oracle_objective"],
            summary["oracle_objective_insample"],
            summary["trace_objective"],
            summary["random_objective"],
        )
    )
    print("predictor Spearman by anchor depth: " + json.dumps(summary["predictor_spearman_by_depth"]))
    print(json.dumps(strict_json(summary), allow_nan=False))


if __name__ == "__main__":
    main()
