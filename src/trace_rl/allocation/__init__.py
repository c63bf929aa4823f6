"""TRACE allocation: objectives, exact solvers, budget accounting and per-method strategies (pure numpy)."""

from trace_rl.allocation.budget import BudgetShape, token_aware_budget, token_aware_costs
from trace_rl.allocation.objectives import flip_probability, mixed_probability, repeat_probability
from trace_rl.allocation.solvers import allocate_prefixes, allocate_roots, knapsack_dp
from trace_rl.allocation.strategies import (
    METHODS,
    Method,
    PrefixStrategy,
    RootStrategy,
    get_method,
    grpo_roots,
    knapsack_roots,
    no_prefixes,
    pcl_roots,
    random_prefixes,
    trace_prefixes,
    trace_roots,
    uniform_tree_roots,
)

__all__ = [
    "METHODS",
    "BudgetShape",
    "Method",
    "PrefixStrategy",
    "RootStrategy",
    "allocate_prefixes",
    "allocate_roots",
    "flip_probability",
    "get_method",
    "grpo_roots",
    "knapsack_dp",
    "knapsack_roots",
    "mixed_probability",
    "no_prefixes",
    "pcl_roots",
    "random_prefixes",
    "repeat_probability",
    "token_aware_budget",
    "token_aware_costs",
    "trace_prefixes",
    "trace_roots",
    "uniform_tree_roots",
]
