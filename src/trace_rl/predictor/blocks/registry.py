"""The convex predictor's feature blocks by name: a feature set "a+b+c" is the blocks BLOCKS[a], BLOCKS[b], BLOCKS[c]
in that column order (adding a block: its module and one line here; a predictor name using it goes in
:data:`trace_rl.predictor.names.CONVEX_FEATURES`)."""

from __future__ import annotations

from trace_rl.predictor.blocks.base import FeatureBlock
from trace_rl.predictor.blocks.group import GroupBlock, GroupPriorBlock
from trace_rl.predictor.blocks.minilm import MinilmBlock
from trace_rl.predictor.blocks.ngram import NgramBlock
from trace_rl.predictor.blocks.state import PolicyStateBlock

BLOCKS: dict[str, type[FeatureBlock]] = {
    "ngram": NgramBlock,
    "minilm": MinilmBlock,
    "state": PolicyStateBlock,
    "group": GroupBlock,
    "group-prior": GroupPriorBlock,
}


def block_names(features: str) -> list[str]:
    """The block names of a feature set, in column order ("ngram+minilm" -> ["ngram", "minilm"]).

    Raises:
        ValueError: a part that names no block.
    """
    names = features.split("+")
    unknown = [n for n in names if n not in BLOCKS]
    if unknown:
        raise ValueError(f"unknown feature block(s) {unknown} in {features!r}; known: {', '.join(BLOCKS)}")
    return names
