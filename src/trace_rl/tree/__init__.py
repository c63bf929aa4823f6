"""Rollout trees (pure numpy): the rollouts of one prompt with parent pointers, value targets and anchors."""

from trace_rl.tree.rollout_tree import REWARD_ATOL, RolloutTree
from trace_rl.tree.serialize import turn_from_dict, turn_to_dict

__all__ = ["REWARD_ATOL", "RolloutTree", "turn_from_dict", "turn_to_dict"]
