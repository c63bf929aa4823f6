"""The allocation lab: a known-truth simulator of multi-turn tasks, its predictors, and the paper's claims.

See docs/lab.md for the task family's law and the reasoning behind its parameters. Plotting lives in
`trace_rl.lab.plots` (imports matplotlib) and is not imported here.
"""

from trace_rl.lab.claims import SHAPES, ClaimResult, run_arms, run_claims
from trace_rl.lab.predictors import (
    NoisyOraclePredictor,
    OraclePredictor,
    Predictor,
    Query,
    TabularTextPredictor,
    TextPredictor,
    TextPredictorAdapter,
    prefix_query,
    prompt_queries,
    serialize_query,
    true_probability,
)
from trace_rl.lab.simulator import (
    Futures,
    Pool,
    TaskFamily,
    add_replays,
    beta_step,
    make_pool,
    node_state,
    remaining_turns,
    rollout_trees,
    sample_pool,
    simulate_futures,
)
from trace_rl.lab.step import StepResult, method_step
from trace_rl.metrics.intervals import Interval, mean_ci

__all__ = [
    "SHAPES",
    "ClaimResult",
    "Futures",
    "Interval",
    "NoisyOraclePredictor",
    "OraclePredictor",
    "Pool",
    "Predictor",
    "Query",
    "StepResult",
    "TabularTextPredictor",
    "TaskFamily",
    "TextPredictor",
    "TextPredictorAdapter",
    "add_replays",
    "beta_step",
    "make_pool",
    "mean_ci",
    "method_step",
    "node_state",
    "prefix_query",
    "prompt_queries",
    "remaining_turns",
    "rollout_trees",
    "run_arms",
    "run_claims",
    "sample_pool",
    "serialize_query",
    "simulate_futures",
    "true_probability",
]
