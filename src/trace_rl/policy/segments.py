"""Several token sequences through a causal LM as one row without padding, each attending to its own tokens only.

The warm start's SFT batches (`trace_rl.policy.sft`, ``optim.packing: tree``, issue 38 item 1) hold examples of
different lengths. Padded to the longest, every row computes the longest example's length, in the matrix products
and in attention; side by side in one row under a block-diagonal mask (`trace_rl.policy.packing`), attention
computes the whole row's square. `segment_forward` concatenates the sequences into one row with position ids that
restart per sequence, and runs the model's own modules with `segment_attention` as its attention function (a
Hugging Face ``AttentionInterface`` entry, `SEGMENT_ATTENTION`): causal scaled-dot-product attention within each
sequence's span of the row, so the products cost the batch's real tokens and attention the sum of each sequence's
own square. Each token then has exactly its unpacked hidden state (the same tokens at the same positions under
causal attention), up to floating-point rounding.

On the `multistep` warm start (examples of 150-450 tokens, batches of 8) that is 0.64 of the padded batch's
attention pairs and 0.79 of its tokens (docs/notebook/benchmarks_history.md, "The warm start without padding").

The model must be a Hugging Face causal LM that looks its attention function up by ``config._attn_implementation``
and passes the forward's extra keyword arguments on to it (transformers' Llama/Qwen2/Qwen3 and most decoder
models); `segment_support_issue` checks a model on a probe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.policy.packing import PackedRow

SEGMENT_ATTENTION = "trace_segments"
"""The name `segment_attention` is registered under in transformers' ``AttentionInterface``."""

_CUTS = "segment_cuts"  # the keyword argument carrying the spans from the forward to the attention function
_CHAINS = "segment_chains"  # the same for a packed trie's chains (`tree_forward`)

Chain = tuple[int, int, Any, Any]
"""(start, end, ancestors, mask) of one chain of a padding-free trie row: tokens start..end-1 follow the tokens at
row positions ``ancestors`` (a LongTensor, root first; None for a chain without ancestors), and ``mask`` (bool
(end - start, A + end - start), None without ancestors) lets each see every ancestor and its own earlier tokens."""


def segment_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, None]:
    """Causal attention within each span of a padding-free row (the ``AttentionInterface`` signature).

    Args:
        query: (1, Hq, T, D); key, value: (1, Hkv, T, D), Hq a multiple of Hkv (grouped-query attention).
        attention_mask: ignored (the spans are the mask).
        kwargs: ``segment_cuts``, the row's span boundaries [0, c_1, ..., T] (ints, increasing): token t of span
            [c_k, c_k+1) attends to the tokens c_k..t; or ``segment_chains``, a packed trie's chains (`Chain`,
            from `tree_forward`): a chain's token attends to the chain's ancestors and its own earlier tokens.

    Returns:
        (attention output (1, T, Hq, D), None): no attention weights.

    Raises:
        ValueError: neither (the model was not called by `segment_forward` or `tree_forward`), or a sliding-window
            layer (its window is not applied here).
    """
    import torch
    import torch.nn.functional as F

    cuts: list[int] | None = kwargs.get(_CUTS)
    chains: list[Chain] | None = kwargs.get(_CHAINS)
    if cuts is None and chains is None:
        raise ValueError(
            f"{SEGMENT_ATTENTION} attention needs segment_cuts or segment_chains: call the model through "
            "segment_forward or tree_forward"
        )
    if kwargs.get("sliding_window") is not None:
        raise ValueError(f"{SEGMENT_ATTENTION} attention does not apply a sliding window")
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    p = dropout if getattr(module, "training", False) else 0.0
    if chains is not None:
        return _chain_attention(query, key, value, chains, scaling, p), None
    assert cuts is not None  # checked above
    spans = []
    for k in range(len(cuts) - 1):  # an index loop: what dynamo traces most plainly
        a, b = cuts[k], cuts[k + 1]
        spans.append(
            F.scaled_dot_product_attention(
                query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], is_causal=True, scale=scaling, dropout_p=p
            )
        )
    return torch.cat(spans, dim=2).transpose(1, 2).contiguous(), None


def _chain_attention(
    query: Any, key: Any, value: Any, chains: Sequence[Chain], scaling: float | None, p: float
) -> Any:
    """`segment_attention` over a packed trie's chains: each chain's queries attend to its ancestors' keys and,
    causally, its own; (1, T, H, D)."""
    import torch
    import torch.nn.functional as F

    out = []
    for start, end, ancestors, mask in chains:
        q = query[:, :, start:end]
        if ancestors is None:
            out.append(
                F.scaled_dot_product_attention(
                    q,
                    key[:, :, start:end],
                    value[:, :, start:end],
                    is_causal=True,
                    scale=scaling,
                    dropout_p=p,
                )
            )
            continue
        k = torch.cat([key.index_select(2, ancestors), key[:, :, start:end]], dim=2)
        v = torch.cat([value.index_select(2, ancestors), value[:, :, start:end]], dim=2)
        out.append(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling, dropout_p=p))
    return torch.cat(out, dim=2).transpose(1, 2).contiguous()


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(SEGMENT_ATTENTION, segment_attention)


@contextlib.contextmanager
def _attention(model: Any, name: str) -> Iterator[None]:
    """``model`` (or the module a compiled wrapper holds: they share the config) runs ``name`` as its attention
    implementation inside the block; the one it had is restored after."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before


def segment_forward(
    model: Any, sequences: Sequence[npt.NDArray[np.int64]]
) -> tuple[Any, npt.NDArray[np.int64]]:
    """Logits of ``model`` on ``sequences`` as one padding-free row.

    Args:
        model: a Hugging Face causal LM (or a ``torch.compile`` wrapper of one), see the module docstring.
        sequences: K int64 token-id arrays of lengths L_k >= 1.

    Returns:
        (logits (T, V), T = sum of L_k; starts int64 (K,)): sequence k's token j has the logits at
        ``starts[k] + j``.

    Raises:
        ValueError: no sequence, or an empty one.
    """
    if not sequences or any(s.size == 0 for s in sequences):
        raise ValueError("segment_forward needs at least one sequence and no empty one")
    lengths = [s.size for s in sequences]
    starts = _starts(lengths)
    cuts = [0, *(int(c) for c in np.cumsum(lengths))]
    positions = np.concatenate([np.arange(n) for n in lengths])
    return _row_logits(model, np.concatenate(sequences), positions, {_CUTS: cuts}), starts


def tree_forward(model: Any, rows: Sequence[PackedRow]) -> tuple[Any, npt.NDArray[np.int64]]:
    """Logits of ``model`` on packed trie rows (`trace_rl.policy.packing.pack_sequences`) laid end to end as one
    padding-free row: each chain of a row attends to its ancestors and, causally, to itself
    (`segment_attention`), so each token's logits equal `trace_rl.policy.packing.packed_forward`'s (the dense
    ancestry mask) up to rounding, without padding the rows to the longest and without the (N, N) attention of
    each row: a token's attention costs its ancestry, not its row.

    Returns:
        (logits (N, V), N = the rows' tokens; offsets int64 (R,)): row r's packed position j has the logits at
        ``offsets[r] + j``.

    Raises:
        ValueError: no rows, or an empty row.
    """
    import torch

    if not rows or any(r.size == 0 for r in rows):
        raise ValueError("tree_forward needs at least one row and no empty row")
    device = next(model.parameters()).device
    offsets = _starts([r.size for r in rows])
    chains: list[Chain] = []
    for row, off in zip(rows, offsets, strict=True):
        for start, end, ancestors in row.segments:
            a, b = int(off) + start, int(off) + end
            if ancestors.size == 0:
                chains.append((a, b, None, None))
                continue
            n = end - start
            mask = torch.ones((n, ancestors.size + n), dtype=torch.bool, device=device)
            mask[:, ancestors.size :] = torch.ones((n, n), dtype=torch.bool, device=device).tril()
            chains.append((a, b, torch.as_tensor(ancestors + off, device=device), mask))
    ids = np.concatenate([r.token_ids for r in rows])
    positions = np.concatenate([r.position_ids for r in rows])
    return _row_logits(model, ids, positions, {_CHAINS: chains}), offsets


def _starts(lengths: Sequence[int]) -> npt.NDArray[np.int64]:
    """Where each of some stretches laid end to end starts: int64 (K,)."""
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)


def _row_logits(
    model: Any, ids: npt.NDArray[np.int64], positions: npt.NDArray[np.int64], spans: dict[str, Any]
) -> Any:
    """Logits (T, V) of ``model`` on one row of token ids (T,) at ``positions`` (T,), with `segment_attention`
    as its attention function and ``spans`` (its ``segment_cuts`` or ``segment_chains``) passed on to it."""
    import torch

    _register()
    device = next(model.parameters()).device
    ids_t = torch.as_tensor(ids, device=device)[None]
    pos_t = torch.as_tensor(positions, device=device)[None]
    with _attention(model, SEGMENT_ATTENTION):
        return model(input_ids=ids_t, position_ids=pos_t, **spans).logits[0]


def segment_support_issue(model: Any) -> str:
    """Why ``model`` cannot run `segment_forward`, or "" when it can: on a probe of two short sequences, the
    log-probabilities of the padding-free row must equal each sequence's own forward within the dtype's tolerance
    (`trace_rl.policy.packing.PROBE_TOLERANCE`); a model that ignores the attention function or the position ids,
    or raises, shows."""
    import torch

    from trace_rl.policy.packing import PROBE_TOLERANCE

    if getattr(getattr(model, "config", None), "_attn_implementation", None) is None:
        return "it has no Hugging Face attention implementation to replace"
    vocab = int(model.get_input_embeddings().weight.shape[0])
    seqs = [np.random.default_rng(0).integers(0, vocab, n).astype(np.int64) for n in (7, 5)]
    training = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.no_grad():
            logits, starts = segment_forward(model, seqs)
            together = torch.log_softmax(logits.double(), -1)
            err = 0.0
            device = next(model.parameters()).device
            for seq, a in zip(seqs, starts, strict=True):
                alone = torch.log_softmax(
                    model(input_ids=torch.as_tensor(seq[None], device=device)).logits[0].double(), -1
                )
                err = max(err, float((together[a : a + seq.size] - alone).abs().max()))
    except (TypeError, ValueError, RuntimeError, KeyError, AttributeError) as exc:
        return f"the padding-free forward failed on a probe ({type(exc).__name__}: {exc})"
    finally:
        model.train(training)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    if not err <= PROBE_TOLERANCE.get(dtype, 5e-2):
        return f"padding-free and separate log-probabilities differ by {err:.2e} on a probe"
    return ""
