"""Refit time and memory of the convex predictor as a run grows (stored outcomes of up to 200 steps).

Each simulated step adds 8 prompt texts (8 trials each) and 64 one-trial prefix texts (prompt + a tool-call turn),
the shape of a demo-preset step, and calls `update()` once (what the online trainer does each RL step): the
head is refit, warm-started, on the kept outcomes. Prints the seconds
per `update()` near step 20 and near the last step (medians of the 10 steps up to each), their ratio, the rows
fitted and the process's peak RSS. `--window 0` keeps every outcome (no forgetting), for comparison.

    python benchmarks/predictor_convex.py [--steps 200] [--window 20] [--name ngram|minilm-head|ngram+minilm]
"""

from __future__ import annotations

import argparse
import resource
import time
from types import SimpleNamespace

import numpy as np

from trace_rl.predictor import build_predictor, serialize_anchor


def step_examples(rng: np.random.Generator) -> tuple[list[str], np.ndarray, np.ndarray]:
    """One demo-shaped step: 8 prompts x (1 prompt text with 8 trials + 8 one-trial prefix texts)."""
    texts, succ, trials = [], [], []
    for _ in range(8):
        nums = [str(rng.integers(1, 100)) for _ in range(rng.integers(2, 6))]
        prompt = "Calculate " + " + ".join(nums) + ".\n\nSolve the problem. Put only the answer in <answer>."
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
    return texts, np.asarray(succ), np.asarray(trials)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--window", type=int, default=20, help="history_window; 0 = keep every outcome")
    ap.add_argument(
        "--name",
        default="ngram",
        choices=["ngram", "minilm-head", "ngram+minilm"],
        help="convex predictor (the demo and multistep presets use ngram+minilm)",
    )
    args = ap.parse_args()
    if args.steps < 20:
        ap.error("--steps must be at least 20")
    rng = np.random.default_rng(0)
    pred = build_predictor(args.name, history_window=args.window or None)
    steps = [step_examples(rng) for _ in range(args.steps)]
    # the trainer embeds its training prompts once at set-up (ConvexSuccessPredictor.prepare): not timed here
    pred.prepare([t for texts, _, _ in steps for t in texts])
    seconds, cpu, rows = [], [], []
    for texts, succ, trials in steps:
        t0, c0 = time.perf_counter(), time.process_time()
        out = pred.update(texts, succ / trials, trials)
        seconds.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        rows.append(int(out["rows"]))
    at_20 = float(np.median(seconds[10:20]))
    at_end = float(np.median(seconds[-10:]))
    window = args.window or "every outcome"
    print(f"{args.name}, history_window={window}, {args.steps} steps of 72 texts")
    print(f"update() s, median of steps 11-20:  {at_20:.3f} ({rows[19]} rows)")
    print(f"update() s, median of the last 10:  {at_end:.3f} ({rows[-1]} rows), max {max(seconds):.3f}")
    print(f"ratio last / step 20: {at_end / at_20:.2f}")
    cpu_20, cpu_end = float(np.median(cpu[10:20])), float(np.median(cpu[-10:]))
    print(f"CPU s (process time), same medians: {cpu_20:.3f} -> {cpu_end:.3f}, ratio {cpu_end / cpu_20:.2f}")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
