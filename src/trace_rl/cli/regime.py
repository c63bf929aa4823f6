"""`trace-rl regime`: which regime a task is in, from the warm start's RL-pool probe, before paying for a comparison.

    trace-rl regime runs/demo/sft/policy [--predictor ngram+minilm] [--group-size 4] [--folds 4] [--json]

Reads ``probe_outcomes.json`` (P prompts x n samples, written by every warm start) and prints the success rate,
the unanimous share of groups of 2, 4, 8 and the run's group size (`trace_rl.metrics.regime.unanimous_share`), the
predictor's out-of-fold prompt-level Spearman against the probe's success rates (each fold scored by a predictor
trained on the other folds' outcomes, as the run's predictor is warm-started on them), the concentration
`trace_adaptive` would fit to those out-of-fold estimates (`fit_concentration`), and a one-line verdict
(`regime_verdict`). docs/training.md, "Which regime is my task in?".
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from trace_rl.cli.common import UsageError

MAX_FOLDS = 20
"""Most folds of the out-of-fold ranking (each fold trains a fresh predictor)."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "regime",
        help="which regime a task is in (unanimous groups, predictor ranking), from a warm start's probe",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument(
        "probe", help="a warm-started policy folder (holding probe_outcomes.json) or the file itself"
    )
    p.add_argument("--predictor", default="ngram+minilm", help="predictor name (default: %(default)s)")
    p.add_argument("--group-size", type=int, default=4, help="the run's group size n (default: %(default)s)")
    p.add_argument(
        "--folds", type=int, default=4, help="folds of the out-of-fold ranking (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    p.set_defaults(func=run)


def _load(path: Path) -> tuple[list[str], list[list[float]]]:
    file = path / "probe_outcomes.json" if path.is_dir() else path
    if not file.exists():
        raise UsageError(
            f"no probe outcomes at {file}: give a warm-started policy folder or its probe_outcomes.json"
        )
    try:
        data = json.loads(file.read_text())
        prompts = [str(p) for p in data["prompts"]]
        rewards = [[float(x) for x in r] for r in data["rewards"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{file} is not a probe_outcomes.json (prompts, rewards): {exc}") from None
    if len(prompts) != len(rewards) or len(prompts) < 4:
        raise UsageError(f"{file}: needs at least 4 prompts with one reward list each")
    for i, r in enumerate(rewards):
        if not r or not all(math.isfinite(x) for x in r):
            raise UsageError(f"{file}: prompt {i} has no rewards or a reward that is not a finite number")
    return prompts, rewards


def out_of_fold(
    prompts: list[str], rewards: list[list[float]], name: str, folds: int, seed: int
) -> np.ndarray:
    """Each prompt's estimate from a fresh predictor trained on the other folds' (prompt, success rate) pairs."""
    from trace_rl.predictor import build_predictor, serialize_anchor

    rng = np.random.default_rng(seed)
    fold = rng.permutation(len(prompts)) % folds
    target = np.asarray([np.mean(r) for r in rewards], dtype=np.float64)
    est = np.zeros(len(prompts), dtype=np.float64)
    texts: list[str] = []
    for f in range(folds):
        predictor = build_predictor(name, seed=seed)
        if not texts:  # every fold's predictor has the same serialization budget
            limit = predictor.max_chars
            texts = [serialize_anchor(p, [], max_chars=limit) for p in prompts]
        train = np.flatnonzero(fold != f)
        test = np.flatnonzero(fold == f)
        predictor.update(
            [texts[i] for i in train], target[train].tolist(), [float(len(rewards[i])) for i in train]
        )
        est[test] = np.asarray(predictor.predict([texts[i] for i in test]), dtype=np.float64)
    return est


def run(args: argparse.Namespace) -> int:
    from trace_rl.allocation.adaptive import fit_calibration
    from trace_rl.metrics.regime import regime_verdict, unanimous_share
    from trace_rl.predictor.metrics import spearman

    if args.group_size < 2 or args.folds < 2:
        raise UsageError("--group-size and --folds must be at least 2")
    prompts, rewards = _load(Path(args.probe))
    most = max(len(r) for r in rewards)
    if args.group_size > most:
        raise UsageError(
            f"--group-size {args.group_size} is larger than the probe's {most} samples per prompt: the unanimous "
            "share of such groups cannot be estimated from it"
        )
    if args.folds > min(len(prompts), MAX_FOLDS):
        raise UsageError(
            f"--folds must be at most {min(len(prompts), MAX_FOLDS)} (prompts in the probe, and {MAX_FOLDS})"
        )
    sizes = sorted({2, 4, 8, args.group_size})
    shares = {g: unanimous_share(rewards, g) for g in sizes}
    est = out_of_fold(prompts, rewards, args.predictor, args.folds, args.seed)
    rates = np.asarray([np.mean(r) for r in rewards], dtype=np.float64)
    rho = spearman(est, rates)
    wins = [int(np.sum(np.asarray(r) >= 0.5)) for r in rewards]
    cal = fit_calibration(np.clip(est, 1e-6, 1 - 1e-6), wins, [len(r) for r in rewards])
    verdict = regime_verdict(shares[args.group_size], rho if math.isfinite(rho) else 0.0)
    out = {
        "prompts": len(prompts),
        "samples_per_prompt": float(np.mean([len(r) for r in rewards])),
        "success_rate": float(np.mean([x >= 0.5 for r in rewards for x in r])),
        "unanimous_share": {str(g): s for g, s in shares.items()},
        "predictor": args.predictor,
        "predictor_spearman_out_of_fold": rho,
        "calibration": {"alpha": cal.alpha, "beta": cal.beta, "kappa": cal.kappa},
        "verdict": verdict,
    }
    if args.json:
        print(json.dumps(out))
        return 0
    print(
        f"probe: {out['prompts']} prompts x {out['samples_per_prompt']:.0f} samples, success {out['success_rate']:.3f}"
    )
    print("unanimous share of groups: " + ", ".join(f"g={g} {s:.3f}" for g, s in shares.items()))
    print(
        f"predictor {args.predictor}: out-of-fold Spearman {rho:.3f}; trace_adaptive's calibration of it: "
        f"slope beta {cal.beta:g} (0: ranks nothing), intercept {cal.alpha:g}, concentration kappa {cal.kappa:g}"
    )
    print(f"verdict (group size {args.group_size}): {verdict}")
    return 0
