"""Torch predictors: cold-start prior, strict (0, 1) outputs, validation, state round trip, learnability."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trace_rl.predictor import OnlineConfig, OnlineTrainer, build_predictor, serialize_anchor  # noqa: E402
from trace_rl.predictor.metrics import spearman  # noqa: E402
from trace_rl.predictor.model import TorchSuccessPredictor  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    # Tiny models on a shared 2-core machine run fastest (and most predictably) on one intra-op thread.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def small(**kw: object) -> TorchSuccessPredictor:
    pred = build_predictor("tiny", d_model=32, n_layers=1, n_heads=2, d_ff=64, device="cpu", **kw)
    assert isinstance(pred, TorchSuccessPredictor)
    return pred


def test_cold_start_is_the_prior_and_outputs_stay_inside_0_1() -> None:
    pred = small()
    assert not pred.is_warm
    np.testing.assert_array_equal(pred.predict(["a", "bb", ""]), [0.5, 0.5, 0.5])
    assert pred.predict([]).shape == (0,)
    pred.update(["a", "bb"], [1.0, 0.0])
    assert pred.is_warm and pred.num_updates == 1
    with torch.no_grad():
        pred.head.bias.fill_(60.0)  # sigmoid(60) rounds to 1.0 in float32: the clip keeps it strictly below 1
    out = pred.predict(["a"])
    assert 0.0 < out[0] < 1.0 and out[0] == pytest.approx(1 - pred.config.eps)
    # texts scored: 3 + 0 + 1 = 4 over 3 calls; one update
    assert pred.timing["predict_texts"] == 4 and pred.timing["predict_calls"] == 3
    assert pred.timing["update_steps"] == 1


def test_prior_option_sets_the_cold_start_estimate() -> None:
    np.testing.assert_allclose(small(prior=0.2).predict(["x"]), [0.2], rtol=1e-6)


def test_update_validation() -> None:
    pred = small()
    bad = [
        (lambda: pred.predict("one string"), "single string"),
        (lambda: pred.predict(["ok", 3]), r"texts\[1\]"),
        (lambda: pred.update([], []), "at least one"),
        (lambda: pred.update(["a", "b"], [0.5]), "shape"),
        (lambda: pred.update(["a"], [float("nan")]), "NaN"),
        (lambda: pred.update(["a"], [1.5]), r"\[0, 1\]"),
        (lambda: pred.update(["a"], [0.5], weights=[-1.0]), "non-negative"),
        (lambda: pred.update(["a"], [0.5], weights=[0.0]), "positive sum"),
    ]
    for call, message in bad:
        with pytest.raises(ValueError, match=message):
            call()
    assert not pred.is_warm  # rejected updates change nothing
    with pytest.raises(ValueError, match="unknown predictor option"):
        build_predictor("tiny", learning_rate=1.0)
    with pytest.raises(ValueError, match="not found"):
        build_predictor("/no/such/model/folder")
    with pytest.raises(ValueError, match="lr"):
        build_predictor("tiny", lr=-1.0)


def test_micro_batches_accumulate_to_the_same_step() -> None:
    texts = [f"text number {i}" * (1 + i % 3) for i in range(6)]
    y = np.linspace(0.0, 1.0, 6)
    a, b = small(train_micro_batch=6), small(train_micro_batch=2)
    for _ in range(2):
        la, lb = a.update(texts, y)["loss"], b.update(texts, y)["loss"]
        assert la == pytest.approx(lb, rel=1e-5)
    np.testing.assert_allclose(a.predict(texts), b.predict(texts), rtol=1e-5)


def test_state_round_trip_restores_weights_and_optimizer() -> None:
    texts = ["alpha", "beta beta", "gamma gamma gamma"]
    y = [0.1, 0.5, 0.9]
    a = small(seed=1)
    for _ in range(3):
        a.update(texts, y)
    b = small(seed=2)  # different initial weights, overwritten by the load
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)  # the checkpoint path: plain tensors and builtins, loadable weights_only
    buf.seek(0)
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert b.is_warm and b.num_updates == 3
    np.testing.assert_array_equal(a.predict(texts), b.predict(texts))
    a.update(texts, y)
    b.update(texts, y)  # identical only if the AdamW moments were restored too
    np.testing.assert_allclose(a.predict(texts), b.predict(texts), rtol=1e-6)
    with pytest.raises(ValueError, match="lacks"):
        b.load_state_dict({"format": 1})
    with pytest.raises(ValueError, match="backbone"):
        b.load_state_dict({**a.state_dict(), "name": "minilm"})
    with pytest.raises(ValueError, match="does not fit"):
        build_predictor("tiny", d_model=16, n_layers=1, n_heads=2, d_ff=64).load_state_dict(a.state_dict())


def arithmetic_task(rng: np.random.Generator, n: int) -> tuple[list[str], np.ndarray]:
    """Prompts whose success rate follows a hidden rule of the text (the tiny policy's difficulty profile).

    p = 0.95 - 0.12 * (terms - 2) - 0.3 * [the expression has a '*'], clipped to [0.05, 0.95].
    """
    texts, probs = [], []
    for _ in range(n):
        k = int(rng.integers(2, 8))
        nums = [str(int(rng.integers(1, 1000))) for _ in range(k)]
        ops = rng.choice(["+", "-", "*"], size=k - 1, p=[0.45, 0.45, 0.1])
        expr = nums[0] + "".join(f" {o} {x}" for o, x in zip(ops, nums[1:], strict=True))
        probs.append(float(np.clip(0.95 - 0.12 * (k - 2) - 0.3 * ("*" in ops), 0.05, 0.95)))
        texts.append(serialize_anchor(f"What is {expr}? Use the python tool."))
    return texts, np.array(probs)


def test_tiny_predictor_learns_a_hidden_rule_from_noisy_targets() -> None:
    """Default 'tiny' backbone, 300 updates of 16 texts with targets = success rate of 4 Bernoulli draws."""
    rng = np.random.default_rng(0)
    pred = build_predictor("tiny", device="cpu")
    held_out, p_true = arithmetic_task(rng, 200)
    assert spearman(pred.predict(held_out), p_true) != spearman(
        pred.predict(held_out), p_true
    )  # NaN: constant
    for _ in range(300):
        texts, p = arithmetic_task(rng, 16)
        pred.update(texts, rng.binomial(4, p) / 4.0)
    rho = spearman(pred.predict(held_out), p_true)
    assert rho > 0.8, f"held-out Spearman {rho:.3f}"


def test_online_trainer_with_a_real_predictor() -> None:
    pred = small()
    trainer = OnlineTrainer(pred, OnlineConfig(batch_size=8))
    rng = np.random.default_rng(3)
    texts, p = arithmetic_task(rng, 12)
    from trace_rl.predictor import NodeExample

    examples = [NodeExample(t, float(y), 0) for t, y in zip(texts, p, strict=True)]
    examples += [NodeExample(t + "[TURN 1]\nx\n", float(y), 1) for t, y in zip(texts[:4], p[:4], strict=True)]
    m0 = trainer.observe_step(examples)
    assert (
        m0["predictor/warm"] == 1.0 and m0["predictor/updates"] == 2.0
    )  # ceil(12 / (8 - 0)) prompt slots: 8 -> 2
    assert m0["predictor/mse_prompt"] == pytest.approx(float(np.mean((0.5 - p) ** 2)))  # cold-start prior
    assert m0["predictor/update_seconds"] > 0 and m0["predictor/score_seconds"] > 0


def test_frozen_backbone_trains_only_the_head() -> None:
    pred = small(backbone_lr=0.0)
    before = {k: v.clone() for k, v in pred.backbone.state_dict().items()}
    pred.update(["a", "b"], [1.0, 0.0])
    pred.update(["a", "b"], [1.0, 0.0])
    for k, v in pred.backbone.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert pred.head.weight.abs().sum() > 0  # the zero-initialised head moved
    with pytest.raises(ValueError, match="pooling"):
        build_predictor("tiny", pooling="last")
