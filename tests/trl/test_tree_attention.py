"""The CPU tree attention computes what TRL's FA3 kernel computes: log-probabilities of samples packed into TRL's
prefix trie equal those of separate plain forwards of each sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from trl.experimental.async_grpo.packing import TREE_ATTENTION, TreeRow

from trace_rl.integrations.trl.cpu import register_sdpa_tree_attention, sdpa_tree_attention
from trace_rl.policy.models import tiny_config


def _sample(ids: list[int], trained_from: int) -> dict[str, object]:
    mask = np.zeros(len(ids), np.int64)
    mask[trained_from:] = 1
    return {
        "input_ids": np.asarray(ids, np.int64),
        "completion_mask": mask,
        "old_log_probs": np.zeros(len(ids), np.float32),
        "advantage": 1.0,
        "group_id": 0,
    }


def test_packed_log_probs_equal_separate_forwards() -> None:
    from transformers import Qwen3ForCausalLM

    register_sdpa_tree_attention()
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_config(64)).eval()  # 4 query heads over 2 key/value heads (grouped)
    rng = np.random.default_rng(0)
    prefix = rng.integers(1, 64, 7).tolist()
    samples = [
        _sample(prefix + rng.integers(1, 64, 5).tolist(), 7),  # a tree: three branches of one prefix
        _sample(prefix + rng.integers(1, 64, 3).tolist(), 5),
        _sample(prefix[:4] + rng.integers(1, 64, 6).tolist(), 4),
        _sample(rng.integers(1, 64, 9).tolist(), 2),  # and an unrelated sequence in the same row
    ]
    row = TreeRow()
    for s in samples:
        row.add(s)
    packed = row.pack()
    assert packed["input_ids"].numel() < sum(len(s["input_ids"]) for s in samples)  # the prefix is shared

    model.config._attn_implementation = TREE_ATTENTION
    with torch.no_grad():
        logits = model(
            input_ids=packed["input_ids"][None],
            position_ids=packed["position_ids"][None],
            tree_kv_index=packed["tree_kv_index"],
            tree_cu_seqlens_q=packed["tree_cu_seqlens_q"],
            tree_cu_seqlens_k=packed["tree_cu_seqlens_k"],
            tree_max_seqlen_q=int(packed["tree_max_seqlens"][0]),
            tree_max_seqlen_k=int(packed["tree_max_seqlens"][1]),
        ).logits[0]
    packed_lp = torch.log_softmax(logits.float(), -1)[
        packed["token_index"], packed["shift_labels"][packed["token_index"]]
    ]

    model.config._attn_implementation = "eager"
    expected = []
    with torch.no_grad():
        for s in samples:
            ids = torch.as_tensor(s["input_ids"])
            lp = torch.log_softmax(model(input_ids=ids[None]).logits[0].float(), -1)
            for p in np.flatnonzero(s["completion_mask"]):
                if p >= 1:
                    expected.append(lp[p - 1, ids[p]])
    expected_t = torch.stack(expected)
    order = torch.argsort(packed["segment_id"], stable=True)  # pack() lists terms sample by sample already
    assert torch.equal(order, torch.arange(order.numel()))
    assert packed_lp.shape == expected_t.shape
    assert torch.max(torch.abs(packed_lp - expected_t)).item() < 1e-5


def test_refuses_what_it_does_not_implement() -> None:
    q = torch.zeros(1, 2, 3, 4)
    args = dict(
        tree_kv_index=torch.arange(3),
        tree_cu_seqlens_q=torch.tensor([0, 3], dtype=torch.int32),
        tree_cu_seqlens_k=torch.tensor([0, 3], dtype=torch.int32),
    )
    with pytest.raises(NotImplementedError):
        sdpa_tree_attention(None, q, q, q, None, sliding_window=2, **args)
