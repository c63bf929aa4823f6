"""Tree packing for the policy update: every distinct prefix of a minibatch's paths goes through the model once.

The paths of one rollout tree share prefixes: the prompt of every root rollout, and a root's turns up to the
anchor of every replay. The padded update (``optim.packing = "none"``) forwards each path as its own row, padded to
the longest row of its pass, so a shared prefix is computed once per path below it. The packed update
(``"tree"``, `packed_logprobs`) forwards the trie of the paths' token sequences (prompt ids + turn ids) instead:

- one packed row holds the paths of one prompt (split when they exceed the pass's token limit); its tokens are the
  nodes of their trie, each distinct prefix once, laid out so that every token follows its ancestors;
- a token attends to itself and its ancestors only, and its position id is its depth in the trie, which is its
  position in every path through it. Two ways run that attention: eager (``chains``), a pass's packed rows end to
  end without padding, each chain of a trie attending to its ancestors' keys and causally to its own
  (`trace_rl.policy.segments.tree_forward`, the trie-attention kernel the TRL adapter shares); compiled, or for a
  model whose attention function cannot be replaced, the rows padded to the pass's longest under a 4D
  (rows, 1, N, N) additive mask;

so each token's hidden state is exactly the one it has in each unpacked path through it (the same tokens at the same
positions under causal attention), and each path's log-probabilities are read at its own tokens' packed positions:
the logits of the token before turn token j predict token j. The trie (`trace_rl.policy.packing`, shared with the
SFT warm start's packed batches) is derived from the token ids (sorted
sequences, each sharing with its predecessor their longest common prefix, which in lexicographic order is the
longest it shares with any earlier one), so two paths share a computed token exactly when their whole prefixes up
to it are equal: sharing is exact by construction, whatever the tree's bookkeeping says.

Tree-aware trainers (TreeRL, TreePO, Tree-GRPO) save compute the same way. Which way runs is the model's log-prob
strategy (`trace_rl.policy.logprobs`: "chains", "mask" or "padded", probed once per model, at load, with one log line
when it is not "chains"); `update_strategy` caps it for the update's settings (padded rows under ``packing="none"``,
the mask under ``compile``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.advantages.tokens import PathTokens
from trace_rl.policy.logprobs import at_most, logprob_strategy
from trace_rl.policy.packing import (
    MASK_ATTENTION,
    PackedRow,
    pack_sequences,
    packed_forward,
    shared_prefix,
)
from trace_rl.policy.segments import tree_forward
from trace_rl.train.logprobs import upcast

__all__ = [
    "CHAIN_ROW_TOKENS",
    "MASK_ATTENTION",
    "ROW_TOKENS",
    "PackedPass",
    "PackedRow",
    "full_sequence",
    "pack_sequences",
    "packed_logprobs",
    "plan_packed_passes",
    "tree_mask_support",
    "update_strategy",
]


def full_sequence(row: PathTokens) -> npt.NDArray[np.int64]:
    """A path's model input: its prompt ids followed by its turn ids, int64 (P + T,)."""
    return np.concatenate([row.prompt_ids, row.token_ids]).astype(np.int64)


@dataclass(frozen=True)
class PackedPass:
    """One forward pass of the packed update: some paths, packed into rows of one prompt each.

    Attributes:
        paths: indices (into the minibatch's list) of the paths of this pass.
        rows: per packed row, the positions in ``paths`` of its paths.
        tokens: tokens the pass computes, packed rows x their longest (padding included).
        row_tokens: the packed rows' own tokens (what the pass computes without padding, `packed_logprobs` with
            ``chains``).
    """

    paths: list[int]
    rows: list[list[int]]
    tokens: int
    row_tokens: int = 0


ROW_TOKENS = 1024
"""Default cap on a packed row's tokens. Under the dense ancestry mask attention over a packed row of N tokens is
N^2, so a long row spends more on attention than sharing saves; with the tiny policy on CPU, capping rows at 1,024
tokens made the packed update 0.405x the padded one on a real `multistep` minibatch instead of 0.453x uncapped, and
0.88x instead of 1.02x on synthetic trees with long replays (docs/notebook/benchmarks_history.md, tree-packed policy update). Measured
with the mask; the padding-free chains attend per chain, so for them the cap mainly splits sharing:
`CHAIN_ROW_TOKENS`."""

CHAIN_ROW_TOKENS = 2048
"""Cap on a packed row's tokens when the rows run without padding along the tries' chains (the eager update,
`trace_rl.policy.segments.tree_forward`): attention is per chain, not over the row's square, so a longer row only
shares more. On the saved trees of a real `multistep` step (tiny policy, one thread, eager) 2,048 took 0.931 of the
update time at 1,024 (18,985 against 20,422 tokens computed; no cap but ``micro_tokens`` 0.929), and 0.877 on the
synthetic trees with long replays (no cap 0.903): `benchmarks/tree_packing.py --compare row_tokens`
(docs/benchmarks.md)."""


def plan_packed_passes(
    rows: Sequence[PathTokens], micro_tokens: int, row_tokens: int = ROW_TOKENS
) -> list[PackedPass]:
    """Group paths into forward passes of at most ``micro_tokens`` computed tokens (packed rows x longest packed row;
    0 = one pass), one packed row per prompt of at most ``row_tokens`` tokens (0 = no cap but ``micro_tokens``).

    Paths are sorted by their token sequences, so that paths sharing prefixes are neighbours; a prompt's paths whose
    trie exceeds either limit are split over several packed rows (the tokens of a split row's shared prefix are then
    computed once per part), and a path longer than a limit gets a packed row, and a packed row longer than
    ``micro_tokens`` a pass, of its own. Packed rows are placed
    longest first, so the rows of one pass have similar lengths.

    Every path appears in exactly one pass; which pass changes neither the loss nor its gradient (each pass's loss
    is scaled by its share of the minibatch, `trace_rl.train.update.micro_batches`).
    """
    seqs = [full_sequence(r) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: seqs[i].tolist())
    groups: list[list[int]] = []
    sizes: list[int] = []
    prev: npt.NDArray[np.int64] | None = None
    for i in order:
        seq = seqs[i]
        new = seq.shape[0]
        same_prompt = prev is not None and np.array_equal(rows[groups[-1][-1]].prompt_ids, rows[i].prompt_ids)
        if prev is not None and same_prompt:
            new = seq.shape[0] - shared_prefix(seq, prev)
        cap = min(c for c in (micro_tokens, row_tokens, 1 << 62) if c > 0)
        if not same_prompt or sizes[-1] + new > cap:
            groups.append([])
            sizes.append(seq.shape[0])
        else:
            sizes[-1] += new
        groups[-1].append(i)
        prev = seq
    by_size = sorted(range(len(groups)), key=lambda g: -sizes[g])
    passes: list[list[int]] = []
    width = 0
    for g in by_size:
        if passes and (micro_tokens <= 0 or max(width, sizes[g]) * (len(passes[-1]) + 1) <= micro_tokens):
            passes[-1].append(g)
            width = max(width, sizes[g])
        else:
            passes.append([g])
            width = sizes[g]
    out = []
    for p in passes:
        paths = [i for g in p for i in groups[g]]
        where = {path: k for k, path in enumerate(paths)}
        out.append(
            PackedPass(
                paths=paths,
                rows=[[where[i] for i in groups[g]] for g in p],
                tokens=len(p) * max(sizes[g] for g in p),
                row_tokens=sum(sizes[g] for g in p),
            )
        )
    return out


def packed_logprobs(
    model: Any,
    rows: Sequence[PathTokens],
    groups: Sequence[Sequence[int]],
    temperature: float,
    pad_id: int,
    span: int | None = None,
    *,
    chains: bool = False,
) -> Any:
    """Log-probabilities (B, T) of each path's turn tokens under ``model``, computed on packed rows; 0-padded to
    T = ``span`` (default: the longest turn span of ``rows``), the same tensor as
    `trace_rl.train.logprobs.sequence_logprobs` up to floating-point rounding.

    ``chains=False``: the packed rows padded to the longest, each under its dense (N, N) ancestry mask
    (`trace_rl.policy.packing.packed_forward`). ``chains=True``: the rows end to end without padding, each chain
    of a trie attending to its ancestors and itself only (`trace_rl.policy.segments.tree_forward`; ``model``'s
    log-prob strategy must be "chains"), the same log-probabilities up to rounding at a token's ancestry's cost of attention.

    Args:
        model: a causal LM taking ``input_ids``, ``position_ids`` and a 4D additive ``attention_mask``
            (`tree_mask_support`).
        rows: the B paths.
        groups: the packed rows, each a list of indices into ``rows`` (every path in exactly one).
        temperature: logits are divided by it before the softmax (the sampling distribution).
        pad_id: token id of padding positions.
        span: output width (at least every path's turn tokens).

    Raises:
        ValueError: a path without prompt tokens (its first token has nothing to be predicted from), ``groups``
            not a partition of the paths, or ``span`` shorter than a path's turn tokens.
    """
    import torch

    if sorted(i for g in groups for i in g) != list(range(len(rows))):
        raise ValueError("groups must hold every path exactly once")
    longest = max(len(r.token_ids) for r in rows)
    if span is None:
        span = longest
    elif span < longest:
        raise ValueError(f"span {span} is shorter than a row's {longest} turn tokens")
    if any(len(r.prompt_ids) == 0 for r in rows):
        raise ValueError("a path needs at least one prompt token to predict its first turn token from")
    packed = [pack_sequences([full_sequence(rows[i]) for i in g]) for g in groups]
    device = next(model.parameters()).device
    src_row, src_pos, src_tok, dst_path, dst_col = [], [], [], [], []
    for r, (p, g) in enumerate(zip(packed, groups, strict=True)):
        for k, i in enumerate(g):
            prompt, turn = len(rows[i].prompt_ids), len(rows[i].token_ids)
            src_pos.append(p.index[k][prompt - 1 : prompt - 1 + turn])  # the token before j predicts j
            src_tok.append(rows[i].token_ids)
            src_row.append(np.full(turn, r, dtype=np.int64))
            dst_path.append(np.full(turn, i, dtype=np.int64))
            dst_col.append(np.arange(turn, dtype=np.int64))
    flat = [torch.as_tensor(np.concatenate(a), device=device) for a in (src_row, src_pos, src_tok)]
    if chains:
        logits, offsets = tree_forward(model, packed)
        at = torch.as_tensor(offsets, device=device)[flat[0]] + flat[1]
        picked = upcast(logits[at]) / temperature  # (K, V): only the positions that predict a turn token
    else:
        picked = upcast(packed_forward(model, packed, pad_id)[flat[0], flat[1]]) / temperature
    logp = torch.log_softmax(picked, dim=-1).gather(-1, flat[2][:, None]).squeeze(-1)
    out = torch.zeros((len(rows), span), dtype=logp.dtype, device=device)
    out[torch.as_tensor(np.concatenate(dst_path)), torch.as_tensor(np.concatenate(dst_col))] = logp
    return out


def tree_mask_support(model: Any) -> bool:
    """Whether ``model`` can run the packed update: its log-prob strategy (`trace_rl.policy.logprobs`, chosen once
    per model, with one log line when it is not "chains") is not "padded"."""
    return logprob_strategy(model).name != "padded"


def update_strategy(model: Any, packing: str, compile: bool, override: str | None = None) -> str:
    """How the policy update computes ``model``'s log-probabilities: "chains", "mask" or "padded".

    Its log-prob strategy, at most "padded" under ``packing="none"``, at most "mask" under ``compile`` (one graph
    for every pass's shape, where the chains' Python loop would recompile per tree shape), and at most
    ``override`` (a benchmark comparing the ways on one model).

    Raises:
        ValueError: ``override`` not one of `trace_rl.policy.logprobs.STRATEGIES`.
    """
    if packing == "none":
        return "padded"
    way = logprob_strategy(model).name
    if compile:
        way = at_most(way, "mask")
    return way if override is None else at_most(way, override)
