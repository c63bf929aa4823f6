"""The fields of a training step's record (`trace_rl.train.step.training_step`): pure functions of the prompts the
step generated, the trees it trained on and the reports of the predictor's and the policy's updates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trace_rl.allocation import BudgetShape
from trace_rl.metrics import effective_ratio, mixed_sibling_share, signal_per_token
from trace_rl.rollout.expansion import PromptResult, roots_mixed
from trace_rl.tree import RolloutTree

__all__ = ["fresh_rollouts_on_mixed", "predictor_fields", "replay_flips", "step_counts", "tool_calls"]


def step_counts(
    generated: Sequence[PromptResult],
    trees: Sequence[RolloutTree],
    update_metrics: Mapping[str, float],
    plan_active: int,
    pool_size: int,
    draws: int,
    shape: BudgetShape,
    max_turns: int,
) -> dict[str, Any]:
    """The step record's spend, signal and rollout counts: pure functions of the prompts generated (``trees``:
    those trained on) and the update's report."""
    roots = [e for r in generated for e in r.roots]
    replays = [e for r in generated for _, e in r.replays]
    depths = [int(ep.start_depth) for ep in replays]
    hist: list[int] = (
        np.bincount(np.asarray(depths, dtype=np.int64), minlength=max_turns + 1).tolist() if depths else []
    )
    tokens = int(sum(r.sampled_tokens for r in generated))
    return {
        "budget_spent": float(sum(r.spent for r in generated)),
        "budget_total": shape.total,
        # prefix budget a prompt could not spend (rollout-equivalents), and the prompts without turn prefixes
        # whose whole prefix budget bought fresh rollouts (docs/rollout.md, "Prompts without anchors")
        "budget_unspent": float(sum(r.unspent for r in generated)),
        "prompts_without_anchors": sum(1 for r in generated if r.anchorless),
        # over every group generated this step (dapo: the dropped ones too); trained_*: the groups trained on
        "effective_ratio": effective_ratio([r.tree for r in generated]) if generated else 0.0,
        "trained_effective_ratio": effective_ratio(trees) if trees else 0.0,
        "trained_groups": len(trees),
        "gen_batches": draws,
        "mixed_sibling_share": mixed_sibling_share(trees) if trees else float("nan"),
        "signal_path_share": (
            update_metrics["rows"] / update_metrics["paths"] if update_metrics.get("paths") else 0.0
        ),
        "adv_sq_per_token": signal_per_token(update_metrics.get("adv_sq", 0.0), tokens),
        "optimizer_steps": int(update_metrics.get("optimizer_steps", 0)),
        "success_rate": float(np.mean([e.reward for e in roots])) if roots else 0.0,
        "skip_rate": 1.0 - plan_active / max(pool_size, 1),
        "active_prompts": plan_active,
        "root_rollouts": len(roots),
        "replays": len(replays),
        "rollouts_generated": len(roots) + len(replays),
        # root rollouts per active prompt (fresh ones included): 0 when every prompt got the same count
        "root_count_std": float(np.std([len(r.roots) for r in generated])) if generated else 0.0,
        "fresh_rollouts": sum(r.fresh for r in generated),
        "fresh_rollouts_on_mixed": fresh_rollouts_on_mixed(generated),
        "replay_depths": [int(x) for x in hist],
        "rollouts_per_active_prompt": (len(roots) + len(replays)) / max(plan_active, 1),
        "turns_per_rollout": float(np.mean([len(e.turns) for e in roots])) if roots else 0.0,
        "tokens_generated": tokens,
        "tool_calls": sum(tool_calls(t.info) for e in roots + replays for t in e.turns),
        # tool calls whose tool failed (e.g. a retrieval server down: an error observation) and their retries
        "tool_errors": sum(_info_count(t.info, "tool_errors") for e in roots + replays for t in e.turns),
        "tool_retries": sum(_info_count(t.info, "tool_retries") for e in roots + replays for t in e.turns),
    }


def fresh_rollouts_on_mixed(results: Sequence[PromptResult]) -> int:
    """Fresh rollouts (``trace_fresh``'s depth-0 anchor) bought for prompts whose root rollouts were already mixed.

    A fresh rollout adds tree-level contrast only to a prompt whose roots all share one reward; the scheduler
    offers the depth-0 anchor only then, so this count stays 0 (docs/allocation.md). It is computed from the
    results, independently of the scheduler: the first ``len(roots) - fresh`` roots are the planned ones. Fresh
    rollouts of a prompt without turn prefixes (``anchorless``: its whole budget buys fresh rollouts, docs/rollout.md)
    are not counted: they are the only way that prompt's budget is spent.
    """
    return sum(
        r.fresh
        for r in results
        if r.fresh and not getattr(r, "anchorless", False) and roots_mixed(r.roots[: len(r.roots) - r.fresh])
    )


def replay_flips(results: Sequence[PromptResult]) -> dict[str, float]:
    """How often replays flip the ending, next to how often fresh rollouts of the same prompts would.

    ``replay_flip_rate``: share of replays whose terminal reward differs from that of the rollout their anchor lies
    on (NaN: no replays); ``replay_flip_rate_depth_<d>`` per anchor depth d. ``fresh_flip_rate`` (and
    ``fresh_flip_rate_depth_<d>``): for the same replays, the share of the prompt's other root rollouts whose
    reward differs from that rollout's, i.e. the flip rate a fresh rollout of the same prompt would have had in
    its place (DEMO_HEADROOM section 5 measures both the same way). Their ratio says what a replay from depth d is
    worth against a fresh rollout for making a group mixed.

    Counts, so that a run's flips per replay and per generated token by depth sum over steps exactly (rates of
    steps do not): ``replay_flips_depth_<d>`` (replays from depth d that flipped) and ``replay_tokens_depth_<d>``
    (model tokens those replays sampled; tool output not counted). Depths with no replay are absent.
    """
    flips: dict[int, list[float]] = {}
    fresh: dict[int, list[float]] = {}
    tokens: dict[int, int] = {}
    for r in results:
        leaf = r.tree.chain_leaf()
        reward = r.tree.reward
        roots = np.array([float(e.reward) for e in r.roots])
        for node, ep in r.replays:
            original = float(reward[int(leaf[int(node)])])
            d = int(ep.start_depth)
            flips.setdefault(d, []).append(float(abs(float(ep.reward) - original) > 1e-6))
            tokens[d] = tokens.get(d, 0) + int(ep.sampled_tokens)
            if len(roots) > 1:  # the original is one of the roots with this reward: leave it out
                fresh.setdefault(d, []).append(
                    float(np.sum(np.abs(roots - original) > 1e-6)) / (len(roots) - 1)
                )
    out: dict[str, float] = {}
    for name, table in (("replay_flip_rate", flips), ("fresh_flip_rate", fresh)):
        every = [f for fs in table.values() for f in fs]
        out[name] = float(np.mean(every)) if every else float("nan")
        out.update({f"{name}_depth_{d}": float(np.mean(fs)) for d, fs in sorted(table.items())})
    out.update({f"replay_flips_depth_{d}": int(sum(fs)) for d, fs in sorted(flips.items())})
    out.update({f"replay_tokens_depth_{d}": n for d, n in sorted(tokens.items())})
    return out


def tool_calls(info: dict[str, Any]) -> int:
    """Tool calls a turn made (envs list one tool result per call in info["tool_results"])."""
    results = info.get("tool_results")
    return len(results) if isinstance(results, list) else 0


def _info_count(info: dict[str, Any], key: str) -> int:
    """A count an env reported in a turn's info (0 where it reports none)."""
    value = info.get(key, 0)
    return int(value) if isinstance(value, int | float) else 0


def predictor_fields(metrics: dict[str, Any]) -> dict[str, Any]:
    """The online trainer's report ("predictor/mse", "predictor/mse_depth_1", ...) as flat log fields
    ("predictor_mse", "predictor_mse_depth_1", ...); NaN placeholders when nothing was scored."""
    out: dict[str, Any] = {"predictor_mse": float("nan"), "predictor_spearman": float("nan")}
    for key, value in metrics.items():
        if isinstance(value, bool | int | float):
            name = key.replace("/", "_") if key.startswith("predictor") else f"predictor_{key}"
            out[name] = float(value)
    return out
