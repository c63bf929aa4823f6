"""One trie-attention kernel, installed once (issue 60 item 4): `trace_rl.policy.segments.segment_attention` is a
model's attention implementation from load on, a forward without spans is the model's own forward, the TRL
adapter's trie layout runs through the same kernel, and each model has one log-prob strategy."""

from __future__ import annotations

import copy
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trace_rl.policy import segments  # noqa: E402
from trace_rl.policy.logprobs import STRATEGIES, at_most, logprob_strategy  # noqa: E402
from trace_rl.policy.packing import pack_sequences  # noqa: E402


def _padded_batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(0)
    ids = torch.as_tensor(rng.integers(3, vocab, (3, 11)))
    att = torch.ones_like(ids)
    att[1, :4] = 0  # left padding
    att[2, 8:] = 0  # right padding
    return ids, att


def _own(model: torch.nn.Module, impl: str) -> torch.nn.Module:
    """A copy of ``model`` running ``impl`` as transformers ships it."""
    plain = copy.deepcopy(model)
    plain.config._attn_implementation = impl
    return plain


def test_the_attention_is_installed_once_at_load_and_never_flipped(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AttentionInterface

    from trace_rl.policy import load_policy

    policy = load_policy("tiny", seed=3)
    model = policy.model
    assert model.config._attn_implementation == "trace_segments|sdpa"
    assert logprob_strategy(model).name == "chains"
    registered: list[str] = []
    monkeypatch.setattr(
        AttentionInterface, "register", classmethod(lambda cls, name, fn: registered.append(name))
    )
    seen: list[str] = []
    real = segments.tree_attention

    def watch(*a, **k):  # type: ignore[no-untyped-def]
        seen.append(model.config._attn_implementation)
        return real(*a, **k)

    monkeypatch.setattr(segments, "tree_attention", watch)
    seqs = [np.arange(3, 12, dtype=np.int64), np.arange(3, 8, dtype=np.int64)]
    with torch.no_grad():
        segments.segment_forward(model, seqs)
        segments.tree_forward(model, [pack_sequences(seqs)])
    assert registered == []  # registered once per process, not per forward
    # the kernel ran, per layer of both forwards, and nothing flipped the implementation around it
    assert seen == ["trace_segments|sdpa"] * (2 * model.config.num_hidden_layers)
    assert segments.install_segment_attention(model) == ""  # a no-op now
    assert model.config._attn_implementation == "trace_segments|sdpa"


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_a_forward_without_spans_is_the_models_own(impl: str) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3ForCausalLM

    from trace_rl.policy.models import tiny_config

    torch.manual_seed(0)
    llama = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128,
    )  # fmt: skip
    for model in (Qwen3ForCausalLM(tiny_config(128)).eval(), LlamaForCausalLM(llama).eval()):
        model.config._attn_implementation = impl
        plain = _own(model, impl)
        assert segments.install_segment_attention(model) == ""
        assert model.config._attn_implementation == f"trace_segments|{impl}"
        ids, att = _padded_batch(128)
        with torch.no_grad():
            assert torch.equal(
                model(input_ids=ids, attention_mask=att).logits,
                plain(input_ids=ids, attention_mask=att).logits,
            )
            assert torch.equal(model(input_ids=ids).logits, plain(input_ids=ids).logits)
            cont = model.generate(ids[:1], max_new_tokens=4, do_sample=False)
            assert torch.equal(cont, plain.generate(ids[:1], max_new_tokens=4, do_sample=False))


def test_packed_and_plain_forwards_run_side_by_side_in_threads(tiny_policy) -> None:
    """Nothing is flipped around a packed forward, so a plain forward in another thread is never sent to the
    trie kernel without spans (or a packed one to the model's own attention)."""
    model = copy.deepcopy(tiny_policy.model)
    seqs = [np.arange(3, 40, dtype=np.int64), np.arange(5, 30, dtype=np.int64)]
    ids, att = _padded_batch(400)
    with torch.no_grad():
        want_packed = segments.segment_forward(model, seqs)[0]
        want_plain = model(input_ids=ids, attention_mask=att).logits
    errors: list[BaseException] = []

    def loop(packed: bool) -> None:
        try:
            for _ in range(20):
                with torch.no_grad():
                    if packed:
                        assert torch.equal(segments.segment_forward(model, seqs)[0], want_packed)
                    else:
                        assert torch.equal(model(input_ids=ids, attention_mask=att).logits, want_plain)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(p,)) for p in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_the_trl_layout_runs_through_the_same_kernel_as_the_dense_ancestry_mask() -> None:
    from trace_rl.integrations.trl.cpu import sdpa_tree_attention

    rows = [
        pack_sequences([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 6, 7], [8, 9]]),
        pack_sequences([[4, 4, 4], [4, 5]]),
    ]
    spans = segments.TreeSpans.of_rows(rows)
    n = sum(r.size for r in rows)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn((1, 4, n, 8), generator=gen, dtype=torch.float64)
    k, v = (torch.randn((1, 2, n, 8), generator=gen, dtype=torch.float64) for _ in range(2))
    trl_kwargs = dict(
        tree_kv_index=torch.as_tensor(spans.kv_index),
        tree_cu_seqlens_q=torch.tensor(spans.cu_seqlens_q, dtype=torch.int32),
        tree_cu_seqlens_k=torch.tensor(spans.cu_seqlens_k, dtype=torch.int32),
    )
    out, _ = sdpa_tree_attention(None, q, k, v, None, **trl_kwargs)
    # the dense reference: each row under its ancestry mask, the rows side by side
    allowed = torch.zeros((n, n), dtype=torch.bool)
    offset = 0
    for r in rows:
        allowed[offset : offset + r.size, offset : offset + r.size] = torch.as_tensor(r.allowed())
        offset += r.size
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    dense = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=allowed).transpose(1, 2)
    assert torch.allclose(out, dense, rtol=1e-10, atol=1e-12)
    native = segments.tree_attention(q, k, v, spans.chains(q.device), None, 0.0)
    assert torch.equal(out, native)


def test_tree_spans_refuse_a_path_that_does_not_end_with_its_segment() -> None:
    bad = segments.TreeSpans(np.array([0, 1, 3, 2]), [0, 2, 4], [0, 2, 4])  # segment 1's keys are swapped
    with pytest.raises(ValueError, match="does not end with its own tokens"):
        bad.chains("cpu")
    with pytest.raises(ValueError, match="queries over a path of"):
        segments.TreeSpans(np.array([0]), [0, 2], [0, 1]).chains("cpu")


def test_strategies_are_ordered_by_capability() -> None:
    assert STRATEGIES == ("chains", "mask", "padded")
    assert at_most("chains", "mask") == at_most("mask", "chains") == "mask"
    assert at_most("padded", "chains") == "padded"
    with pytest.raises(ValueError, match="must be one of"):
        at_most("chains", "trie")


def test_the_update_takes_a_weaker_strategy_as_a_parameter(tiny_policy) -> None:
    """Benchmarks compare the ways through `policy_update`'s parameters: the mask way computes the padded packed
    rows' tokens, the chains way the rows' own, for the same weights to float32 rounding."""
    from tests.unit.test_tree_packing import replay_trees
    from trace_rl.spec import UpdateSpec
    from trace_rl.train.packing import CHAIN_ROW_TOKENS, plan_packed_passes
    from trace_rl.train.update import has_signal, path_rows, policy_update

    trees = replay_trees()
    settings = UpdateSpec(estimator="treerpo", minibatches=1, micro_tokens=0)
    rows = [r for r in path_rows(trees, settings) if has_signal(r)]
    moved, tokens = {}, {}
    for way in ("chains", "mask", "padded"):
        model = copy.deepcopy(tiny_policy.model)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        stats = policy_update(
            model, opt, trees, settings, pad_id=0, rng=np.random.default_rng(0), strategy=way
        )
        moved[way] = [p.detach().clone() for p in model.parameters()]
        tokens[way] = stats["forward_tokens"]
        assert stats["packed"] == float(way != "padded")
    (chains,) = plan_packed_passes(rows, 0, CHAIN_ROW_TOKENS)
    assert tokens["chains"] == chains.row_tokens < tokens["mask"] < tokens["padded"]
    for way in ("mask", "padded"):
        err = max(float((a - b).norm() / b.norm()) for a, b in zip(moved[way], moved["chains"], strict=True))
        assert err <= 1e-5, way
