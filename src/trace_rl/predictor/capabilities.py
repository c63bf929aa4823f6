"""What a success predictor can do beyond `SuccessPredictor`: its capabilities, declared and checked (pure).

A predictor declares ``capabilities``, a frozenset of `Capability`; each capability names a small protocol of
the members it promises. `check_capabilities` verifies the declaration when the predictor is built (or handed to
the trainer), and callers dispatch on the declaration through the ``as_*`` accessors, never by probing for
members:

=============  ==================  ============================================  ========================
capability     protocol            members                                       declared by
=============  ==================  ============================================  ========================
``state``      `StateAware`        ``attach_state``, ``register_contexts``       convex sets with "state"
``group``      `GroupAware`        ``register_group``, ``reads_state_outcomes``  convex sets with "group"
``posterior``  `HistoryPosterior`  ``posterior``, ``prior_strength``             every convex predictor
``prepare``    `Preparable`        ``prepare``                                   every convex predictor
``refit``      `Refitting`         ``history``                                   every convex predictor
=============  ==================  ============================================  ========================

The torch predictors (`trace_rl.predictor.model`) declare none. A predictor without ``posterior`` is valued by
`trace_rl.predictor.posterior_mean` with a fixed prior strength; one without ``refit`` is trained on batches
from the online trainer's buffer with one weight per node (docs/predictor.md).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Literal, Protocol, cast

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class Capability(enum.Enum):
    """A capability a predictor may declare in its ``capabilities`` (the value is its name in a profile)."""

    STATE = "state"
    GROUP = "group"
    POSTERIOR = "posterior"
    PREPARE = "prepare"
    REFIT = "refit"


#: The declaration of a predictor with no capability beyond `SuccessPredictor`.
NO_CAPABILITIES: frozenset[Capability] = frozenset()


class StateAware(Protocol):
    """Reads the live policy's hidden state at each text's token context (`trace_rl.predictor.policy_state`):
    the trainer attaches the policy once and registers the token context of every text it scores or trains on."""

    def attach_state(self, state: Any) -> None:
        """Give it the policy-state function ``texts -> float64 (n, F_s)``."""
        ...

    def register_contexts(self, texts: Sequence[str], token_ids: Sequence[npt.ArrayLike]) -> None:
        """Which token context (int ids) each text stands for."""
        ...


class GroupAware(Protocol):
    """Reads the other root rollouts of a prefix's tree (`trace_rl.predictor.consensus`): the step registers the
    sibling-consensus row of every prefix text it scores or trains on."""

    @property
    def reads_state_outcomes(self) -> bool:
        """Whether its features hold the outcomes of the prefix's own environment state (then
        ``budget.state_evidence`` would count them twice)."""
        ...

    def register_group(self, texts: Sequence[str], rows: npt.ArrayLike) -> None:
        """The sibling-consensus row, float (n, 3), of each prefix text."""
        ...


class HistoryPosterior(Protocol):
    """Keeps a Beta posterior per text over its kept outcomes: outcomes a step has just observed join the same
    posterior (`trace_rl.train.prefixes.anchor_values`) instead of a second one."""

    def posterior(self, texts: Sequence[str], successes: npt.ArrayLike, trials: npt.ArrayLike) -> FloatArray:
        """Estimates, float64 (n,), given ``successes`` of ``trials`` more outcomes per text."""
        ...

    def prior_strength(self, texts: Sequence[str]) -> FloatArray:
        """The posterior's prior strength kappa per text, float64 (n,)."""
        ...


class Preparable(Protocol):
    """Has frozen features of a known dataset worth computing once at set-up (the training prompts)."""

    def prepare(self, texts: Sequence[str]) -> float:
        """Compute them for ``texts``; returns the seconds it took."""
        ...


class Refitting(Protocol):
    """Refits on its own window of kept outcomes at every update: the online trainer hands it one update per step
    with that step's nodes (nothing re-fed from its buffer), each weighted by its number of leaves (= trials)."""

    def history(self, texts: Sequence[str]) -> tuple[FloatArray, FloatArray]:
        """(successes, trials) float64 (n,) kept for each text."""
        ...


#: The protocol each capability promises.
PROTOCOLS: dict[Capability, type] = {
    Capability.STATE: StateAware,
    Capability.GROUP: GroupAware,
    Capability.POSTERIOR: HistoryPosterior,
    Capability.PREPARE: Preparable,
    Capability.REFIT: Refitting,
}


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The members a capability protocol of this module promises (methods, properties, annotated attributes)."""
    names = [n for n in vars(protocol) if not n.startswith("_")]
    names += [n for n in vars(protocol).get("__annotations__", {}) if n not in names]
    return tuple(sorted(names))


def check_capabilities(predictor: Any) -> None:
    """Check a predictor's declared ``capabilities`` against the protocols they promise.

    Raises:
        TypeError: no ``capabilities`` declared, a declaration that is not a set of `Capability`, or a declared
            capability whose protocol members the predictor lacks (each missing member named).
    """
    label = f"predictor {type(predictor).__name__}"
    if "capabilities" not in dir(predictor):
        raise TypeError(f"{label} declares no capabilities (use NO_CAPABILITIES for none)")
    declared = predictor.capabilities
    if not isinstance(declared, frozenset) or not all(isinstance(c, Capability) for c in declared):
        raise TypeError(f"{label}: capabilities must be a frozenset of Capability; got {declared!r}")
    have = set(dir(predictor))
    for cap in sorted(declared, key=lambda c: c.value):
        missing = [m for m in protocol_members(PROTOCOLS[cap]) if m not in have]
        if missing:
            raise TypeError(
                f"{label} declares the {cap.value!r} capability but lacks {', '.join(missing)} "
                f"({PROTOCOLS[cap].__name__})"
            )


def as_state_aware(predictor: Any) -> StateAware | None:
    """The predictor as a `StateAware` one when it declares ``state``, else None."""
    return cast(StateAware, predictor) if Capability.STATE in predictor.capabilities else None


def as_group_aware(predictor: Any) -> GroupAware | None:
    """The predictor as a `GroupAware` one when it declares ``group``, else None."""
    return cast(GroupAware, predictor) if Capability.GROUP in predictor.capabilities else None


def as_history_posterior(predictor: Any) -> HistoryPosterior | None:
    """The predictor as a `HistoryPosterior` when it declares ``posterior``, else None."""
    return cast(HistoryPosterior, predictor) if Capability.POSTERIOR in predictor.capabilities else None


def as_preparable(predictor: Any) -> Preparable | None:
    """The predictor as a `Preparable` one when it declares ``prepare``, else None."""
    return cast(Preparable, predictor) if Capability.PREPARE in predictor.capabilities else None


def refits(predictor: Any) -> bool:
    """Whether the predictor declares ``refit`` (`Refitting`)."""
    return Capability.REFIT in predictor.capabilities


def example_weighting(predictor: Any) -> Literal["uniform", "leaves"]:
    """How its training examples are weighted (`trace_rl.predictor.examples.node_examples`): "leaves" (number of
    leaves below the node) for a `Refitting` predictor, "uniform" (one per node) for the others."""
    return "leaves" if refits(predictor) else "uniform"
