"""The paper's claims, checked on the lab at equal budget, over seeds, with 95% confidence intervals.

Every claim's rule is fixed in docs/lab.md ("How the claims are measured"); a claim that does not hold is
reported as not holding, with its numbers. `run_claims` returns `ClaimResult` records; `trace-rl lab claims`
prints them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.allocation import METHODS, BudgetShape, allocate_roots, mixed_probability
from trace_rl.lab.predictors import (
    NoisyOraclePredictor,
    OraclePredictor,
    Predictor,
    Query,
    true_probability,
)
from trace_rl.lab.simulator import (
    TaskFamily,
    remaining_turns,
    rollout_trees,
    sample_pool,
    simulate_futures,
)
from trace_rl.lab.step import method_step
from trace_rl.metrics.intervals import Interval, mean_ci

FloatArray = npt.NDArray[np.float64]

#: The paper's budget shapes (M, N) scaled down by 8, with group size n = 8 (docs/lab.md).
SHAPES: dict[str, BudgetShape] = {
    "64x2": BudgetShape(64, 2, group_size=8),
    "64x6": BudgetShape(64, 6, group_size=8),
    "128x2": BudgetShape(128, 2, group_size=8),
}
#: The candidate pool holds this many flat batches (docs/lab.md).
POOL_FACTOR = 4
#: Information (pseudo-rollouts) of the noisy oracles, from least to most noisy.
NOISE_LEVELS = (32, 8, 2, 0)
#: The noisy oracle the method comparisons are repeated with (RMSE about 0.11 at the prompt level).
REALISTIC_NOISE = 8
SIX_PROMPTS = (0.99, 0.90, 0.50, 0.50, 0.15, 0.02)


@dataclass(frozen=True)
class ClaimResult:
    """One checked claim: `measured` holds the numbers (JSON-ready), `summary` a one-line rendering."""

    id: str
    statement: str
    measured: dict[str, Any]
    expected: str
    holds: bool
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "statement": self.statement,
            "measured": self.measured,
            "expected": self.expected,
            "holds": self.holds,
        }


@dataclass
class RecordingPredictor:
    """Wraps a predictor and records its squared error against the truth, split into prompts and prefixes."""

    inner: Predictor
    prompt_sq: list[float] = field(default_factory=list)
    prefix_sq: list[float] = field(default_factory=list)

    def predict(self, queries: Sequence[Query]) -> FloatArray:
        out = np.asarray(self.inner.predict(queries), dtype=np.float64)
        truth = np.asarray([true_probability(q) for q in queries])
        sq = ((out - truth) ** 2).tolist()
        depth = [q.depth for q in queries]
        self.prompt_sq.extend(e for e, d in zip(sq, depth, strict=True) if d == 0)
        self.prefix_sq.extend(e for e, d in zip(sq, depth, strict=True) if d > 0)
        return out


@dataclass(frozen=True)
class Arm:
    """One configuration of the equal-budget comparison: a method, a shape and a predictor."""

    method: str
    shape: str
    predictor: str = "oracle"  # "oracle" or "noisy:<information>"

    @property
    def label(self) -> str:
        return f"{self.method}@{self.shape}/{self.predictor}"


def _make_predictor(spec: str, seed: int) -> Predictor:
    if spec == "oracle":
        return OraclePredictor()
    if spec.startswith("noisy:"):
        return NoisyOraclePredictor(int(spec.split(":", 1)[1]), seed=seed)
    raise ValueError(f"unknown predictor {spec!r}; use 'oracle' or 'noisy:<information>'")


@dataclass(frozen=True)
class ArmResults:
    """Per-seed effective ratios (mean over steps) of every arm, plus predictor RMSEs."""

    ratio: dict[str, FloatArray]  # label -> (seeds,)
    rmse_prompt: dict[str, float]
    rmse_prefix: dict[str, float]


def run_arms(
    arms: Sequence[Arm],
    *,
    seeds: int,
    steps: int,
    family: TaskFamily | None = None,
    base_seed: int = 0,
) -> ArmResults:
    """Run every arm on the same candidate pools (common random numbers) and return per-seed effective ratios.

    For seed s and step j, one pool per pool size is drawn from `family` with generator (base_seed, s, j, size);
    every arm whose shape needs that pool size runs `method_step` on it with the step generator
    (base_seed, s, j, size, 1), so comparisons between arms are paired.

    Raises:
        ValueError: seeds or steps < 1, an unknown method, shape or predictor.
    """
    if seeds < 1 or steps < 1:
        raise ValueError("seeds and steps must be at least 1")
    fam = family or TaskFamily()
    ratio = {a.label: np.zeros(seeds) for a in arms}
    prompt_sq: dict[str, list[float]] = {a.label: [] for a in arms}
    prefix_sq: dict[str, list[float]] = {a.label: [] for a in arms}
    for s in range(seeds):
        for j in range(steps):
            pools: dict[int, Any] = {}
            for arm in arms:
                if arm.shape not in SHAPES:
                    raise ValueError(f"unknown shape {arm.shape!r}; choose one of {', '.join(SHAPES)}")
                shape = SHAPES[arm.shape]
                size = POOL_FACTOR * shape.batch_size
                if size not in pools:
                    pools[size] = sample_pool(fam, size, np.random.default_rng((base_seed, s, j, size)))
                rec = RecordingPredictor(
                    _make_predictor(arm.predictor, seed=(base_seed * 7919 + s) * 104729 + j)
                )
                method = METHODS.get(arm.method)
                if method is None:
                    raise ValueError(f"unknown method {arm.method!r}")
                rng = np.random.default_rng((base_seed, s, j, size, 1))
                res = method_step(method, rec, pools[size], shape, rng)
                ratio[arm.label][s] += res.effective_ratio / steps
                prompt_sq[arm.label].extend(rec.prompt_sq)
                prefix_sq[arm.label].extend(rec.prefix_sq)

    def rmse(x: list[float]) -> float:
        return float(np.sqrt(np.mean(x))) if x else float("nan")

    return ArmResults(
        ratio=ratio,
        rmse_prompt={k: rmse(v) for k, v in prompt_sq.items()},
        rmse_prefix={k: rmse(v) for k, v in prefix_sq.items()},
    )


# ------------------------------------------------------------------------------------------- the claims
def claim_six_prompt(lo: int = 4, hi: int = 48) -> ClaimResult:
    """The blog's six-prompt allocator behaviour, from `allocate_roots` at every budget lo..hi (docs/lab.md 1)."""
    v = np.asarray(SIX_PROMPTS)
    budgets = list(range(lo, hi + 1))
    alloc = np.stack([allocate_roots(v, b) for b in budgets])
    a_ok = bool(np.array_equal(alloc[0], [0, 0, 2, 2, 0, 0]))
    sat = [i for i, m in enumerate(alloc) if m[2] >= 5 and m[3] >= 5]
    if sat:
        b_sat = budgets[sat[0]]
        extra = alloc[-1] - alloc[sat[0]]
        share = float((extra[1] + extra[4]) / max(hi - b_sat, 1))
    else:
        b_sat, share = -1, 0.0
    b_ok = bool(sat) and share > 0.5
    c_ok = bool((alloc[:, 0] == 0).all())
    first_002 = [b for b, m in zip(budgets, alloc, strict=True) if m[5] > 0]
    top_quarter = hi - (hi - lo + 4) // 4  # 36 for 4..48
    d_ok = bool(first_002) and first_002[0] >= top_quarter
    measured = {
        "allocation_at_4": alloc[0].tolist(),
        "allocation_at_48": alloc[-1].tolist(),
        "saturation_budget": b_sat,
        "share_after_saturation_to_0.90_and_0.15": share,
        "max_rollouts_0.99": int(alloc[:, 0].max()),
        "first_budget_0.02": first_002[0] if first_002 else None,
        "parts": {"a": a_ok, "b": b_ok, "c": c_ok, "d": d_ok},
    }
    summary = (
        f"B=4 {alloc[0].tolist()}; coin flips reach 5 at B={b_sat}, then {share:.0%} of extra to 0.90/0.15; "
        f"0.99 max {int(alloc[:, 0].max())}; 0.02 first at B={first_002[0] if first_002 else 'never'}"
    )
    return ClaimResult(
        id="six_prompt",
        statement="Six-prompt allocator: middle first, coin flips saturate at 5, then 0.90/0.15; 0.99 never; "
        "0.02 only near the top",
        measured=measured,
        expected=f"(a) B=4 -> [0,0,2,2,0,0]; (b) >50% of rollouts after saturation to 0.90/0.15; (c) 0.99 gets 0 "
        f"for B={lo}..{hi}; (d) 0.02 gets 0 below B={top_quarter} and some by B={hi}",
        holds=a_ok and b_ok and c_ok and d_ok,
        summary=summary,
    )


def claim_coin_flip(groups: int = 20000, seed: int = 0, family: TaskFamily | None = None) -> ClaimResult:
    """P(mixed) for v = 0.5 at 5 rollouts > 0.9: exact, and Monte Carlo on lab prompts with v0 = 0.5."""
    fam = family or TaskFamily()
    rng = np.random.default_rng((seed, 2))
    exact = float(mixed_probability(0.5, 5))
    pool = sample_pool(fam, groups, rng)
    owner = np.repeat(np.arange(groups), 5)
    steps = remaining_turns(pool, owner, np.zeros(owner.shape[0], dtype=np.int64), rng)
    fut = simulate_futures(np.full(owner.shape[0], 0.5), pool.concentration[owner], steps, rng)
    wins = fut.reward.reshape(groups, 5).sum(axis=1)
    mixed = ((wins > 0) & (wins < 5)).astype(np.float64)
    ci = mean_ci(mixed, normal=True)
    holds = exact > 0.9 and ci.low > 0.9
    return ClaimResult(
        id="coin_flip_5",
        statement="P(mixed) for v = 0.5 exceeds 0.9 at 5 rollouts",
        measured={"exact": exact, "monte_carlo": ci.as_dict()},
        expected="exact > 0.9 and Monte Carlo CI above 0.9",
        holds=holds,
        summary=f"exact {exact:.4f}; lab MC {ci} over {groups} groups",
    )


def claim_squared_movement(
    prompts: int = 200, futures: int = 200, seed: int = 0, family: TaskFamily | None = None
) -> ClaimResult:
    """E[sum of squared moves of V from turn t to the end (incl. the jump to R)] = V_t (1 - V_t)."""
    fam = family or TaskFamily()
    rng = np.random.default_rng((seed, 3))
    pool = sample_pool(fam, prompts, rng)
    trees = rollout_trees(pool, np.arange(prompts), np.ones(prompts, dtype=np.int64), rng)
    starts, depth, owner = [], [], []
    for i, tree in enumerate(trees):
        leaf = tree.is_leaf()
        for node in range(tree.num_nodes):
            if not leaf[node]:
                turn = tree.turn(node)
                starts.append(float(pool.v0[i]) if turn is None else float(turn.info["v"]))  # type: ignore[arg-type]
                depth.append(int(tree.depth[node]))
                owner.append(i)
    v = np.repeat(np.asarray(starts), futures)
    d = np.repeat(np.asarray(depth, dtype=np.int64), futures)
    own = np.repeat(np.asarray(owner, dtype=np.int64), futures)
    steps = remaining_turns(pool, own, d, rng)
    fut = simulate_futures(v, pool.concentration[own], steps, rng)
    path = np.concatenate([v[:, None], fut.states], axis=1)
    moves = np.nansum(np.diff(path, axis=1) ** 2, axis=1) + (fut.reward - fut.final()) ** 2
    target = v * (1.0 - v)
    diff = mean_ci(moves - target, normal=True)
    holds = diff.contains(0.0)
    return ClaimResult(
        id="squared_movement",
        statement="Expected total squared movement of V from turn t to the end equals V_t (1 - V_t)",
        measured={
            "mean_movement": float(moves.mean()),
            "mean_V(1-V)": float(target.mean()),
            "difference": diff.as_dict(),
            "prefixes": len(starts),
            "futures_per_prefix": futures,
        },
        expected="difference CI contains 0",
        holds=holds,
        summary=f"movement {moves.mean():.4f} vs V(1-V) {target.mean():.4f}; diff {diff} "
        f"({len(starts)} prefixes x {futures})",
    )


def claim_error_by_depth(
    prompts: int = 300,
    groups: int = 8,
    group_size: int = 8,
    max_depth: int = 6,
    seed: int = 0,
    family: TaskFamily | None = None,
) -> ClaimResult:
    """The squared error of predicting a group's success rate with the true prefix probability, by depth."""
    fam = family or TaskFamily()
    rng = np.random.default_rng((seed, 4))
    pool = sample_pool(fam, prompts, rng)
    trees = rollout_trees(pool, np.arange(prompts), np.ones(prompts, dtype=np.int64), rng)
    err = np.full((prompts, max_depth + 1), np.nan)  # err[i, t]: rollout i's prefix at depth t
    starts, where = [], []
    for i, tree in enumerate(trees):
        leaf = tree.is_leaf()
        for node in range(tree.num_nodes):  # one rollout: node t has depth t
            if not leaf[node] and tree.depth[node] <= max_depth:
                turn = tree.turn(node)
                starts.append(float(pool.v0[i]) if turn is None else float(turn.info["v"]))  # type: ignore[arg-type]
                where.append((i, int(tree.depth[node])))
    n_chain = groups * group_size
    v = np.repeat(np.asarray(starts), n_chain)
    own = np.repeat(np.asarray([w[0] for w in where], dtype=np.int64), n_chain)
    d = np.repeat(np.asarray([w[1] for w in where], dtype=np.int64), n_chain)
    fut = simulate_futures(v, pool.concentration[own], remaining_turns(pool, own, d, rng), rng)
    rate = fut.reward.reshape(len(starts), groups, group_size).mean(axis=2)
    sq = ((rate - np.asarray(starts)[:, None]) ** 2).mean(axis=1)
    for (i, t), e in zip(where, sq.tolist(), strict=True):
        err[i, t] = e
    by_depth = [mean_ci(err[~np.isnan(err[:, t]), t]) for t in range(max_depth + 1)]
    steps_ci: list[Interval] = []
    for t in range(max_depth):
        both = ~np.isnan(err[:, t]) & ~np.isnan(err[:, t + 1])
        steps_ci.append(mean_ci(err[both, t + 1] - err[both, t]))
    increases = [t for t, c in enumerate(steps_ci) if c.low > 0]
    return ClaimResult(
        id="error_by_depth",
        statement="The error of predicting a group's success rate with the true prefix probability does not "
        "increase with depth",
        measured={
            "squared_error_by_depth": [c.as_dict() for c in by_depth],
            "change_per_turn": [c.as_dict() for c in steps_ci],
            "depth4_over_depth0": by_depth[4].mean / by_depth[0].mean if max_depth >= 4 else None,
            "group_size": group_size,
        },
        expected="no turn whose error change has a CI entirely above 0",
        holds=not increases,
        summary="MSE by depth 0..{}: {}; significant increases at {}".format(
            max_depth, ", ".join(f"{c.mean:.4f}" for c in by_depth), increases or "none"
        ),
    )


def _diff(res: ArmResults, a: Arm, b: Arm) -> Interval:
    return mean_ci(res.ratio[a.label] - res.ratio[b.label])


def _er(res: ArmResults, a: Arm) -> Interval:
    return mean_ci(res.ratio[a.label])


def _beats(res: ArmResults, a: Arm, b: Arm, *, by: float = 0.0) -> tuple[bool, dict[str, Any], str]:
    d = _diff(res, a, b)
    ok = d.above_zero and d.mean >= by
    measured = {a.label: _er(res, a).as_dict(), b.label: _er(res, b).as_dict(), "difference": d.as_dict()}
    text = f"{a.method} {_er(res, a).mean:.3f} vs {b.method} {_er(res, b).mean:.3f}: diff {d}"
    return ok, measured, text


def comparison_arms(noise: int = REALISTIC_NOISE) -> list[Arm]:
    """Every arm the equal-budget claims need (oracle and one realistic noisy oracle)."""
    arms: list[Arm] = []
    for pred in ("oracle", f"noisy:{noise}"):
        for shape in SHAPES:
            arms += [_arm("treepo", shape, pred), _arm("trace", shape, pred)]
        for m in ("grpo", "pcl", "knapsack", "trace_root_only", "trace_prefix_only"):
            arms.append(_arm(m, "128x2", pred))
    arms += [_arm("trace", "128x2", f"noisy:{n}") for n in NOISE_LEVELS]
    return list({a.label: a for a in arms}.values())


def _arm(method: str, shape: str, pred: str) -> Arm:
    """GRPO and TreePO never call the predictor: one run (labelled oracle) serves every predictor."""
    return Arm(method, shape, pred if METHODS[method].uses_predictor else "oracle")


def method_claims(res: ArmResults, noise: int = REALISTIC_NOISE) -> list[ClaimResult]:
    """Claims 5-9 from the arms' per-seed effective ratios (see `comparison_arms`)."""
    out: list[ClaimResult] = []
    for pred in ("oracle", f"noisy:{noise}"):
        tag = "" if pred == "oracle" else f"_noisy{noise}"
        note = "oracle predictor" if pred == "oracle" else f"noisy oracle n={noise}"
        for shape in SHAPES:
            ok, m, text = _beats(res, _arm("trace", shape, pred), _arm("treepo", shape, pred), by=0.10)
            out.append(
                ClaimResult(
                    id=f"trace_vs_treepo_{shape}{tag}",
                    statement=f"TRACE's effective ratio beats random branching (TreePO) by >= 10 points at "
                    f"{shape} ({note})",
                    measured=m,
                    expected="mean difference >= 0.10 and CI above 0",
                    holds=ok,
                    summary=text,
                )
            )
        ok, m, text = _beats(res, _arm("trace", "128x2", pred), _arm("trace", "64x6", pred))
        out.append(
            ClaimResult(
                id=f"broad_vs_deep{tag}",
                statement=f"At equal cost (256) the broader shape 128x2 beats the deeper 64x6 ({note})",
                measured=m,
                expected="difference CI above 0",
                holds=ok,
                summary=text.replace("trace ", "128x2 ", 1).replace("vs trace", "vs 64x6"),
            )
        )
        uu = _arm("treepo", "128x2", pred)
        ro, po, tr = (_arm(x, "128x2", pred) for x in ("trace_root_only", "trace_prefix_only", "trace"))
        parts = {
            "uniform<root_only": _beats(res, ro, uu),
            "uniform<prefix_only": _beats(res, po, uu),
            "root_only<trace": _beats(res, tr, ro),
            "prefix_only<trace": _beats(res, tr, po),
        }
        out.append(
            ClaimResult(
                id=f"ablation_stacking{tag}",
                statement=f"uniform/uniform < active-root/uniform-prefix and uniform-root/active-prefix < TRACE "
                f"at 128x2 ({note})",
                measured={
                    "effective_ratio": {a.method: _er(res, a).as_dict() for a in (uu, ro, po, tr)},
                    "differences": {k: v[1]["difference"] for k, v in parts.items()},
                },
                expected="each of the four paired differences has a CI above 0",
                holds=all(v[0] for v in parts.values()),
                summary="; ".join(f"{a.method} {_er(res, a).mean:.3f}" for a in (uu, ro, po, tr))
                + "; not significant: "
                + (", ".join(k for k, v in parts.items() if not v[0]) or "none"),
            )
        )
        flat = {b: _beats(res, tr, _arm(b, "128x2", pred)) for b in ("grpo", "pcl", "knapsack")}
        out.append(
            ClaimResult(
                id=f"trace_vs_flat{tag}",
                statement=f"TRACE beats GRPO, PCL and Knapsack-RL-style allocation on effective ratio at "
                f"equal budget, 128x2 ({note})",
                measured={k: v[1] for k, v in flat.items()},
                expected="each paired difference has a CI above 0",
                holds=all(v[0] for v in flat.values()),
                summary=f"trace {_er(res, tr).mean:.3f}; "
                + "; ".join(
                    f"{k} {_er(res, _arm(k, '128x2', pred)).mean:.3f} (diff {v[1]['difference']['mean']:+.3f})"
                    for k, v in flat.items()
                ),
            )
        )
    out.append(_noisy_claim(res))
    return out


def _noisy_claim(res: ArmResults) -> ClaimResult:
    oracle = res.ratio[Arm("trace", "128x2").label]
    labels = ["oracle"] + [f"noisy:{n}" for n in NOISE_LEVELS]
    shares = [res.ratio[Arm("trace", "128x2", p).label] / oracle for p in labels]
    cis = [mean_ci(s) for s in shares]
    rises = [labels[i + 1] for i in range(len(shares) - 1) if mean_ci(shares[i + 1] - shares[i]).above_zero]
    treepo_share = mean_ci(res.ratio[Arm("treepo", "128x2").label] / oracle)
    rmse = {p: res.rmse_prompt.get(Arm("trace", "128x2", p).label, float("nan")) for p in labels}
    rmse_pre = {p: res.rmse_prefix.get(Arm("trace", "128x2", p).label, float("nan")) for p in labels}
    return ClaimResult(
        id="noisy_predictor",
        statement="Share of the oracle's effective ratio TRACE keeps with noisy predictors of increasing error "
        "(128x2)",
        measured={
            "levels": [
                {"predictor": p, "rmse_prompt": rmse[p], "rmse_prefix": rmse_pre[p], "share": c.as_dict()}
                for p, c in zip(labels, cis, strict=True)
            ],
            "treepo_share": treepo_share.as_dict(),
        },
        expected="the share does not increase as the error grows (no significant rise between levels)",
        holds=not rises,
        summary="; ".join(f"{p} (rmse {rmse[p]:.3f}) {c.mean:.3f}" for p, c in zip(labels, cis, strict=True))
        + f"; treepo {treepo_share.mean:.3f}",
    )


def run_claims(
    *, seeds: int = 10, steps: int = 2, base_seed: int = 0, family: TaskFamily | None = None
) -> list[ClaimResult]:
    """Evaluate every claim (docs/lab.md) and return them in order.

    Args:
        seeds: independent repetitions for the confidence intervals of the equal-budget claims (>= 2).
        steps: candidate pools per seed (a seed's value is the mean over its steps).
        base_seed: root of every generator; the same arguments give the same results.
        family: the task family (default: the project's documented choice).

    Raises:
        ValueError: seeds < 2 or steps < 1.
    """
    if seeds < 2:
        raise ValueError("claims need at least 2 seeds for a confidence interval")
    fam = family or TaskFamily()
    results = [
        claim_six_prompt(),
        claim_coin_flip(seed=base_seed, family=fam),
        claim_squared_movement(seed=base_seed, family=fam),
        claim_error_by_depth(seed=base_seed, family=fam),
    ]
    arms = run_arms(comparison_arms(), seeds=seeds, steps=steps, family=fam, base_seed=base_seed)
    return results + method_claims(arms)
