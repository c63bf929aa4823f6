"""Metrics: pure functions of records (numpy only; importing this package never imports matplotlib).

Sinks (jsonl, TensorBoard) and plots live in their own submodules and are imported explicitly.
"""

from trace_rl.metrics.trees import (
    effective_ratio,
    is_effective,
    mixed_anchor_ratio,
    mixed_sibling_share,
    replay_depth_histogram,
    rollouts_per_active_prompt,
    sibling_groups,
    signal_per_token,
    tree_metrics,
)

__all__ = [
    "effective_ratio",
    "is_effective",
    "mixed_anchor_ratio",
    "mixed_sibling_share",
    "replay_depth_histogram",
    "rollouts_per_active_prompt",
    "sibling_groups",
    "signal_per_token",
    "tree_metrics",
]
