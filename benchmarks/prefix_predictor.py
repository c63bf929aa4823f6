"""Which success predictor ranks anchors by their flip rate? Cross-validated over prompts on prefix_ceiling anchors.

Reads the ``--out`` file of ``benchmarks/prefix_ceiling.py`` (K replays from every anchor of M root rollouts of P
prompts, with each anchor's predictor text and token context) and scores candidate predictors by group k-fold
cross-validation over PROMPTS: the anchors and the prompt-level text of one prompt are never in both the training
and the test fold (a prefix shares its prompt's text and outcomes; splitting anchors would leak them).

Per fold, a fresh predictor is built and updated once on the training prompts' outcomes, as the trainer's value
targets would give them: each prompt-level text with the mean reward of its M roots (weight M), each anchor text
with the mean reward of its K replays and of the rollout it lies on (weight K + 1; the rollout's continuation after
the anchor is one more sample from that state). On the test prompts' anchors it predicts V_j (no outcome of a
test prompt was stored, so this is the head's estimate alone) and the flip probability
``1 - q_j = r_j (1 - V_j) + (1 - r_j) V_j`` (TRACE's repeat probability q, docs/allocation.md), which is scored
against the measured flip rate (share of the K replays whose reward differs from r_j) by Spearman's rank
correlation WITHIN each anchor depth, over the out-of-fold predictions of all folds; "within depth" is the
anchor-weighted mean of the per-depth correlations (depths with fewer than 10 anchors or without spread left
out). A correlation of 1 would rank a tree's anchors as their replays did.

Reference rows (not predictors): ``depth+reward`` predicts each test anchor's flip rate by the training folds' mean
flip rate of anchors with the same depth and rollout reward (what depth and r alone give); ``split-half`` is the
Spearman between the flip rates of the first and the second half of each anchor's replays (how well K/2 measured
replays rank the other K/2: the measurement's own noise bounds any predictor's correlation with it).

Candidates: any convex predictor name (``ngram``, ``ngram+minilm``, ``state-head``, ``ngram+minilm+state``, ...);
the ``state`` ones read the policy's hidden state at each anchor's save point (``--policy``, the folder the anchors
were sampled with: `trace_rl.predictor.policy_state.PolicyStateEncoder` over ``prefix_ids``); the ``group`` ones read
each anchor's ``group`` row (the other roots of its tree, `trace_rl.predictor.consensus.sibling_consensus`, which
uses only rollouts that exist before the anchor's replays: no outcome of a test anchor's replays enters it).

    python benchmarks/prefix_predictor.py --anchors anchors.json --policy <warm_start>/sft/policy \\
        [--names ngram+minilm,state-head,ngram+minilm+state --folds 5 --seed 0 --c 30]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

MIN_ANCHORS = 10  # a depth enters the within-depth mean with at least this many anchors


def flip_rate(replays: list[float], reward: float) -> float:
    """Share of replay rewards that differ from the rollout's reward (by more than 1e-6, prefix_ceiling's rule)."""
    return float(np.mean([abs(x - reward) > 1e-6 for x in replays]))


def group_folds(n_groups: int, folds: int, seed: int) -> np.ndarray:
    """Fold id (0..folds-1) of each group: a seeded permutation dealt round-robin, so fold sizes differ by <= 1.

    Raises:
        ValueError: fewer groups than folds, or folds < 2.
    """
    if folds < 2 or n_groups < folds:
        raise ValueError(f"need 2 <= folds <= groups; got folds={folds}, groups={n_groups}")
    fold = np.empty(n_groups, np.int64)
    fold[np.random.default_rng(seed).permutation(n_groups)] = np.arange(n_groups) % folds
    return fold


def spearman_within_depth(pred: np.ndarray, target: np.ndarray, depth: np.ndarray) -> dict[str, Any]:
    """Spearman of ``pred`` against ``target`` per depth (average ranks for ties) and their anchor-weighted mean.

    Returns:
        {"by_depth": {d: (rho, n)}, "within_depth": weighted mean rho over depths with >= MIN_ANCHORS anchors and
        spread in both arrays (NaN if none)}.
    """
    from scipy.stats import spearmanr

    by_depth: dict[int, tuple[float, int]] = {}
    for d in np.unique(depth):
        m = depth == d
        ok = m.sum() >= MIN_ANCHORS and np.ptp(pred[m]) > 0 and np.ptp(target[m]) > 0
        rho = float(spearmanr(pred[m], target[m]).statistic) if ok else float("nan")
        by_depth[int(d)] = (rho, int(m.sum()))
    used = [(r, n) for r, n in by_depth.values() if np.isfinite(r)]
    mean = float(sum(r * n for r, n in used) / sum(n for _, n in used)) if used else float("nan")
    return {"by_depth": by_depth, "within_depth": mean}


def load(path: Path) -> list[dict[str, Any]]:
    """The prompts of a prefix_ceiling ``--out`` file that have anchors.

    Raises:
        ValueError: the file predates the ``text`` / ``prefix_ids`` fields (re-sample with prefix_ceiling.py).
    """
    prompts = [p for p in json.loads(path.read_text())["prompts_data"] if p["anchors"]]
    if prompts and not all("text" in p and "text" in p["anchors"][0] for p in prompts):
        raise ValueError(
            f"{path} has no predictor texts: sample it again with benchmarks/prefix_ceiling.py --out"
        )
    return prompts


def training_rows(prompts: list[dict[str, Any]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(texts, targets, weights) of the prompts' prompt-level texts and anchors (see the module doc)."""
    texts, targets, weights = [], [], []
    for p in prompts:
        texts.append(p["text"])
        targets.append(float(np.mean(p["roots"])))
        weights.append(float(len(p["roots"])))
        for a in p["anchors"]:
            outcomes = [*a["replays"], a["reward"]]
            texts.append(a["text"])
            targets.append(float(np.mean(outcomes)))
            weights.append(float(len(outcomes)))
    return texts, np.asarray(targets), np.asarray(weights)


def state_encoder(policy: str, prompts: list[dict[str, Any]], threads: int) -> Any:
    """A PolicyStateEncoder over the policy folder with every prompt and anchor context registered."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trace_rl.predictor.policy_state import PolicyStateEncoder

    if threads:
        torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(policy).eval()
    pad = AutoTokenizer.from_pretrained(policy).pad_token_id
    encoder = PolicyStateEncoder(model, pad_id=int(pad or 0))
    texts = [p["text"] for p in prompts] + [a["text"] for p in prompts for a in p["anchors"]]
    ids = [p["prompt_ids"] for p in prompts] + [a["prefix_ids"] for p in prompts for a in p["anchors"]]
    encoder.register(texts, ids)
    return encoder


def state_evidence(prompt: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(successes, trials) float64 (A,) of the root rollouts in each anchor's environment state, its own included:
    its rollout's reward (clipped to [0, 1]) and one trial, plus the anchor's ``same_state`` counts
    (`trace_rl.predictor.consensus.same_state_outcomes`), as `trace_rl.train.prefixes.anchor_evidence` with
    ``same_state=True`` gives them in training. Every count is an outcome that exists before the anchor's replays.
    """
    same = np.array([a["same_state"] for a in prompt["anchors"]], dtype=np.float64).reshape(-1, 2)
    rewards = np.clip(np.array([a["reward"] for a in prompt["anchors"]], dtype=np.float64), 0.0, 1.0)
    return rewards + same[:, 0], 1.0 + same[:, 1]


def evaluate(
    name: str,
    prompts: list[dict[str, Any]],
    fold: np.ndarray,
    c: float | None,
    state: Any,
    evidence: bool = False,
) -> np.ndarray:
    """Out-of-fold flip probability of every anchor (prompt order, anchor order) under predictor ``name``; with
    ``evidence``, V is the predictor's posterior given :func:`state_evidence` (``predictor.posterior``: one Beta
    update of its prior with its fitted prefix-level kappa) instead of its estimate alone."""
    from trace_rl.predictor import build_predictor
    from trace_rl.predictor.capabilities import as_group_aware, as_state_aware

    out: list[np.ndarray] = [np.zeros(0)] * len(prompts)
    cache: dict[str, np.ndarray] = {}
    for k in np.unique(fold):
        train = [p for p, f in zip(prompts, fold, strict=True) if f != k]
        predictor: Any = build_predictor(name, **({} if c is None else {"c": c}))
        if (stateful := as_state_aware(predictor)) is not None:
            stateful.attach_state(cached(state, cache))
        if (
            grouped := as_group_aware(predictor)
        ) is not None:  # every anchor's consensus, as prefix_ceiling saved it
            anchors = [a for p in prompts for a in p["anchors"]]
            grouped.register_group([a["text"] for a in anchors], [a["group"] for a in anchors])
        predictor.update(*training_rows(train))
        for i in np.flatnonzero(fold == k):
            anchors = prompts[i]["anchors"]
            texts = [a["text"] for a in anchors]
            v = (
                predictor.posterior(texts, *state_evidence(prompts[i]))
                if evidence
                else predictor.predict(texts)
            )
            r = np.array([a["reward"] for a in anchors])
            out[i] = r * (1.0 - v) + (1.0 - r) * v
    return np.concatenate(out)


def cached(state: Any, cache: dict[str, np.ndarray]) -> Any:
    """``state`` with its rows memoised per text (the policy is frozen here: every fold reads the same rows)."""

    def rows(texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in cache]
        if missing:
            for t, row in zip(missing, state(missing), strict=True):
                cache[t] = row
        return np.stack([cache[t] for t in texts])

    return rows


def depth_reward_baseline(prompts: list[dict[str, Any]], fold: np.ndarray) -> np.ndarray:
    """Out-of-fold flip rate predicted by the training folds' mean flip rate per (depth, reward)."""
    out: list[np.ndarray] = [np.zeros(0)] * len(prompts)
    for k in np.unique(fold):
        rates: dict[tuple[int, float], list[float]] = {}
        for p, f in zip(prompts, fold, strict=True):
            if f != k:
                for a in p["anchors"]:
                    rates.setdefault((a["depth"], a["reward"]), []).append(
                        flip_rate(a["replays"], a["reward"])
                    )
        pooled = float(np.mean([x for v in rates.values() for x in v]))
        for i in np.flatnonzero(fold == k):
            out[i] = np.array(
                [
                    float(np.mean(rates.get((a["depth"], a["reward"]), [pooled])))
                    for a in prompts[i]["anchors"]
                ]
            )
    return np.concatenate(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--anchors", type=Path, required=True, help="prefix_ceiling.py --out file")
    ap.add_argument(
        "--policy", help="the policy folder the anchors were sampled with (for the state predictors)"
    )
    ap.add_argument("--names", default="ngram+minilm,state-head,ngram+minilm+state")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--c", type=float, help="inverse L2 strength for every candidate (default: each name's own)"
    )
    ap.add_argument(
        "--threads", type=int, default=2, help="torch threads for the policy forward (0: torch's)"
    )
    ap.add_argument(
        "--evidence",
        action="store_true",
        help="also score each candidate's posterior given the roots in each anchor's environment state (not "
        "ngram+minilm+group, whose prior already holds those outcomes; ngram+minilm+group-prior is scored)",
    )
    ap.add_argument("--json", type=Path, help="also write the table here")
    args = ap.parse_args()
    from trace_rl.predictor.names import GROUP_OUTCOME_NAMES

    names = [n for n in args.names.split(",") if n]
    prompts = load(args.anchors)
    needs_state = any("state" in n for n in names)
    if needs_state and not args.policy:
        ap.error("the state predictors need --policy (the folder the anchors were sampled with)")
    if (args.evidence or any("group" in n for n in names)) and not all(
        "group" in a and "same_state" in a for p in prompts for a in p["anchors"]
    ):
        ap.error(
            f"{args.anchors} has no sibling-consensus fields ('group', 'same_state'): sample it again with "
            "prefix_ceiling.py"
        )
    fold = group_folds(len(prompts), args.folds, args.seed)
    anchors = [a for p in prompts for a in p["anchors"]]
    depth = np.array([a["depth"] for a in anchors])
    target = np.array([flip_rate(a["replays"], a["reward"]) for a in anchors])
    half = min(len(a["replays"]) for a in anchors) // 2
    rows: dict[str, dict[str, Any]] = {}
    first = np.array([flip_rate(a["replays"][:half], a["reward"]) for a in anchors])
    second = np.array([flip_rate(a["replays"][half:], a["reward"]) for a in anchors])
    rows["split-half (reference)"] = spearman_within_depth(first, second, depth)
    rows["depth+reward"] = spearman_within_depth(depth_reward_baseline(prompts, fold), target, depth)
    state = state_encoder(args.policy, prompts, args.threads) if needs_state else None
    seconds: dict[str, float] = {}
    for name in names:
        t0 = time.perf_counter()
        rows[name] = spearman_within_depth(evaluate(name, prompts, fold, args.c, state), target, depth)
        seconds[name] = time.perf_counter() - t0
        if args.evidence and name not in GROUP_OUTCOME_NAMES:  # their prior already holds these outcomes
            key = f"{name} | state evidence"
            t0 = time.perf_counter()
            flips = evaluate(name, prompts, fold, args.c, state, evidence=True)
            rows[key] = spearman_within_depth(flips, target, depth)
            seconds[key] = time.perf_counter() - t0
    depths = sorted({int(d) for d in depth})
    print(
        f"{len(prompts)} prompts, {len(anchors)} anchors, {args.folds} folds over prompts (seed {args.seed}), "
        f"flip rate of {half * 2}+ replays per anchor; Spearman within depth (out of fold)"
    )
    print(f"{'candidate':36s} " + " ".join(f"{'d=' + str(d):>7s}" for d in depths) + "  within-depth")
    print(f"{'anchors':36s} " + " ".join(f"{int((depth == d).sum()):7d}" for d in depths))
    for name, row in rows.items():
        cells = " ".join(f"{row['by_depth'][d][0]:7.3f}" for d in depths)
        print(
            f"{name:36s} {cells}  {row['within_depth']:12.3f}"
            + (f"  ({seconds[name]:.0f} s)" if name in seconds else "")
        )
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}))


if __name__ == "__main__":
    main()
