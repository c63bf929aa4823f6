"""The convex predictors' names, feature sets and L2 strengths (no numerical imports: the verl and TRL adapters'
configs read them)."""

from __future__ import annotations

#: Feature set of each convex predictor name (`trace_rl.predictor.convex_config.ConvexConfig.features`).
CONVEX_FEATURES = {
    "ngram": "ngram",
    "minilm-head": "minilm",
    "ngram+minilm": "ngram+minilm",
    "state-head": "state",
    "ngram+minilm+state": "ngram+minilm+state",
    "ngram+minilm+group": "ngram+minilm+group",
    "ngram+minilm+group-prior": "ngram+minilm+group-prior",
}
#: Inverse L2 strength per predictor name (one entry per `CONVEX_FEATURES` name; a test checks), chosen by 5-fold
#: CV on demo-task outcomes (docs/predictor.md); the state predictors take ngram+minilm's (not tuned on the anchors
#: they are measured on: docs/predictor.md).
DEFAULT_C = {
    "ngram": 30.0,
    "minilm-head": 10.0,
    "ngram+minilm": 30.0,
    "state-head": 30.0,
    "ngram+minilm+state": 30.0,
    "ngram+minilm+group": 30.0,
    "ngram+minilm+group-prior": 30.0,
}
CONVEX_NAMES = tuple(CONVEX_FEATURES)
#: The predictors that read the live policy's hidden state: only trace-rl's own trainer attaches a policy to them
#: (`Trainer._attach_policy_state`); the verl and TRL adapters refuse them.
STATE_NAMES = tuple(name for name, features in CONVEX_FEATURES.items() if "state" in features)
#: The predictors that read the other root rollouts of a prefix's tree (`trace_rl.predictor.consensus`): the trainer
#: registers each scored or trained-on prefix's sibling-consensus row (`trace_rl.train.step.training_step`, which
#: the TRL adapter runs too); the verl adapter, whose predictor lives in a Ray actor, refuses them.
GROUP_NAMES = tuple(name for name, features in CONVEX_FEATURES.items() if "group" in features)


def uses_group_prior(features: str) -> bool:
    """Whether a feature set reads the group rows without the state's outcomes ("group-prior": the size of the
    state and the outcomes outside it; `trace_rl.predictor.consensus.prior_columns`)."""
    return features.endswith("group-prior")


def reads_state_outcomes(features: str) -> bool:
    """Whether a feature set holds the outcomes of the prefix's own environment state ("group", not "group-prior"):
    such a predictor must not get them again as evidence (budget.state_evidence)."""
    return "group" in features and not uses_group_prior(features)


#: The group-aware predictors whose features hold the same-state roots' outcomes (see `reads_state_outcomes`).
GROUP_OUTCOME_NAMES = tuple(
    name for name, features in CONVEX_FEATURES.items() if reads_state_outcomes(features)
)
#: Why those and budget.state_evidence do not go together (config check and replay_allocator).
GROUP_WITH_EVIDENCE = (
    "ngram+minilm+group reads the outcomes of the roots in the anchor's environment state as features (its prior "
    "depends on them); budget.state_evidence would count them a second time as evidence: use one or the other, or "
    "ngram+minilm+group-prior, whose prior leaves them out"
)
