"""Token sequences and packed tries through a causal LM as one row without padding: the one trie-attention kernel.

One trie format, one kernel, one attention entry, used by the SFT warm start's packed batches, the policy update's
packed rows and the TRL adapter (`trace_rl.integrations.trl.cpu`):

- **the format**, `TreeSpans`: flash-attention's varlen layout of a packed trie, the one TRL's trainer passes to its
  tree-attention kernel. Segment s holds the row's queries ``cu_seqlens_q[s] .. cu_seqlens_q[s+1] - 1`` and attends
  to the keys at the row positions ``kv_index[cu_seqlens_k[s] : cu_seqlens_k[s+1]]`` (its path from the root: the
  ancestors, then its own tokens), query i of a segment of Lq queries over Lk keys seeing keys 0 .. Lk - Lq + i.
  `tree_forward` lays out the tries of `trace_rl.policy.packing.pack_sequences` so (each chain a segment after its
  ancestors); `segment_forward` lays out independent sequences (each its own segment, no ancestors);
- **the kernel**, `tree_attention`: scaled-dot-product attention per segment (causal within a segment that has no
  ancestors; under a (Lq, Lk) mask over its gathered path otherwise), so a token's attention costs its ancestry,
  not its row, and each token has exactly its unpacked hidden state (the same tokens at the same positions under
  causal attention), up to floating-point rounding;
- **the entry**, `segment_attention`: a Hugging Face ``AttentionInterface`` function that runs the kernel when the
  forward carries spans and otherwise falls through to the model's own attention (sdpa or eager) with the model's
  own mask. `install_segment_attention` makes it a model's attention implementation once, when the model is loaded
  (`trace_rl.policy.models.load_policy`; a model built elsewhere gets it on its first packed forward or strategy
  probe), under the name ``"trace_segments|<own>"`` (transformers' ``"paged|sdpa"`` convention): nothing is
  flipped around a forward, so a model is safe to use from several threads, and a forward without spans (the
  rollout engine's, the padded update's, the dense-mask update's, a compiled one) is the model's own forward.

On the `multistep` warm start (examples of 150-450 tokens, batches of 8) the padding-free row is 0.64 of the padded
batch's attention pairs and 0.79 of its tokens (docs/notebook/benchmarks_history.md, "The warm start without padding").

The model must be a Hugging Face causal LM that looks its attention function up by ``config._attn_implementation``
and passes the forward's extra keyword arguments on to it (transformers' Llama/Qwen2/Qwen3 and most decoder
models); `segment_support_issue` checks a model on a probe.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.policy.packing import PackedRow

SEGMENT_ATTENTION = "trace_segments"
"""The prefix of the attention implementation `install_segment_attention` gives a model: ``"trace_segments|sdpa"``
or ``"trace_segments|eager"``, `segment_attention` falling through to the named one."""

OWN_ATTENTION = ("sdpa", "eager")
"""Attention implementations `segment_attention` can fall through to (their masks and functions are transformers')."""

# the keyword argument that carries a forward's compiled spans (`Chain`s) to the attention function
_SPANS = "segment_spans"

Chain = tuple[int, int, Any, Any]
"""(start, end, ancestors, mask) of one segment, compiled for the kernel: queries start..end-1 attend to the keys
at row positions ``ancestors`` (a LongTensor, root first; None for a segment without ancestors), then, causally,
to their own; ``mask`` (bool (end - start, A + end - start), None without ancestors) says which key each sees."""


@dataclass(frozen=True)
class TreeSpans:
    """A packed trie (or independent sequences) in flash-attention's varlen layout (module docstring).

    Attributes:
        kv_index: int64 (K,) row positions of every segment's keys (its path: ancestors root first, then its own
            tokens), the segments' paths laid end to end (a numpy array or a LongTensor).
        cu_seqlens_q: (S + 1,) segment boundaries in the row's tokens, increasing from 0.
        cu_seqlens_k: (S + 1,) path boundaries in ``kv_index``; a path is at least as long as its segment.
    """

    kv_index: Any
    cu_seqlens_q: Sequence[int]
    cu_seqlens_k: Sequence[int]

    @classmethod
    def of_rows(cls, rows: Sequence[PackedRow]) -> TreeSpans:
        """The tries ``rows`` laid end to end: each chain of a row a segment, its path the chain's ancestors then
        itself (positions offset by the rows before it)."""
        kv: list[npt.NDArray[np.int64]] = []
        cu_q, cu_k = [0], [0]
        offset = 0
        for row in rows:
            for start, end, ancestors in row.segments:
                kv.append(np.concatenate([ancestors + offset, np.arange(offset + start, offset + end)]))
                cu_q.append(offset + end)
                cu_k.append(cu_k[-1] + ancestors.size + end - start)
            offset += row.size
        return cls(np.concatenate(kv).astype(np.int64), cu_q, cu_k)

    @classmethod
    def of_lengths(cls, lengths: Sequence[int]) -> TreeSpans:
        """Independent sequences of ``lengths`` laid end to end: each its own segment, without ancestors."""
        cuts = [0, *(int(c) for c in np.cumsum(lengths))]
        return cls(np.arange(cuts[-1], dtype=np.int64), cuts, cuts)

    def chains(self, device: Any) -> list[Chain]:
        """The segments compiled for `tree_attention`: index tensors and masks on ``device``, built once per
        forward rather than once per layer.

        Raises:
            ValueError: a path shorter than its segment, or one that does not end with the segment's own tokens.
        """
        import torch

        def ints(x: Any) -> list[int]:
            return [int(v) for v in (x.tolist() if hasattr(x, "tolist") else x)]

        cu_q, cu_k = ints(self.cu_seqlens_q), ints(self.cu_seqlens_k)
        kv = np.asarray(
            self.kv_index.cpu() if hasattr(self.kv_index, "cpu") else self.kv_index, dtype=np.int64
        )
        out: list[Chain] = []
        for s in range(len(cu_q) - 1):
            q0, q1, k0, k1 = cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]
            lq, lk = q1 - q0, k1 - k0
            if lq < 0 or lk < lq:
                raise ValueError(f"segment {s}: {lq} queries over a path of {lk} keys")
            if lq == 0:
                continue
            if kv[k1 - 1] != q1 - 1 or kv[k1 - lq] != q0 or np.any(np.diff(kv[k1 - lq : k1]) != 1):
                raise ValueError(f"segment {s}: its path does not end with its own tokens")
            if lk == lq:
                out.append((q0, q1, None, None))
                continue
            mask = torch.ones((lq, lk), dtype=torch.bool, device=device)
            mask[:, lk - lq :] = torch.ones((lq, lq), dtype=torch.bool, device=device).tril()
            out.append((q0, q1, torch.as_tensor(kv[k0 : k1 - lq], device=device), mask))
        return out


def tree_attention(
    query: Any, key: Any, value: Any, chains: Sequence[Chain], scaling: float | None, p: float
) -> Any:
    """The one trie-attention kernel: each segment's queries attend to its path's keys (`TreeSpans`).

    Args:
        query: (1, Hq, T, D); key, value: (1, Hkv, T, D), Hq a multiple of Hkv (grouped-query attention).
        chains: the row's segments, `TreeSpans.chains`; a row position in no segment gets a zero output.
        scaling: softmax scale (default D ** -0.5); p: dropout probability.

    Returns:
        attention output (1, T, Hq, D).
    """
    import torch
    import torch.nn.functional as F

    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    out = []
    done = 0
    for start, end, ancestors, mask in chains:
        if start < done:
            raise ValueError("tree_attention needs its segments in row order, without overlap")
        if start > done:
            out.append(query.new_zeros((1, query.shape[1], start - done, value.shape[-1])))
        done = end
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
    if done < query.shape[2]:
        out.append(query.new_zeros((1, query.shape[1], query.shape[2] - done, value.shape[-1])))
    return torch.cat(out, dim=2).transpose(1, 2).contiguous()


def segment_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """The attention function `install_segment_attention` installs (the ``AttentionInterface`` signature).

    With ``segment_spans`` (a forward of `segment_forward` or `tree_forward`): `tree_attention` over them, the
    mask ignored (the spans are the mask). Without: the model's own attention (the implementation after the
    ``|`` of ``module.config._attn_implementation``), called with exactly what it was given.

    Returns:
        (attention output (1, T, Hq, D), None) with spans; the own attention's result without.

    Raises:
        ValueError: spans on a sliding-window layer (its window is not applied here).
    """
    chains: list[Chain] | None = kwargs.pop(_SPANS, None)
    if chains is None:
        own = _own_attention(module)
        return own(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)  # type: ignore[no-any-return]
    if kwargs.get("sliding_window") is not None:
        raise ValueError(f"{SEGMENT_ATTENTION} attention does not apply a sliding window")
    p = dropout if getattr(module, "training", False) else 0.0
    return tree_attention(query, key, value, chains, scaling, p), None


def _own_attention(module: Any) -> Any:
    """The attention function a model installed with `install_segment_attention` had: transformers' sdpa, or the
    eager function of the module's own modeling file."""
    name = str(module.config._attn_implementation).rpartition("|")[2]
    if name == "eager":
        return sys.modules[type(module).__module__].eager_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS[name]


_REGISTERED = threading.Lock()
_registered = False


def _register() -> None:
    """Register `segment_attention` under ``"trace_segments|<own>"`` for each own implementation, with the own
    implementation's mask function (so a forward without spans gets the model's own mask); once per process."""
    global _registered
    with _REGISTERED:
        if _registered:
            return
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

        for own in OWN_ATTENTION:
            AttentionInterface.register(f"{SEGMENT_ATTENTION}|{own}", segment_attention)
            AttentionMaskInterface.register(f"{SEGMENT_ATTENTION}|{own}", ALL_MASK_ATTENTION_FUNCTIONS[own])
        _registered = True


def install_segment_attention(model: Any) -> str:
    """Make `segment_attention` ``model``'s attention implementation, falling through to the one it has; once per
    model (a no-op when installed). A compiled wrapper shares its model's config.

    Returns:
        "" when installed, else why not (no Hugging Face attention implementation, or one that is neither of
        `OWN_ATTENTION`).
    """
    config = getattr(model, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    if isinstance(impl, str) and impl.startswith(SEGMENT_ATTENTION + "|"):
        return ""
    if impl is None or config is None:
        return "it has no Hugging Face attention implementation to replace"
    if impl not in OWN_ATTENTION:
        return f"its attention implementation {impl!r} is not one of {', '.join(OWN_ATTENTION)}"
    _register()
    config._attn_implementation = f"{SEGMENT_ATTENTION}|{impl}"
    return ""


def segment_forward(
    model: Any, sequences: Sequence[npt.NDArray[np.int64]]
) -> tuple[Any, npt.NDArray[np.int64]]:
    """Logits of ``model`` on ``sequences`` as one padding-free row, each attending to its own tokens only.

    Args:
        model: a Hugging Face causal LM (or a ``torch.compile`` wrapper of one), see the module docstring.
        sequences: K int64 token-id arrays of lengths L_k >= 1.

    Returns:
        (logits (T, V), T = sum of L_k; starts int64 (K,)): sequence k's token j has the logits at
        ``starts[k] + j``.

    Raises:
        ValueError: no sequence, or an empty one; a model that cannot take `segment_attention`.
    """
    if not sequences or any(s.size == 0 for s in sequences):
        raise ValueError("segment_forward needs at least one sequence and no empty one")
    lengths = [s.size for s in sequences]
    positions = np.concatenate([np.arange(n) for n in lengths])
    spans = TreeSpans.of_lengths(lengths)
    return _row_logits(model, np.concatenate(sequences), positions, spans), _starts(lengths)


def tree_forward(model: Any, rows: Sequence[PackedRow]) -> tuple[Any, npt.NDArray[np.int64]]:
    """Logits of ``model`` on packed trie rows (`trace_rl.policy.packing.pack_sequences`) laid end to end as one
    padding-free row: each chain of a row attends to its ancestors and, causally, to itself
    (`tree_attention`), so each token's logits equal `trace_rl.policy.packing.packed_forward`'s (the dense
    ancestry mask) up to rounding, without padding the rows to the longest and without the (N, N) attention of
    each row: a token's attention costs its ancestry, not its row.

    Returns:
        (logits (N, V), N = the rows' tokens; offsets int64 (R,)): row r's packed position j has the logits at
        ``offsets[r] + j``.

    Raises:
        ValueError: no rows, or an empty row; a model that cannot take `segment_attention`.
    """
    if not rows or any(r.size == 0 for r in rows):
        raise ValueError("tree_forward needs at least one row and no empty row")
    ids = np.concatenate([r.token_ids for r in rows])
    positions = np.concatenate([r.position_ids for r in rows])
    return _row_logits(model, ids, positions, TreeSpans.of_rows(rows)), _starts([r.size for r in rows])


def _starts(lengths: Sequence[int]) -> npt.NDArray[np.int64]:
    """Where each of some stretches laid end to end starts: int64 (K,)."""
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)


def _row_logits(
    model: Any, ids: npt.NDArray[np.int64], positions: npt.NDArray[np.int64], spans: TreeSpans
) -> Any:
    """Logits (T, V) of ``model`` on one row of token ids (T,) at ``positions`` (T,), its attention
    `segment_attention` over ``spans``. A placeholder 4D mask stands for the spans: transformers takes a 4D mask as
    prepared, so it builds no (T, T) mask that nothing would read."""
    import torch

    if reason := install_segment_attention(model):
        raise ValueError(f"a padding-free forward needs {SEGMENT_ATTENTION} attention: {reason}")
    device = next(model.parameters()).device
    ids_t = torch.as_tensor(ids, device=device)[None]
    pos_t = torch.as_tensor(positions, device=device)[None]
    placeholder = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)
    return model(
        input_ids=ids_t, position_ids=pos_t, attention_mask=placeholder, **{_SPANS: spans.chains(device)}
    ).logits[0]


def segment_support_issue(model: Any) -> str:
    """Why ``model`` cannot run `segment_forward`, or "" when it can (installing `segment_attention` first, see
    `install_segment_attention`): on a probe of two short sequences, the
    log-probabilities of the padding-free row must equal each sequence's own forward within the dtype's tolerance
    (`trace_rl.policy.packing.PROBE_TOLERANCE`); a model that ignores the attention function or the position ids,
    or raises, shows."""
    import torch

    from trace_rl.policy.packing import PROBE_TOLERANCE

    if reason := install_segment_attention(model):
        return reason
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
