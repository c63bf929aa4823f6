"""`trace_adaptive` against uniform allocation (GRPO) and TRACE on the known-truth lab, in runs of several steps
(`trace_rl.lab.adaptive.run_adaptive_lab`: its state carries what earlier steps measured).

    python benchmarks/lab_adaptive.py [--seeds 5] [--steps 20] [--shape 64x2] [--coverage 0.5]

Prints one row per (predictor, metric): each arm's mean over seeds, and trace_adaptive minus the better of grpo
and trace, paired over seeds with its 95% interval; then one JSON line with every number.
"""

from __future__ import annotations

import argparse
import json

from trace_rl.allocation.adaptive import COVERAGE
from trace_rl.lab.adaptive import ADAPTIVE_ARMS, METRICS, run_adaptive_lab


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--shape", default="64x2")
    p.add_argument("--predictors", default="oracle,noisy:8,noisy:2,noisy:0")
    p.add_argument("--coverage", type=float, default=COVERAGE, help="the stateful arms' coverage floor")
    args = p.parse_args()
    preds = tuple(x for x in args.predictors.split(",") if x)
    res = run_adaptive_lab(
        predictors=preds, shape=args.shape, seeds=args.seeds, steps=args.steps, coverage=args.coverage
    )
    out: dict[str, object] = {
        "shape": args.shape,
        "seeds": args.seeds,
        "steps": args.steps,
        "coverage": args.coverage,
        "rows": [],
    }
    rows: list[dict[str, object]] = []
    for pred in preds:
        for metric in METRICS:
            means = {a: float(res.values[pred, a, metric].mean()) for a in ADAPTIVE_ARMS}
            best = max(("grpo", "trace"), key=lambda a: means[a])
            diff = res.difference(pred, "trace_adaptive", best, metric)
            rows.append(
                {
                    "predictor": pred,
                    "metric": metric,
                    **means,
                    "vs": best,
                    "diff": diff.mean,
                    "low": diff.low,
                    "high": diff.high,
                }
            )
            print(
                f"{pred:8s} {metric:16s} "
                + " ".join(f"{a}={means[a]:.3f}" for a in ADAPTIVE_ARMS)
                + f"  trace_adaptive - {best}: {diff.mean:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}]"
            )
    out["rows"] = rows
    print(json.dumps(out))


if __name__ == "__main__":
    main()
