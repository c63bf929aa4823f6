"""Packed SFT batches (issue 38 item 1): one row without padding, each example attending to its own tokens only
(`trace_rl.policy.segments`), with the same loss and gradient as padded batches; a model that cannot run it
trains on padded batches after one log line."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.unit.model_fakes import IgnoresMasks, KeepsItsAttention  # noqa: E402
from trace_rl.policy import segments  # noqa: E402
from trace_rl.policy.packing import packing_support_issue  # noqa: E402
from trace_rl.policy.sft import SFTConfig, SFTExample, batch_loss, train_sft  # noqa: E402


def examples(seed: int = 0, n: int = 6) -> list[SFTExample]:
    """Examples sharing a 12-token prompt prefix, of different lengths, loss on alternating stretches; one pair
    identical (its shared tokens are computed once and counted twice)."""
    rng = np.random.default_rng(seed)
    head = rng.integers(3, 300, 12)
    out = []
    for i in range(n):
        tail = rng.integers(3, 300, (2, 5, 9, 20, 36, 45, 14, 30)[i])
        ids = np.r_[head, tail].astype(np.int64)
        mask = np.zeros(ids.size, np.int8)
        mask[14::3] = 1
        mask[-4:] = 1
        out.append(SFTExample(ids, mask))
    out.append(out[2])
    return out


def grads(model: torch.nn.Module, batch: list[SFTExample], packed: bool) -> tuple[float, list]:
    model.zero_grad(set_to_none=True)
    loss = batch_loss(model, batch, 48, 0, packed=packed)
    loss.backward()
    return float(loss.detach()), [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def test_packed_batches_give_the_padded_loss_and_gradient(
    tiny_policy, float64_norms: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = copy.deepcopy(tiny_policy.model).double().eval()
    batch = examples()  # the two longest are cut to max_len 48 in both ways
    spans: list[int] = []
    real = segments.tree_attention
    monkeypatch.setattr(
        segments,
        "tree_attention",
        lambda q, k, v, chains, *a: spans.append(len(chains)) or real(q, k, v, chains, *a),
    )
    loss_pad, g_pad = grads(model, batch, False)
    assert spans == []
    loss_pack, g_pack = grads(model, batch, True)
    assert spans == [len(batch)] * model.config.num_hidden_layers  # one row, a span per example, every layer
    assert model.config._attn_implementation == "trace_segments|sdpa"  # set once, at load
    assert loss_pack == pytest.approx(loss_pad, rel=1e-10)
    assert len(g_pad) == len(g_pack)
    for a, b in zip(g_pad, g_pack, strict=True):
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-12)


def test_segment_forward_gives_each_sequence_its_own_logits(tiny_policy, float64_norms: None) -> None:
    model = copy.deepcopy(tiny_policy.model).double().eval()
    seqs = [e.ids[:40] for e in examples()[:4]]
    with torch.no_grad():
        logits, starts = segments.segment_forward(model, seqs)
        assert logits.shape[0] == sum(s.size for s in seqs)  # no padding
        assert starts.tolist() == np.cumsum([0] + [s.size for s in seqs[:-1]]).tolist()
        for seq, start in zip(seqs, starts, strict=True):
            alone = model(input_ids=torch.as_tensor(seq[None])).logits[0]
            assert torch.allclose(logits[start : start + seq.size], alone, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="no empty one"):
        segments.segment_forward(model, [seqs[0], seqs[0][:0]])
    # set once, at load, not flipped around the forward
    assert model.config._attn_implementation == "trace_segments|sdpa"


def test_sft_packing_setting_is_validated() -> None:
    with pytest.raises(ValueError, match="packing must be one of"):
        SFTConfig(packing="trie")


def test_a_model_that_cannot_take_the_mask_trains_padded_after_one_log_line(tiny_policy) -> None:
    assert packing_support_issue(tiny_policy.model) == ""
    assert segments.segment_support_issue(tiny_policy.model) == ""
    model = IgnoresMasks(copy.deepcopy(tiny_policy.model))
    reference = copy.deepcopy(model)
    assert "differ" in packing_support_issue(model)
    assert "failed on a probe (TypeError" in segments.segment_support_issue(model)  # no segment_cuts argument
    assert "differ" in segments.segment_support_issue(KeepsItsAttention(model.inner))
    lines: list[str] = []
    cfg = SFTConfig(steps=3, batch_size=3, eval_every=100, warmup_steps=1, packing="tree")
    train_sft(model, examples(), cfg, pad_id=0, log=lines.append)
    assert sum("using padded batches" in line for line in lines) == 1
    train_sft(reference, examples(), SFTConfig(**{**cfg.__dict__, "packing": "none"}), pad_id=0)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_padded_fallback_is_logged_without_a_log_callable(tiny_policy, caplog) -> None:
    model = IgnoresMasks(copy.deepcopy(tiny_policy.model))
    cfg = SFTConfig(steps=1, batch_size=3, eval_every=100, warmup_steps=1, packing="tree")
    with caplog.at_level("WARNING", logger="trace_rl.policy.sft"):
        train_sft(model, examples(), cfg, pad_id=0)
    assert sum("using padded batches" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("packed", [False, True])
def test_bfloat16_warm_start_runs_its_products_in_bfloat16_and_stays_close(tiny_policy, packed: bool) -> None:
    model = copy.deepcopy(tiny_policy.model).eval()
    batch = examples()
    seen: list[torch.dtype] = []
    hook = model.lm_head.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    loss32 = float(batch_loss(model, batch, 48, 0, packed=packed).detach())
    loss16 = batch_loss(model, batch, 48, 0, packed=packed, dtype="bfloat16")
    hook.remove()
    assert seen == [torch.float32, torch.bfloat16]  # the products ran in bfloat16 only when asked
    assert loss16.dtype == torch.float32  # logits upcast before the loss
    assert float(loss16.detach()) == pytest.approx(loss32, rel=0.02)  # bfloat16 rounding, not another loss
    loss16.backward()  # the backward runs too, into float32 gradients of the float32 weights
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    with pytest.raises(ValueError, match="dtype must be one of"):
        batch_loss(model, batch, 48, 0, packed=packed, dtype="float16")


def test_sft_dtype_setting_is_validated() -> None:
    with pytest.raises(ValueError, match="dtype must be one of"):
        SFTConfig(dtype="half")


@pytest.mark.parametrize("packed", [False, True])
def test_compiled_warm_start_gives_the_eager_loss_gradient_and_training(
    tiny_policy, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`policy.sft_compile`: the compiled forward's loss and gradient equal the eager ones up to float32 rounding,
    and `train_sft` trains through the compiled wrapper (the weights it moves are the model's own)."""
    import trace_rl.policy.sft as sft

    model = copy.deepcopy(tiny_policy.model).train()
    batch = examples()
    loss_e, g_e = grads(model, batch, packed)
    loss_c, g_c = grads(torch.compile(model, dynamic=True), batch, packed)
    assert loss_c == pytest.approx(loss_e, rel=1e-5)
    num = sum(float((a - b).square().sum()) for a, b in zip(g_c, g_e, strict=True))
    assert (num / sum(float(b.square().sum()) for b in g_e)) ** 0.5 < 1e-5
    cfg = SFTConfig(
        steps=3, batch_size=3, eval_every=100, warmup_steps=1, packing="tree" if packed else "none"
    )
    seen: list[str] = []
    real = sft.batch_loss
    monkeypatch.setattr(
        sft, "batch_loss", lambda m, *a, **k: seen.append(type(m).__name__) or real(m, *a, **k)
    )
    eager, compiled = copy.deepcopy(tiny_policy.model), copy.deepcopy(tiny_policy.model)
    a = train_sft(eager, batch, cfg, pad_id=0)
    assert seen == [type(eager).__name__] * 3
    seen.clear()
    b = train_sft(compiled, batch, SFTConfig(**{**cfg.__dict__, "compile": True}), pad_id=0)
    assert seen == ["OptimizedModule"] * 3  # every step ran through torch.compile's wrapper
    assert b.final_loss == pytest.approx(a.final_loss, rel=1e-4)
    start = tiny_policy.model.parameters()
    moved = [float((p - q).abs().max()) for p, q in zip(compiled.parameters(), start, strict=True)]
    assert max(moved) > 1e-3  # the steps trained the model itself, not a copy


def test_a_compile_failure_is_an_error_naming_the_setting(tiny_policy, no_compiler: None) -> None:
    model = copy.deepcopy(tiny_policy.model)
    before = [p.detach().clone() for p in model.parameters()]
    cfg = SFTConfig(steps=2, batch_size=3, eval_every=100, warmup_steps=1, compile=True)
    with pytest.raises(RuntimeError, match=r"policy\.sft_compile: .*RuntimeError: no C\+\+ compiler found"):
        train_sft(model, examples(), cfg, pad_id=0)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))  # nothing trained


class FailsInBackward(torch.autograd.Function):  # type: ignore[misc]
    """Identity forward; its backward fails as inductor does when it cannot compile a backward graph."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        raise torch._dynamo.exc.BackendCompilerFailed(print, RuntimeError("backward: no C++ compiler"), None)


def test_a_compile_failure_in_the_backward_is_named_too(tiny_policy, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor compiles the backward on its first call, inside ``loss.backward()``: named as the forward's."""

    class BackwardFails(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, **kw: object) -> object:
            out = self.inner(**kw)
            out.logits = FailsInBackward.apply(out.logits)
            return out

    monkeypatch.setattr(torch, "compile", lambda model, **_: BackwardFails(model))
    cfg = SFTConfig(steps=2, batch_size=3, eval_every=100, warmup_steps=1, packing="none", compile=True)
    with pytest.raises(RuntimeError, match=r"policy\.sft_compile: .*backward: no C\+\+ compiler"):
        train_sft(copy.deepcopy(tiny_policy.model), examples(), cfg, pad_id=0)


def test_compile_failure_names_compile_errors_only() -> None:
    from trace_rl.policy.compiled import RECOMPILE_LIMIT, compile_failure

    exc = torch._dynamo.exc
    failed = compile_failure(
        exc.BackendCompilerFailed(print, RuntimeError("cc1plus: not found"), None), "optim.compile"
    )
    assert (
        isinstance(failed, RuntimeError)
        and "optim.compile" in str(failed)
        and "cc1plus: not found" in str(failed)
    )
    limit = compile_failure(exc.FailOnRecompileLimitHit("limit"), "policy.sft_compile")
    assert limit is not None and f"recompile limit ({RECOMPILE_LIMIT} graphs" in str(limit)
    # errors of the input or model (eager raises them too) pass through as they are
    assert compile_failure(exc.TorchRuntimeError("size mismatch"), "optim.compile") is None
    assert compile_failure(ValueError("no loss-mask-1 token"), "optim.compile") is None
