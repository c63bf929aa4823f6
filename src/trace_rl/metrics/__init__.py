"""Metrics: pure functions of records (numpy only; importing this package never imports matplotlib).

Sinks (jsonl, TensorBoard) and plots live in their own submodules and are imported explicitly.
"""

from trace_rl.metrics.trees import (
    effective_ratio,
    is_effective,
    mixed_anchor_ratio,
    replay_depth_histogram,
    rollouts_per_active_prompt,
    tree_metrics,
)

__all__ = [
    "effective_ratio",
    "is_effective",
    "mixed_anchor_ratio",
    "replay_depth_histogram",
    "rollouts_per_active_prompt",
    "tree_metrics",
]
