"""The exact allocation solvers under one import path: re-exports, one solver per module.

| solver | module | problem |
|---|---|---|
| `allocate_roots` | `roots.py` | TRACE root allocation: rollouts per prompt maximising expected mixed groups |
| `allocate_prefixes` | `prefixes.py` | TRACE prefix expansion: replays per anchor maximising expected flips |
| `allocate_contrast` | `contrast.py` | the contrast objective (ours): tree term plus weighted sibling terms |
| `knapsack_dp` | `knapsack.py` | the reference dynamic program (unequal costs, Knapsack-RL values, tests) |

Their shared input checks are in `validation.py`; proofs of exactness in docs/allocation.md.
"""

from __future__ import annotations

from trace_rl.allocation.contrast import allocate_contrast
from trace_rl.allocation.knapsack import knapsack_dp
from trace_rl.allocation.prefixes import allocate_prefixes
from trace_rl.allocation.roots import allocate_roots

__all__ = ["allocate_contrast", "allocate_prefixes", "allocate_roots", "knapsack_dp"]
