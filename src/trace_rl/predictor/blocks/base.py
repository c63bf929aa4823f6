"""The protocol a feature block of the convex predictor follows, and the text helpers the blocks share.

A block turns a list of predictor texts into its columns of the head's features (a float array or scipy matrix,
n x d). The head (:class:`~trace_rl.predictor.convex.ConvexSuccessPredictor`) holds one block per family named in
its feature set, in that order, and calls each one through this interface only:

- :meth:`FeatureBlock.fit`: each update's (and each restored update's) distinct texts, before their columns;
- :meth:`FeatureBlock.check`: refuse texts the block cannot give columns for (before anything is computed in an
  update; in :meth:`predict` while no fitted head reads the columns yet, so a cold predictor refuses too);
- :meth:`FeatureBlock.rows` / :meth:`FeatureBlock.columns`: a block with a ``key`` keeps per-text rows with each
  update (they cannot be recomputed later: the policy or the trees they came from are gone), saved in the state
  dict's batches under ``key`` and restored with :meth:`FeatureBlock.restore`; its columns come from those rows;
- :meth:`FeatureBlock.register`: what the block needs from the driver (``registers`` names it: "contexts" for
  ``register_contexts``, "group" for ``register_group``);
- :meth:`FeatureBlock.prepare`: work that can be done ahead of time (a frozen encoder's cache);
- :meth:`FeatureBlock.state_dict` / :meth:`FeatureBlock.load_state_dict`: the block's own top-level keys of the
  predictor's state dict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from trace_rl.predictor.convex_config import ConvexConfig

FloatArray = npt.NDArray[np.float64]
#: serialize_anchor marks every turn of a prefix with "[TURN t]" (or says how many it omitted).
TURN_MARKS = ("\n[TURN ", " EARLIER TURNS OMITTED]\n")


def is_prefix(text: str) -> bool:
    """Whether a predictor text is a turn prefix (it holds a turn marker) rather than a prompt."""
    return any(mark in text for mark in TURN_MARKS)


def prompt_block(text: str) -> str:
    """The text up to its first turn marker (the whole text for a prompt-level anchor)."""
    cut = min((i for i in (text.find(mark) for mark in TURN_MARKS) if i >= 0), default=len(text))
    return text[:cut]


class FeatureBlock:
    """One family of columns of the convex predictor's features (the defaults: nothing to fit, check, keep,
    register, prepare or save).

    Args:
        owner: the predictor's name (error messages name it).
        config: the predictor's :class:`~trace_rl.predictor.convex_config.ConvexConfig`.
        **inputs: what the predictor was built with (``encoder``, ``state``); a block takes what it needs.
    """

    #: the block's name in the feature sets and in :data:`~trace_rl.predictor.blocks.registry.BLOCKS`.
    name: ClassVar[str] = ""
    #: the state-dict key of the per-text rows kept with each update (None: columns recomputed from the text).
    key: ClassVar[str | None] = None
    #: what :meth:`register` takes ("contexts", "group"; None: nothing).
    registers: ClassVar[str | None] = None

    def __init__(self, owner: str, config: ConvexConfig, **inputs: Any) -> None:
        self.owner = owner
        self.config = config

    def fit(self, texts: list[str]) -> None:
        """See an update's distinct texts before their columns are computed (default: nothing)."""

    def check(self, texts: list[str]) -> None:
        """Raise ValueError for texts this block cannot give columns for (default: none)."""

    def rows(self, texts: list[str]) -> FloatArray:
        """The per-text rows to keep with an update, float64 (N, d) (blocks with a ``key`` only)."""
        raise NotImplementedError(f"feature block {self.name!r} keeps no rows")

    def restore(self, batch: Mapping[str, Any], n: int) -> FloatArray:
        """The kept rows of one saved update (``batch[key]``) as float64 (n, d).

        Raises:
            ValueError: the saved update lacks them.
        """
        raise NotImplementedError(f"feature block {self.name!r} keeps no rows")

    def columns(self, texts: list[str], rows: FloatArray | None = None) -> Any:
        """The block's (N, d) columns of ``texts`` (from ``rows``, the kept rows, when the block has a ``key``
        and they are given)."""
        raise NotImplementedError

    def register(self, texts: Sequence[str], data: Any) -> None:
        """Take what the driver registers for ``texts`` (see ``registers``)."""
        raise NotImplementedError(f"feature block {self.name!r} registers nothing")

    def prepare(self, texts: Sequence[str]) -> None:
        """Compute what can be cached ahead of time (default: nothing)."""

    def state_dict(self) -> dict[str, Any]:
        """The block's top-level keys of the predictor's state dict (default: none)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` from the predictor's state dict (default: nothing)."""
