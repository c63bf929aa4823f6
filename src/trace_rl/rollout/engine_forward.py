"""The local engine's batched forward pass over its row-wise KV cache: run token ids at per-row positions, store
their keys/values in the cache, return the next-token logits.

Written against the Llama/Qwen2/Qwen3 module layout of transformers (embed, RMSNorm, q/k/v/o projections with
optional q/k norms, rotary embedding, gated MLP), reusing the model's own modules and weights;
`tests/unit/test_engine.py` checks the logits against the model's own forward. The cache is one
`(rows, kv_heads, positions, head_dim)` tensor per layer for keys and one for values (`LocalEngine` owns it).

- `forward_rows` (issue 38) computes only the rows it is given (a decode step: the active ones) and reads the
  cache in place, per span of nearby rows up to that span's longest row (`cache_spans`). On a CPU a decode
  step is bound by memory traffic: the weights (once per step) and every active row's cached keys and values
  (docs/benchmarks.md). `forward_groups` runs several such groups with different query lengths (a decode
  step and the prefill of returning episodes' observations) in one pass of the weights.
- `forward_reference` is the original forward (`LocalEngine(fast_decode=False)`), kept as the reference the
  fast one is tested against.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

SPAN_POSITIONS = 192
"""What one more attention span costs a forward, in cache positions read (`span_cuts`): on the 2-core CPU with
the tiny policy a decode step's extra span costs about 0.11 ms and a cached position of one row about 0.6 us
(docs/notebook/benchmarks_history.md, "Prefill grouped by length, decode spans by cost")."""
_RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm")

# (lo, hi, a, b, total, local, mask): see `cache_spans`
Span = tuple[int, int, int, int, int, torch.Tensor | None, torch.Tensor | None]


@torch.inference_mode()
def forward_reference(
    model: Any,
    k_cache: list[torch.Tensor],
    v_cache: list[torch.Tensor],
    rows: slice | np.ndarray,
    ids: torch.Tensor,
    start: torch.Tensor,
    write: np.ndarray | None = None,
    last: np.ndarray | None = None,
) -> torch.Tensor:
    """Run ids (R, L) at positions start[r] + (0..L-1) over cache rows `rows`; return logits (R, V) float32.

    rows: a slice of the cache (decode: every row in it is computed, attention reads the cache in place)
        or an index array (prefill: the rows' keys/values are gathered).
    write: cache rows whose new keys/values are stored (default all of `rows`); with a slice, rows outside
        `write` are computed and ignored.
    last: per row, the index in 0..L-1 whose logits are returned (default L-1; right-padded prefill).
    """
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    m = model.model
    head_dim = k_cache[0].shape[-1]
    n_rows, length = ids.shape
    dev = ids.device
    pos = start[:, None] + torch.arange(length, device=dev)[None, :]  # (R, L)
    total = int((start + length).max())
    mask = torch.arange(total, device=dev)[None, None, None, :] <= pos[:, None, :, None]  # (R, 1, L, T)
    if isinstance(rows, slice):
        lo = rows.start or 0
        local = torch.arange(n_rows, device=dev) if write is None else torch.as_tensor(write - lo, device=dev)
        target = local + lo
    else:
        local = torch.arange(n_rows, device=dev)
        target = torch.as_tensor(rows, device=dev)
    x = m.embed_tokens(ids)
    cos, sin = m.rotary_emb(x, pos)
    for layer, kc, vc in zip(m.layers, k_cache, v_cache, strict=True):
        attn = layer.self_attn
        h = layer.input_layernorm(x)
        shape = (n_rows, length, -1, head_dim)
        q = attn.q_proj(h).view(shape)
        k = attn.k_proj(h).view(shape)
        v = attn.v_proj(h).view(shape)
        if hasattr(attn, "q_norm"):
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        kc[target[:, None], :, pos[local]] = k.transpose(1, 2)[local]
        vc[target[:, None], :, pos[local]] = v[local]
        if isinstance(rows, slice):
            keys, values = kc[rows, :, :total], vc[rows, :, :total]  # views
        else:
            keys, values = kc[target, :, :total], vc[target, :, :total]  # gathered copies
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, scale=attn.scaling, enable_gqa=True
        )
        x = x + attn.o_proj(out.transpose(1, 2).reshape(n_rows, length, -1))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    pick = (
        torch.full((n_rows,), length - 1, device=dev) if last is None else torch.as_tensor(last, device=dev)
    )
    logits: torch.Tensor = model.lm_head(m.norm(x[torch.arange(n_rows, device=dev), pick]))
    return logits.float()


Group = tuple[np.ndarray, torch.Tensor, np.ndarray, list[Span], np.ndarray | None]
"""One group of `forward_groups`: (rows, ids (R, L), start (R,), spans, last): the arguments of `forward_rows`."""


@torch.inference_mode()
def forward_rows(
    model: Any,
    k_cache: list[torch.Tensor],
    v_cache: list[torch.Tensor],
    rows: np.ndarray,
    ids: torch.Tensor,
    start: np.ndarray,
    spans: list[Span],
    last: np.ndarray | None = None,
) -> torch.Tensor:
    """Run ids (R, L) at positions start[r] + (0..L-1) of cache rows `rows` (distinct, ascending); store
    their keys/values and return logits (R, V) float32 at index last[r] of each row (default L-1).

    `spans` is `cache_spans(rows, start, L, device)`. Same arithmetic as `forward_reference`, but only the given
    rows are computed and attention reads the cache in place: per span of nearby rows, a view up to that span's
    longest row (no gathered copy of the rows, no padding to the longest row of the batch). Decode (L = 1)
    attends with two batched products over the G query heads of each key/value head (no key/value repeat;
    float32); prefill (L > 1) and other dtypes with scaled_dot_product_attention on the views.
    """
    return forward_groups(model, k_cache, v_cache, [(rows, ids, start, spans, last)])


@torch.inference_mode()
def forward_groups(
    model: Any, k_cache: list[torch.Tensor], v_cache: list[torch.Tensor], groups: list[Group]
) -> torch.Tensor:
    """`forward_rows` of several groups in one pass of the weights: logits (sum of R, V) float32, group by group.

    Each group is (rows, ids (R, L), start, spans, last) as `forward_rows` takes them, with its own query length
    L (a decode step's active rows with L = 1 next to the prefill of returning episodes' observations, issue
    38): the projections, norms and MLP run once over the tokens of every group (the weights are read once per
    forward, not once per group); keys/values are stored and attention reads the cache per group, exactly as
    `forward_rows` does for that group alone. No cache row may appear in two groups.
    """
    m = model.model
    dev = k_cache[0].device
    hd = k_cache[0].shape[3]
    # per group: (token offset, rows, L, spans, keys each row must not see: the decode path's masks, or None)
    parts: list[tuple[int, int, int, list[Span], dict[int, torch.Tensor] | None]] = []
    cache_rows, positions, picks = [], [], []
    offset = 0
    for rows, ids, start, spans, last in groups:
        n, length = ids.shape
        # decode in float32: two batched products per span (lower precisions go through SDPA, whose softmax
        # accumulates in float32)
        manual = length == 1 and k_cache[0].dtype == torch.float32
        hidden = {sp[0]: ~sp[6] for sp in spans if sp[6] is not None} if manual else None
        parts.append((offset, n, length, spans, hidden))
        cache_rows.append(np.repeat(rows, length))
        positions.append((start[:, None] + np.arange(length)[None, :]).reshape(-1))
        picks.append(offset + np.arange(n) * length + (length - 1 if last is None else last))
        offset += n * length
    tokens = offset
    flat = torch.cat([g[1].reshape(-1) for g in groups]) if len(groups) > 1 else groups[0][1].reshape(-1)
    rows_t = torch.from_numpy(np.concatenate(cache_rows)).to(dev)
    pos = torch.from_numpy(np.concatenate(positions)).to(dev)
    x = m.embed_tokens(flat)[None]  # (1, N, H): every token of every group
    cos, sin = m.rotary_emb(x, pos[None])  # (1, N, D)
    cos, sin = cos[0, :, None], sin[0, :, None]  # (N, 1, D)
    for layer, kc, vc in zip(m.layers, k_cache, v_cache, strict=True):
        attn = layer.self_attn
        h = rms_norm(layer.input_layernorm, x)
        q = attn.q_proj(h).view(tokens, -1, hd)  # (N, heads, D)
        k = attn.k_proj(h).view(tokens, -1, hd)
        v = attn.v_proj(h).view(tokens, -1, hd)
        if hasattr(attn, "q_norm"):
            q, k = rms_norm(attn.q_norm, q), rms_norm(attn.k_norm, k)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        kc[rows_t, :, pos] = k
        vc[rows_t, :, pos] = v
        outs = [
            _attend(
                q[off : off + n * length].view(n, length, -1, hd).transpose(1, 2), kc, vc, spans, hidden, attn
            )
            for off, n, length, spans, hidden in parts
        ]
        out = outs[0] if len(outs) == 1 else torch.cat(outs)
        x = x + attn.o_proj(out[None])
        x = x + layer.mlp(rms_norm(layer.post_attention_layernorm, x))
    last_tokens = x[0, torch.from_numpy(np.concatenate(picks)).to(dev)]
    logits: torch.Tensor = model.lm_head(rms_norm(m.norm, last_tokens))
    return logits.float()


def _attend(
    q: torch.Tensor,
    kc: torch.Tensor,
    vc: torch.Tensor,
    spans: list[Span],
    hidden: dict[int, torch.Tensor] | None,
    attn: Any,
) -> torch.Tensor:
    """Attention of one group's queries q (R, heads, L, D) over one layer's cache, span by span: (R * L, heads * D).

    ``hidden`` selects the decode path (L = 1, float32: two batched products per span) and holds the keys each
    row of a masked span must not see, keyed by the span's first row; None sends the spans through SDPA with
    their masks."""
    n, _, length, hd = q.shape
    n_kv = kc.shape[1]
    outs = []
    for lo, hi, a, b, total, local, mask in spans:
        qs = q[a:b]
        if local is not None:  # idle rows inside the span get zero queries; their output is dropped
            qs = q.new_zeros(hi - lo, *q.shape[1:])
            qs[local] = q[a:b]
        keys, values = kc[lo:hi, :, :total], vc[lo:hi, :, :total]  # views
        if hidden is not None:
            qs = (qs * attn.scaling).reshape(hi - lo, n_kv, -1, hd)  # (rows, KV, G, D)
            scores = torch.matmul(qs, keys.transpose(-1, -2))  # (rows, KV, G, T)
            if mask is not None:
                scores.masked_fill_(hidden[lo], float("-inf"))
            o = torch.matmul(scores.softmax(-1), values).reshape(hi - lo, 1, -1)
        else:
            o = F.scaled_dot_product_attention(
                qs, keys, values, attn_mask=mask, scale=attn.scaling, enable_gqa=True
            )
            o = o.transpose(1, 2).reshape(hi - lo, length, -1)  # (rows, L, Hq * D)
        outs.append(o if local is None else o[local])
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out.reshape(n * length, -1)


def cache_spans(
    rows: np.ndarray,
    start: np.ndarray,
    length: int,
    device: torch.device,
    span_positions: int = SPAN_POSITIONS,
) -> list[Span]:
    """Split the ascending cache rows of a forward into spans that attention reads as one view each.

    Where spans start is `span_cuts` (an idle row or a short row inside a span is read up to the span's
    longest row; one more span costs a few operations per layer: ``span_positions`` positions of one query,
    so ``span_positions // length`` for ``length`` queries per row). Returns per span (lo, hi, a, b, total,
    local, mask): cache rows lo..hi-1, of which rows[a:b] are computed; total = 1 + the span's last position
    (keys read); local = the computed rows' offsets in the span (None when there is no idle row); mask =
    bool (rows, 1, L, total), True where a query may attend (causal from each row's start; None for decode
    when all rows end at the same position). Idle rows see every key. Tensors are on `device`.
    """
    # a span's fixed cost is the same for any query length, each position read costs `length` times more
    cuts = span_cuts(rows.tolist(), (start + length).tolist(), max(1, span_positions // length))
    bounds = [0, *cuts, rows.size]
    spans: list[Span] = []
    for a, b in itertools.pairwise(bounds):
        lo, hi = int(rows[a]), int(rows[b - 1]) + 1
        total = int(start[a:b].max()) + length
        dense = hi - lo == b - a
        local = None if dense else torch.from_numpy(rows[a:b] - lo).to(device)
        mask = None
        if length > 1 or not (dense and bool((start[a:b] == total - 1).all())):
            first = np.full(hi - lo, total - length, np.int64)  # idle rows: every key visible
            first[rows[a:b] - lo] = start[a:b]
            qpos = first[:, None] + np.arange(length)[None, :]  # (rows, L)
            see = np.arange(total)[None, None, :] <= qpos[:, :, None]  # (rows, L, T)
            mask = torch.from_numpy(see[:, None]).to(device)
        spans.append((lo, hi, a, b, total, local, mask))
    return spans


def span_cuts(rows: list[int], ends: list[int], span_positions: int) -> list[int]:
    """Where the attention spans of a forward start: indices into ``rows`` (ascending cache rows, row i
    attending to ``ends[i]`` cached positions), excluding 0.

    A span reads every cache row from its first to its last row (idle rows in between included) up to its
    longest row, so it costs (rows in it) x (its longest end) positions, plus ``span_positions`` for being one
    more span. Greedy, left to right: a row joins the open span unless a new span costs less than what joining
    adds (the idle rows before it, and raising the span's longest end for every row already in it).
    """
    cuts: list[int] = []
    lo, longest = rows[0], ends[0]
    for i in range(1, len(rows)):
        row, end = rows[i], ends[i]
        widest = max(longest, end)
        added = (row + 1 - lo) * widest - (rows[i - 1] + 1 - lo) * longest
        if added > end + span_positions:
            cuts.append(i)
            lo, longest = row, end
        else:
            longest = widest
    return cuts


def rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """norm(x) for the RMSNorm of llama/qwen2/qwen3 (weight * x / sqrt(mean(x^2) + eps)) in one fused op
    (`F.rms_norm`, the same values for float32 inputs); any other module is called as it is."""
    eps = getattr(norm, "variance_epsilon", None)
    weight = getattr(norm, "weight", None)
    if (
        x.dtype != torch.float32
        or eps is None
        or not isinstance(weight, torch.Tensor)
        or type(norm).__name__ not in _RMS_NORMS
    ):
        out: torch.Tensor = norm(x)
        return out
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(-x2, x1) of the halves of the last dim, as transformers' rotate_half."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)
