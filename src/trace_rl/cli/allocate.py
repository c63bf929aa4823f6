"""`trace-rl allocate`: the blog's "play the allocator" (TRACE root allocation vs uniform) on the terminal.

trace-rl allocate --probs 0.99,0.9,0.5,0.5,0.15,0.02 --budget 16 [--max-rollouts K]
trace-rl allocate --probs ... --sweep 4:48 --plot allocation.png [--json]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from trace_rl.allocation import allocate_roots, mixed_probability
from trace_rl.cli.common import UsageError, parse_probs, user_input


def register(sub: Any) -> None:
    p = sub.add_parser(
        "allocate",
        help="TRACE root allocation vs uniform for a few prompts (the blog's 'play the allocator')",
        description="Allocate a root-rollout budget over prompts with predicted success probabilities.",
    )
    p.add_argument("--probs", required=True, help="comma-separated success probabilities, e.g. 0.9,0.5,0.1")
    p.add_argument("--budget", type=int, default=16, help="root rollouts to spend (default 16)")
    p.add_argument(
        "--min-rollouts", type=int, default=2, help="smallest group of an active prompt (default 2)"
    )
    p.add_argument("--max-rollouts", type=int, default=None, help="cap on rollouts per prompt")
    p.add_argument("--max-active", type=int, default=None, help="most prompts that may get rollouts")
    p.add_argument("--sweep", default=None, metavar="LO:HI", help="also solve every budget from LO to HI")
    p.add_argument(
        "--plot", default=None, metavar="FILE.png", help="with --sweep: draw the allocation vs budget"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def uniform_allocation(n: int, budget: int) -> np.ndarray:
    """Uniform sampling: the budget spread as evenly as possible over all prompts (lower indices first)."""
    m = np.full(n, budget // n, dtype=np.int64)
    m[: budget % n] += 1
    return m


def _solve(v: np.ndarray, budget: int, args: argparse.Namespace) -> np.ndarray:
    return allocate_roots(
        v,
        budget,
        min_rollouts=args.min_rollouts,
        max_rollouts=args.max_rollouts,
        max_active=args.max_active,
    )


def _parse_sweep(text: str) -> tuple[int, int]:
    try:
        lo_s, hi_s = text.split(":")
        lo, hi = int(lo_s), int(hi_s)
    except ValueError:
        raise UsageError(f"--sweep must look like LO:HI with integers, e.g. 4:48; got {text!r}") from None
    if lo < 0 or hi < lo:
        raise UsageError(f"--sweep needs 0 <= LO <= HI; got {text!r}")
    return lo, hi


def run(args: argparse.Namespace) -> int:
    v = parse_probs(args.probs)
    if args.plot and not args.sweep:
        raise UsageError("--plot needs --sweep LO:HI")
    if args.plot and not args.plot.lower().endswith(".png"):
        raise UsageError(f"--plot must name a .png file; got {args.plot!r}")
    with user_input():  # the solver refuses an infeasible budget or cap: the user's arguments
        trace = _solve(v, args.budget, args)
    uniform = uniform_allocation(v.size, args.budget)
    p_trace = mixed_probability(v, trace)
    p_uniform = mixed_probability(v, uniform)
    result: dict[str, Any] = {
        "probs": v.tolist(),
        "budget": args.budget,
        "trace": {
            "rollouts": trace.tolist(),
            "p_mixed": p_trace.tolist(),
            "expected_mixed": float(p_trace.sum()),
        },
        "uniform": {
            "rollouts": uniform.tolist(),
            "p_mixed": p_uniform.tolist(),
            "expected_mixed": float(p_uniform.sum()),
        },
    }
    sweep_rows: list[tuple[int, np.ndarray]] = []
    if args.sweep:
        lo, hi = _parse_sweep(args.sweep)
        for b in range(lo, hi + 1):
            try:
                sweep_rows.append((b, _solve(v, b, args)))
            except ValueError:
                continue  # infeasible budgets (e.g. 1) are skipped in a sweep
        result["sweep"] = [{"budget": b, "rollouts": m.tolist()} for b, m in sweep_rows]
    if args.plot:
        _plot(v, sweep_rows, args.plot)
        result["plot"] = args.plot
    if args.json:
        print(json.dumps(result))
        return 0
    _print_table(v, trace, uniform, p_trace, p_uniform, args.budget)
    if sweep_rows:
        print()
        print("budget  " + "  ".join(f"v={p:<5g}" for p in v))
        for b, m in sweep_rows:
            print(f"{b:6d}  " + "  ".join(f"{c:7d}" for c in m))
    if args.plot:
        print(f"\nplot written to {args.plot}")
    return 0


def _print_table(
    v: np.ndarray, trace: np.ndarray, uniform: np.ndarray, pt: np.ndarray, pu: np.ndarray, b: int
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Root allocation of {b} rollouts: TRACE vs uniform")
    for col in ("prompt", "v", "TRACE m", "TRACE P(mixed)", "uniform m", "uniform P(mixed)"):
        table.add_column(col, justify="right")
    for i in range(v.size):
        table.add_row(str(i), f"{v[i]:.3g}", str(trace[i]), f"{pt[i]:.3f}", str(uniform[i]), f"{pu[i]:.3f}")
    table.add_section()
    table.add_row(
        "E\\[# mixed]",
        "",
        str(int(trace.sum())),
        f"{pt.sum():.3f}",
        str(int(uniform.sum())),
        f"{pu.sum():.3f}",
    )
    Console(width=100).print(table)


def _plot(v: np.ndarray, rows: list[tuple[int, np.ndarray]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        raise UsageError("no feasible budget in the sweep range; nothing to plot")
    budgets = np.array([b for b, _ in rows])
    alloc = np.stack([m for _, m in rows])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i in range(v.size):
        ax1.plot(budgets, alloc[:, i], marker=".", label=f"prompt {i} (v={v[i]:g})")
    ax1.set_xlabel("root budget (rollouts)")
    ax1.set_ylabel("rollouts given (TRACE optimum)")
    ax1.set_title("Where the optimum puts rollouts as the budget grows")
    ax1.legend(fontsize=8)
    exp_trace = mixed_probability(v[None, :], alloc).sum(axis=1)
    exp_unif = np.array([mixed_probability(v, uniform_allocation(v.size, b)).sum() for b in budgets])
    ax2.plot(budgets, exp_trace, label="TRACE (exact)")
    ax2.plot(budgets, exp_unif, label="uniform")
    ax2.set_xlabel("root budget (rollouts)")
    ax2.set_ylabel("expected mixed groups")
    ax2.set_title("Expected number of mixed groups")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
