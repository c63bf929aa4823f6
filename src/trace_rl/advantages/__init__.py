"""Tree-aware advantages (pure numpy) and, in `trace_rl.advantages.losses`, the torch policy losses.

`import trace_rl.advantages` does not import torch; import the losses explicitly.
"""

from trace_rl.advantages.estimators import (
    DEFAULT_EPS,
    group_normalize,
    grpo_advantages,
    tree_grpo_advantages,
    treerpo_advantages,
)
from trace_rl.advantages.tokens import PathTokens, advantage_level, token_advantages

__all__ = [
    "DEFAULT_EPS",
    "PathTokens",
    "advantage_level",
    "group_normalize",
    "grpo_advantages",
    "token_advantages",
    "tree_grpo_advantages",
    "treerpo_advantages",
]
