"""A model's log-prob strategy: how its packed forwards run, chosen once per model, when it is loaded.

Three ways compute a batch's log-probabilities, each giving every token its unpacked value up to rounding:

- ``"chains"``: packed tries (the policy update) or sequences (the SFT warm start) as one row without padding,
  attention along each trie's chains (`trace_rl.policy.segments`, the one trie-attention kernel);
- ``"mask"``: packed tries, each row padded to the pass's longest under its dense (N, N) ancestry mask
  (`trace_rl.policy.packing.packed_forward`): a model that takes a 4D mask but whose attention function cannot
  be replaced; also the compiled update's way (one graph for every tree shape), whatever the model supports;
- ``"padded"``: one row per sequence (`trace_rl.train.logprobs.sequence_logprobs`): a model that takes neither.

`logprob_strategy` probes a model once (`packing_support_issue`, then `segment_support_issue`, which installs
`trace_rl.policy.segments.segment_attention` as its attention implementation), logs one line when it is not
``"chains"``, and keeps the answer for the model object; `trace_rl.policy.models.load_policy` asks at load, so
the update and the warm start read a choice already made. Each ordering is a capability: a model that runs
``"chains"`` also runs ``"mask"`` and ``"padded"``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from trace_rl.policy.packing import packing_support_issue
from trace_rl.policy.segments import segment_support_issue

STRATEGIES = ("chains", "mask", "padded")
"""Log-prob strategies, the most capable first."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogprobStrategy:
    """How a model's packed forwards run.

    Attributes:
        name: one of `STRATEGIES`.
        reason: why not a more capable one ("" for ``"chains"``).
    """

    name: str
    reason: str = ""


def at_most(name: str, cap: str) -> str:
    """The less capable of two strategies (`STRATEGIES`).

    Raises:
        ValueError: either is not one of `STRATEGIES`.
    """
    for x in (name, cap):
        if x not in STRATEGIES:
            raise ValueError(f"log-prob strategy must be one of {', '.join(STRATEGIES)}, got {x!r}")
    return max(name, cap, key=STRATEGIES.index)


_CHOSEN: weakref.WeakKeyDictionary[Any, LogprobStrategy] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def logprob_strategy(model: Any) -> LogprobStrategy:
    """``model``'s strategy (module docstring), probed on its first call for this model object and kept.

    Logs one warning when it is not ``"chains"``, with the probe's reason.
    """
    with _LOCK:
        chosen = _CHOSEN.get(model)
        if chosen is None:
            chosen = _choose(model)
            _CHOSEN[model] = chosen
    return chosen


def _choose(model: Any) -> LogprobStrategy:
    name = type(model).__name__
    if reason := packing_support_issue(model):
        _log.warning(
            "packed forwards: %s; using the padded update and padded warm-start batches for %s", reason, name
        )
        return LogprobStrategy("padded", reason)
    if reason := segment_support_issue(model):
        _log.warning(
            "packed forwards: %s; packed rows keep the dense mask (padded warm-start batches) for %s",
            reason,
            name,
        )
        return LogprobStrategy("mask", reason)
    return LogprobStrategy("chains")
