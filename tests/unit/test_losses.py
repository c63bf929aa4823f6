"""Policy losses (torch) on hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from trace_rl.advantages.losses import aggregate_loss, clipped_surrogate, kl_k3, policy_loss


def test_clipped_surrogate_by_hand() -> None:
    old = torch.zeros(1, 4, dtype=torch.float64)
    # ratios 1.5, 1.5, 0.5, 1.0 with advantages +1, -1, +1, +2 and clip 0.2:
    # t0: -min(1.5 * 1, 1.2 * 1) = -1.2 (clipped branch active)
    # t1: -min(1.5 * -1, 1.2 * -1) = -(-1.5) = 1.5 (unclipped branch)
    # t2: -min(0.5 * 1, 0.8 * 1) = -0.5 (unclipped)
    # t3: -min(1 * 2, 1 * 2) = -2 (inside the range)
    logp = torch.log(torch.tensor([[1.5, 1.5, 0.5, 1.0]], dtype=torch.float64))
    adv = torch.tensor([[1.0, -1.0, 1.0, 2.0]], dtype=torch.float64)
    loss, clipped = clipped_surrogate(logp, old, adv, clip_low=0.2)
    torch.testing.assert_close(loss, torch.tensor([[-1.2, 1.5, -0.5, -2.0]], dtype=torch.float64))
    assert clipped.tolist() == [[True, False, False, False]]
    # Clip-higher: clip_high = 0.6 lets t0 reach ratio 1.5: -min(1.5, 1.5) = -1.5.
    loss, clipped = clipped_surrogate(logp, old, adv, clip_low=0.2, clip_high=0.6)
    assert loss[0, 0].item() == pytest.approx(-1.5)
    assert not clipped[0, 0]


def test_gradient_is_zero_on_clipped_tokens() -> None:
    logp = torch.log(torch.tensor([[1.5, 1.0]], dtype=torch.float64)).requires_grad_()
    old = torch.zeros(1, 2, dtype=torch.float64)
    adv = torch.tensor([[1.0, 3.0]], dtype=torch.float64)
    loss, _ = clipped_surrogate(logp, old, adv)
    loss.sum().backward()
    # t0 clipped: no gradient. t1: d/dlogp of -(exp(logp) * A) at ratio 1 = -A = -3.
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -3.0]], dtype=torch.float64))


def test_aggregations_by_hand() -> None:
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate_loss(per_token, mask, "token-mean").item() == pytest.approx((1 + 2 + 4) / 3)
    assert aggregate_loss(per_token, mask, "seq-mean-token-sum").item() == pytest.approx((3 + 4) / 2)
    assert aggregate_loss(per_token, mask, "seq-mean-token-mean").item() == pytest.approx((1.5 + 4) / 2)
    assert aggregate_loss(per_token, mask, "seq-mean-token-sum-norm").item() == pytest.approx((3 + 4) / 2 / 3)
    empty = torch.zeros(2, 3, dtype=torch.int64)
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert aggregate_loss(per_token, empty, mode).item() == 0.0  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate_loss(per_token, mask, "mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        aggregate_loss(per_token, mask[:, :2])


def test_seq_mean_token_sum_norm_divides_by_the_given_constant_not_the_width() -> None:
    # Dr. GRPO's L is a constant: padding the batch wider must not change the loss
    per_token = torch.tensor([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    wide = torch.nn.functional.pad(per_token, (0, 5))
    wide_mask = torch.nn.functional.pad(mask, (0, 5))
    for pt, m in ((per_token, mask), (wide, wide_mask)):
        loss = aggregate_loss(pt, m, "seq-mean-token-sum-norm", scale_tokens=10)
        assert loss.item() == pytest.approx((3 + 4) / 2 / 10)
    with pytest.raises(ValueError, match="scale_tokens"):
        aggregate_loss(per_token, mask, "seq-mean-token-sum-norm", scale_tokens=0)


def test_kl_k3_by_hand() -> None:
    logp = torch.tensor([[0.0, math.log(0.5), -1.0]], dtype=torch.float64)
    ref = torch.tensor([[math.log(2.0), 0.0, -1.0]], dtype=torch.float64)
    # d = ref - logp: ln 2 -> 2 - ln 2 - 1 = 0.30685; ln 2 again -> same; 0 -> 0.
    expected = torch.tensor([[1 - math.log(2), 1 - math.log(2), 0.0]], dtype=torch.float64)
    torch.testing.assert_close(kl_k3(logp, ref), expected)
    # Extreme differences are clamped (verl low_var_kl): never inf.
    big = kl_k3(torch.tensor([[-100.0]]), torch.tensor([[0.0]]))
    assert big.item() == 10.0


def test_policy_loss_combines_terms() -> None:
    logp = torch.log(torch.tensor([[1.5, 1.0, 1.0]], dtype=torch.float64))
    old = torch.zeros(1, 3, dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    ref = torch.tensor([[math.log(1.5), math.log(2.0), 0.0]], dtype=torch.float64)
    loss, stats = policy_loss(logp, old, adv, mask, ref_logprobs=ref, kl_coef=0.1)
    # pg: tokens 0, 1 -> (-1.2 + -1.0) / 2 = -1.1 (token 2 masked out)
    # kl: token 0 d = 0 -> 0; token 1 d = ln 2 -> 1 - ln 2 = 0.30685; mean over 2 = 0.153426
    kl = (1 - math.log(2)) / 2
    assert stats["pg_loss"].item() == pytest.approx(-1.1)
    assert stats["kl"].item() == pytest.approx(kl)
    assert loss.item() == pytest.approx(-1.1 + 0.1 * kl)
    assert stats["clip_fraction"].item() == pytest.approx(0.5)
    # approx_kl: 0.5 * (ln 1.5)^2 and 0 over 2 tokens.
    assert stats["approx_kl"].item() == pytest.approx(0.25 * math.log(1.5) ** 2)
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        policy_loss(logp, old, adv, mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="kl_coef"):
        policy_loss(logp, old, adv, mask, kl_coef=-1.0)


def test_nonfinite_padding_does_not_poison_loss_or_gradient() -> None:
    # Masked-out (padding) positions hold NaN / -inf; multiplying by the 0 mask gave NaN (0 * NaN).
    # Valid token: ratio exp(0) = 1, advantage 1 -> per-token loss -1; token-mean over 1 token = -1.
    for pad in (math.nan, -math.inf):
        lp = torch.tensor([[math.log(0.5), pad]], dtype=torch.float64, requires_grad=True)
        old = torch.tensor([[math.log(0.5), pad]], dtype=torch.float64)
        ref = torch.tensor([[math.log(0.5), pad]], dtype=torch.float64)
        adv = torch.tensor([[1.0, pad]], dtype=torch.float64)
        mask = torch.tensor([[1, 0]])
        for agg in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
            lp.grad = None
            loss, stats = policy_loss(lp, old, adv, mask, ref_logprobs=ref, kl_coef=0.1, loss_agg=agg)  # type: ignore[arg-type]
            # KL term: d = 0 at the valid token -> k3 = 0. sum-norm divides by T = 2.
            assert loss.item() == pytest.approx(-0.5 if agg == "seq-mean-token-sum-norm" else -1.0)
            assert all(math.isfinite(float(v)) for v in stats.values())
            loss.backward()
            assert lp.grad is not None and float(lp.grad[0, 1]) == 0.0 and math.isfinite(float(lp.grad[0, 0]))
    per_token = torch.tensor([[2.0, math.nan]], requires_grad=True)
    out = aggregate_loss(per_token, torch.tensor([[1, 0]]))
    out.backward()
    assert out.item() == 2.0 and per_token.grad is not None and per_token.grad.tolist() == [[1.0, 0.0]]
