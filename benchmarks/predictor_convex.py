"""Refit time of the convex predictor's head on a store shaped like a 30-step demo run.

Each simulated step adds 8 prompt texts (8 trials each) and 64 one-trial prefix texts (prompt + a tool-call turn)
to the store, then refits. Compared in the same run on the same store: `fit_binomial_logistic` (one row per text,
warm-started; what `ConvexSuccessPredictor` uses) against scikit-learn's `LogisticRegression` on rows duplicated
into successes and failures (same objective and optimum). Prints the median and max seconds per refit.

    python benchmarks/predictor_convex.py [--steps 30]
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np
from scipy import sparse
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from trace_rl.predictor import build_predictor, serialize_anchor
from trace_rl.predictor.convex import fit_binomial_logistic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    pred = build_predictor("ngram")
    ours, ref = [], []
    model = None
    for _ in range(args.steps):
        texts, succ, trials = [], [], []
        for _ in range(8):
            nums = [str(rng.integers(1, 100)) for _ in range(rng.integers(2, 6))]
            prompt = (
                "Calculate " + " + ".join(nums) + ".\n\nSolve the problem. Put only the answer in <answer>."
            )
            p = float(rng.uniform())
            texts.append(serialize_anchor(prompt, []))
            succ.append(float(rng.binomial(8, p)))
            trials.append(8.0)
            for _ in range(8):
                turn = SimpleNamespace(
                    text=f'<tool_call>{{"code": "print({rng.integers(999)})"}}</tool_call>',
                    observation=str(rng.integers(10**6)),
                )
                texts.append(serialize_anchor(prompt, [turn]))
                succ.append(float(rng.uniform() < p))
                trials.append(1.0)
        t0 = time.perf_counter()
        pred.update(texts, np.asarray(succ) / np.asarray(trials), trials)
        ours.append(time.perf_counter() - t0)
        x = pred._stored_features()
        counts = np.asarray(list(pred._store.values()))
        s, n = counts[:, 0], counts[:, 1]
        t0 = time.perf_counter()
        with threadpool_limits(1):
            model = model or LogisticRegression(C=pred.config.c, max_iter=200, warm_start=True)
            model.fit(
                sparse.vstack([x, x], format="csr"),
                np.r_[np.ones(len(s)), np.zeros(len(s))],
                sample_weight=np.r_[s, n - s],
            )
        ref.append(time.perf_counter() - t0)
    print(f"store: {pred.num_texts} texts after {args.steps} steps")
    print(
        f"update() incl. features, fit_binomial_logistic: median {np.median(ours):.3f} s, max {max(ours):.3f} s"
    )
    print(
        f"sklearn LogisticRegression, duplicated rows:     median {np.median(ref):.3f} s, max {max(ref):.3f} s"
    )
    _ = fit_binomial_logistic  # the fit under test (called inside update)


if __name__ == "__main__":
    main()
