"""Packing token sequences into rows for one causal-LM forward: each distinct prefix computed once.

Several token sequences go through the model as one row that holds their trie (`pack_sequences`): every distinct
prefix once, a token attending to itself and its ancestors only (a 4D additive mask) at its depth in the trie as
position id. Each token's hidden state is then exactly the one it has in every unpacked sequence through it (the
same tokens at the same positions under causal attention), so a sequence's logits are read at its own tokens'
packed positions. The policy update packs the paths of a rollout tree (`trace_rl.train.packing`), whose shared
prefixes are long; the SFT warm start's examples, which share little, go through `trace_rl.policy.segments`
instead (one row without padding, attention within each example only, so no square of the whole row).

The trie is derived from the token ids (sorted sequences, each sharing with its predecessor their longest common
prefix, which in lexicographic order is the longest it shares with any earlier one), so two sequences share a
computed token exactly when their whole prefixes up to it are equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

MASK_ATTENTION = ("eager", "sdpa")
"""Hugging Face attention implementations that apply a given 4D additive mask as is (also under
`trace_rl.policy.segments`' ``"trace_segments|sdpa"``, which falls through to sdpa without spans)."""

PROBE_TOLERANCE = {"float64": 1e-8, "float32": 1e-4}
"""Max |packed - unpacked| log-probability on `packing_support_issue`'s probe, by dtype; 5e-2 for others."""


@dataclass(frozen=True)
class PackedRow:
    """The trie of some token sequences, laid out as one row.

    Attributes:
        token_ids: int64 (N,) the trie's tokens, each distinct prefix once; a token follows all its ancestors.
        position_ids: int64 (N,) each token's depth in the trie (its position in every sequence through it).
        index: per sequence (in the order given), int64 (L_i,): the packed positions of its L_i tokens.
        segments: (start, end, ancestors) per run of new tokens: tokens start..end-1 are a chain appended under
            the tokens at packed positions ``ancestors`` (int64, root first).
    """

    token_ids: npt.NDArray[np.int64]
    position_ids: npt.NDArray[np.int64]
    index: list[npt.NDArray[np.int64]]
    segments: list[tuple[int, int, npt.NDArray[np.int64]]]

    @property
    def size(self) -> int:
        """Tokens N of the row."""
        return int(self.token_ids.shape[0])

    def allowed(self, width: int | None = None) -> npt.NDArray[np.bool_]:
        """bool (W, W), W = ``width`` (default N): [i, j] is True when token i may attend to token j (j is i or
        one of its ancestors); a padding position (i >= N) attends to itself only, so no row is fully masked.

        Raises:
            ValueError: ``width`` below N.
        """
        n = self.size
        w = n if width is None else width
        if w < n:
            raise ValueError(f"width {w} is below the row's {n} tokens")
        out = np.zeros((w, w), dtype=bool)
        for start, end, ancestors in self.segments:
            out[start:end, ancestors] = True
            out[start:end, start:end] = np.tri(end - start, dtype=bool)
        pad = np.arange(n, w)
        out[pad, pad] = True
        return out


def pack_sequences(sequences: Sequence[npt.ArrayLike]) -> PackedRow:
    """The trie of ``sequences`` (int token ids each) as one `PackedRow`.

    Sequences are inserted in lexicographic order; each shares with its predecessor their longest common prefix
    and appends its remaining tokens as one new chain (a sequence equal to, or a prefix of, an earlier one adds
    none). N is therefore the number of distinct non-empty prefixes.
    """
    seqs = [np.asarray(s, dtype=np.int64).reshape(-1) for s in sequences]
    order = sorted(range(len(seqs)), key=lambda i: seqs[i].tolist())
    tokens: list[npt.NDArray[np.int64]] = []
    positions: list[npt.NDArray[np.int64]] = []
    index: list[npt.NDArray[np.int64]] = [np.zeros(0, np.int64)] * len(seqs)
    segments: list[tuple[int, int, npt.NDArray[np.int64]]] = []
    size = 0
    prev = np.zeros(0, np.int64)
    prev_index = np.zeros(0, np.int64)
    for i in order:
        seq = seqs[i]
        shared = shared_prefix(seq, prev)
        new = seq.shape[0] - shared
        if new > 0:
            segments.append((size, size + new, prev_index[:shared].copy()))
            tokens.append(seq[shared:])
            positions.append(np.arange(shared, seq.shape[0], dtype=np.int64))
        index[i] = np.concatenate([prev_index[:shared], np.arange(size, size + new, dtype=np.int64)])
        size += new
        prev, prev_index = seq, index[i]
    return PackedRow(
        token_ids=np.concatenate(tokens) if tokens else np.zeros(0, np.int64),
        position_ids=np.concatenate(positions) if positions else np.zeros(0, np.int64),
        index=index,
        segments=segments,
    )


def shared_prefix(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> int:
    """Length of the longest common prefix of two int token-id arrays."""
    m = min(a.shape[0], b.shape[0])
    differ = np.flatnonzero(a[:m] != b[:m])
    return int(differ[0]) if differ.size else m


def packed_forward(model: Any, packed: Sequence[PackedRow], pad_id: int) -> Any:
    """Logits (R, W, V) of ``model`` on R packed rows, each padded to the longest W with ``pad_id`` (a padding
    position attends to itself only); row r's token at packed position j has the logits at [r, j].

    ``model`` must take ``input_ids``, ``position_ids`` and a 4D additive ``attention_mask`` (R, 1, W, W) and apply
    the mask as given (Hugging Face ``eager`` or ``sdpa`` attention; `trace_rl.train.packing.tree_mask_support`
    checks a model).

    Raises:
        ValueError: no rows, or a row without tokens.
    """
    import torch

    if not packed or any(p.size == 0 for p in packed):
        raise ValueError("packed_forward needs at least one row and no empty row")
    width = max(p.size for p in packed)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    ids = np.full((len(packed), width), pad_id, dtype=np.int64)
    pos = np.zeros((len(packed), width), dtype=np.int64)
    allowed = np.zeros((len(packed), 1, width, width), dtype=bool)
    for r, p in enumerate(packed):
        ids[r, : p.size] = p.token_ids
        pos[r, : p.size] = p.position_ids
        allowed[r, 0] = p.allowed(width)
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~torch.as_tensor(allowed), torch.finfo(dtype).min)
    return model(
        input_ids=torch.as_tensor(ids, device=device),
        attention_mask=mask.to(device),
        position_ids=torch.as_tensor(pos, device=device),
    ).logits


def packing_support_issue(model: Any) -> str:
    """Why ``model`` cannot run packed rows, or "" when it can: its attention must apply a given 4D additive mask
    (Hugging Face ``eager`` or ``sdpa`` attention), and on a probe of two short sequences that share a prefix,
    packed and unpacked log-probabilities must agree within `PROBE_TOLERANCE` of its dtype. The probe's second
    branch sits after the first in the packed row, so a model that ignores the mask (or the position ids) shows.
    """
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if isinstance(impl, str):  # "trace_segments|sdpa" (`trace_rl.policy.segments`) applies sdpa's mask
        impl = impl.rpartition("|")[2]
    if impl not in MASK_ATTENTION:
        return f"its attention implementation {impl!r} does not take a custom 4D mask"
    try:
        err = _probe_error(model)
    except (TypeError, ValueError, RuntimeError) as exc:
        return f"the packed forward failed on a probe ({type(exc).__name__}: {exc})"
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    if not err <= PROBE_TOLERANCE.get(dtype, 5e-2):
        return f"packed and padded log-probabilities differ by {err:.2e} on a probe"
    return ""


def _probe_error(model: Any) -> float:
    """Max |packed - unpacked| log-probability over the tokens of two sequences that share 5 tokens and then
    differ for 3 and 2 tokens, in eval mode (no dropout; the model's mode is restored)."""
    import torch

    vocab = int(model.get_input_embeddings().weight.shape[0])
    ids = np.random.default_rng(0).integers(0, vocab, 10)
    ids[8] = ids[5] + 1 if ids[8] == ids[5] else ids[8]  # the branches differ at their sixth token
    ids %= vocab
    seqs = [ids[:8], np.r_[ids[:5], ids[8:10]]]
    training = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.no_grad():
            row = pack_sequences(seqs)
            packed = torch.log_softmax(packed_forward(model, [row], 0)[0].double(), -1)
            err = 0.0
            device = next(model.parameters()).device
            for k, seq in enumerate(seqs):
                alone = model(input_ids=torch.as_tensor(seq[None], device=device)).logits[0]
                diff = packed[torch.as_tensor(row.index[k], device=device)] - torch.log_softmax(
                    alone.double(), -1
                )
                err = max(err, float(diff.abs().max()))
    finally:
        model.train(training)
    return err
