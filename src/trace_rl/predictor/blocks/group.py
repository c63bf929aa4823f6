"""The group feature blocks of the convex predictor: what a prefix's other root rollouts say about it.

"group": the sibling-consensus row of each prefix text (:data:`~trace_rl.predictor.consensus.GROUP_FEATURES`, as
:func:`~trace_rl.predictor.consensus.sibling_consensus` computed it from the text's tree and the driver registered
it with ``register_group``; zeros for a prompt text: depth 0 has no siblings). "group-prior": the same rows
without the outcomes of the prefix's own environment state (:func:`~trace_rl.predictor.consensus.prior_columns`).
The registered rows are kept with each update and saved in the state dict ("groups"): the trees they were read
from are gone by the time a run resumes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from trace_rl.predictor.base import validate_texts
from trace_rl.predictor.blocks.base import FeatureBlock, FloatArray, is_prefix
from trace_rl.predictor.consensus import GROUP_FEATURES, prior_columns

if TYPE_CHECKING:
    from trace_rl.predictor.convex_config import ConvexConfig

#: Sibling-consensus rows a "group" predictor keeps registered (one per prefix text it may still score or train on).
GROUP_CAPACITY = 200_000


class GroupBlock(FeatureBlock):
    """The registered sibling-consensus rows, dense float64 (N x 3)."""

    name = "group"
    key = "groups"
    registers = "group"

    def __init__(self, owner: str, config: ConvexConfig, **inputs: Any) -> None:
        super().__init__(owner, config)
        self.registered: OrderedDict[str, FloatArray] = OrderedDict()  # prefix text -> sibling-consensus row

    def register(self, texts: Sequence[str], data: Any) -> None:
        """Remember the sibling-consensus row (``data``: float (n, 3)) of each prefix text; a text registered again
        takes its newest row; at most ``GROUP_CAPACITY`` rows are kept (least recently registered or used dropped
        first).

        Raises:
            ValueError: lengths differ, a row is not 3 finite numbers in [0, 1], or its same_state_success exceeds
                its same_state or others_success (no tree gives such a row).
        """
        items = validate_texts(texts)
        arr = np.asarray(data, dtype=np.float64)
        if arr.shape != (len(items), len(GROUP_FEATURES)):
            raise ValueError(
                f"register_group: {len(items)} texts need rows of shape ({len(items)}, {len(GROUP_FEATURES)});"
                f" got {arr.shape}"
            )
        if not np.all(np.isfinite(arr)) or (arr < 0).any() or (arr > 1).any():
            raise ValueError("register_group: sibling-consensus rows must be finite shares in [0, 1]")
        if (arr[:, 1] > np.minimum(arr[:, 0], arr[:, 2]) + 1e-9).any():
            raise ValueError(
                "register_group: same_state_success must not exceed same_state or others_success (the state's "
                "successes are a part of both); rows come from sibling_consensus"
            )
        for text, row in zip(items, arr, strict=True):
            self.registered[text] = row
            self.registered.move_to_end(text)
        while len(self.registered) > GROUP_CAPACITY:
            self.registered.popitem(last=False)

    def rows(self, texts: list[str]) -> FloatArray:
        """The sibling-consensus rows of ``texts``, float64 (N, 3): zeros for a prompt-level text, the registered
        row for a prefix.

        Raises:
            ValueError: a prefix text without a registered row (the driver must ``register_group`` first).
        """
        out = np.zeros((len(texts), len(GROUP_FEATURES)), dtype=np.float64)
        for i, t in enumerate(texts):
            if not is_prefix(t):
                continue
            row = self.registered.get(t)
            if row is None:
                raise ValueError(
                    f"predictor {self.owner!r}: no sibling-consensus row registered for prefix text "
                    f"{t[:60]!r}...: call register_group(texts, sibling_consensus(tree, nodes)) before it scores "
                    "or trains on a prefix"
                )
            self.registered.move_to_end(t)
            out[i] = row
        return out

    def check(self, texts: list[str]) -> None:
        """Refuse prefix texts without a registered row (even while no fitted head reads the rows)."""
        self.rows(texts)

    def restore(self, batch: Mapping[str, Any], n: int) -> FloatArray:
        if "groups" not in batch:
            raise ValueError("predictor state lacks the sibling-consensus rows of a kept update ('groups')")
        return np.asarray(batch["groups"], dtype=np.float64).reshape(n, len(GROUP_FEATURES))

    def columns(self, texts: list[str], rows: FloatArray | None = None) -> Any:
        return self.rows(texts) if rows is None else rows


class GroupPriorBlock(GroupBlock):
    """The registered rows' :func:`~trace_rl.predictor.consensus.prior_columns`, dense float64 (N x 2): the same
    registered (and kept) rows, without the outcomes of the prefix's own state."""

    name = "group-prior"

    def columns(self, texts: list[str], rows: FloatArray | None = None) -> Any:
        return prior_columns(super().columns(texts, rows))
