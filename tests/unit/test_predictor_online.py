"""Online trainer: batch composition (prefix share, replay buffer), cold start, state round trip."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from trace_rl.predictor import NodeExample, OnlineConfig, OnlineTrainer, SuccessPredictor
from trace_rl.predictor.capabilities import NO_CAPABILITIES


class RecordingPredictor:
    """Predicts a constant; records every update batch (no learning: this tests the schedule)."""

    name = "recording"
    prior = 0.5
    max_chars = 4096
    capabilities = NO_CAPABILITIES

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    @property
    def is_warm(self) -> bool:
        return bool(self.batches)

    def predict(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        return np.full(len(texts), 0.25)

    def update(
        self, texts: Sequence[str], targets: npt.ArrayLike, weights: npt.ArrayLike | None = None
    ) -> dict[str, float]:
        self.batches.append(list(texts))
        return {"loss": 0.1, "seconds": 0.0}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


def step_examples(step: int, n_prompts: int, n_prefixes: int) -> list[NodeExample]:
    prompts = [NodeExample(f"s{step}-p{i}", 0.5, 0) for i in range(n_prompts)]
    prefixes = [NodeExample(f"s{step}-x{i}", 0.5, 1 + i % 3) for i in range(n_prefixes)]
    return prompts + prefixes


def test_prefix_share_and_one_pass_over_prompts() -> None:
    pred = RecordingPredictor()
    assert isinstance(pred, SuccessPredictor)
    trainer = OnlineTrainer(pred, OnlineConfig(batch_size=32, prefix_share=0.0625))
    assert not pred.is_warm  # cold start: no update yet
    metrics = trainer.observe_step(step_examples(0, 64, 200))
    # 32 * 0.0625 = 2 prefix slots, 30 prompt slots; ceil(64 / 30) = 3 updates
    assert metrics["predictor/updates"] == 3.0
    assert metrics["predictor/warm"] == 1.0
    assert len(pred.batches) == 3
    for batch in pred.batches:
        assert len(batch) == 32 and len(set(batch)) == 32
        assert sum("-x" in t for t in batch) == 2
    seen = Counter(t for b in pred.batches for t in b if "-p" in t)
    assert len(seen) == 64  # every prompt-level node of the step is trained on
    # held-out metrics computed from the constant 0.25 prediction against targets 0.5: MSE 0.0625
    assert metrics["predictor/mse_prompt"] == pytest.approx(0.0625)
    assert metrics["predictor/count_depth_3"] > 0


def test_replay_buffer_mixes_current_and_older_steps() -> None:
    pred = RecordingPredictor()
    trainer = OnlineTrainer(
        pred, OnlineConfig(batch_size=20, prefix_share=0.0, buffer_steps=3, current_share=0.5)
    )
    for step in range(5):
        trainer.observe_step(step_examples(step, 40, 0))
    assert len(trainer.buffer) == 3  # steps 2, 3, 4
    last = pred.batches[-2:]  # step 4: ceil(40 / 20) = 2 updates
    for batch in last:
        steps = Counter(t.split("-")[0] for t in batch)
        assert steps["s4"] == 10  # current_share 0.5 of 20 slots
        assert set(steps) <= {"s2", "s3", "s4"}  # steps 0 and 1 were evicted


def test_prompt_only_or_prefix_only_steps() -> None:
    pred = RecordingPredictor()
    trainer = OnlineTrainer(pred, OnlineConfig(batch_size=8, prefix_share=0.25))
    trainer.observe_step(step_examples(0, 0, 10))  # no prompt-level nodes: all slots to prefixes
    assert all(len(b) == 8 for b in pred.batches[:1]) and len(pred.batches) == 2
    assert trainer.observe_step([])["predictor/updates"] == 0.0


def test_given_predictions_are_used_and_checked() -> None:
    trainer = OnlineTrainer(RecordingPredictor())
    ex = step_examples(0, 2, 0)
    m = trainer.observe_step(ex, predictions=[0.5, 0.5])
    assert m["predictor/mse"] == 0.0 and m["predictor/score_seconds"] == 0.0
    with pytest.raises(ValueError, match="predictions"):
        trainer.observe_step(ex, predictions=[0.5])
    with pytest.raises(ValueError, match="NodeExample"):
        trainer.observe_step(["text"])  # type: ignore[list-item]


def test_state_round_trip_reproduces_the_schedule() -> None:
    a = OnlineTrainer(RecordingPredictor(), OnlineConfig(batch_size=8, buffer_steps=2))
    a.observe_step(step_examples(0, 12, 4))
    b = OnlineTrainer(RecordingPredictor(), OnlineConfig(batch_size=8, buffer_steps=2))
    b.load_state_dict(a.state_dict())
    nxt = step_examples(1, 12, 4)
    a.observe_step(nxt)
    b.observe_step(nxt)
    assert a.predictor.batches[-2:] == b.predictor.batches  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="malformed"):
        b.load_state_dict({"steps": 1})


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="prefix_share"):
        OnlineConfig(prefix_share=1.5)
    with pytest.raises(ValueError, match="buffer_steps"):
        OnlineConfig(buffer_steps=0)
