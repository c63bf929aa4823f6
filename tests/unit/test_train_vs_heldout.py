"""scripts/train_vs_heldout.py's choice of policy folder: a policy folder as given, a run's latest checkpoint
policy (by step number, not by name order), and a one-line refusal otherwise."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("train_vs_heldout", ROOT / "scripts" / "train_vs_heldout.py")
assert _spec is not None and _spec.loader is not None
tvh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tvh)


def _policy(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"")
    return path


def test_a_policy_folder_is_taken_as_is(tmp_path: Path) -> None:
    pol = _policy(tmp_path / "sft" / "policy")
    assert tvh.policy_folder(pol) == pol


def test_a_run_folder_gives_its_latest_checkpoint_by_step(tmp_path: Path) -> None:
    for step in (9, 80, 100):
        _policy(tmp_path / "run" / "checkpoints" / f"step_{step}" / "policy")
    (tmp_path / "run" / "checkpoints" / "step_200").mkdir()  # no policy inside: not a checkpoint to take
    assert tvh.policy_folder(tmp_path / "run") == tmp_path / "run" / "checkpoints" / "step_100" / "policy"


def test_anything_else_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="neither a policy folder nor a run folder"):
        tvh.policy_folder(tmp_path)
    assert tvh.main(["--preset", "agentic", "--policy", str(tmp_path)]) == 2
    assert "neither a policy folder" in capsys.readouterr().err


def test_trained_prompts_are_the_buffer_s_prompt_level_outcomes(tmp_path: Path) -> None:
    import torch

    pol = _policy(tmp_path / "run" / "checkpoints" / "step_5" / "policy")
    buffer = [
        [
            {"text": "[PROMPT]\na\n", "target": 1.0, "depth": 0, "weight": 4.0},
            {"text": "[PROMPT]\na\n[TURN 1]\nx\n", "target": 0.0, "depth": 1, "weight": 1.0},
        ],
        [
            {"text": "[PROMPT]\na\n", "target": 0.0, "depth": 0, "weight": 4.0},
            {"text": "[PROMPT]\nb\n", "target": 0.25, "depth": 0, "weight": 4.0},
        ],
    ]
    torch.save({"online": {"buffer": buffer}}, pol.parent / "predictor.pt")
    assert tvh.trained_prompts(tmp_path / "run") == {"[PROMPT]\na\n": 0.5, "[PROMPT]\nb\n": 0.25}
    torch.save({"online": {"buffer": [[buffer[0][1]]]}}, pol.parent / "predictor.pt")
    with pytest.raises(ValueError, match="no prompt-level outcome"):
        tvh.trained_prompts(tmp_path / "run")
