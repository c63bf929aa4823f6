"""Which checkpoint --resume continues from (issue 16): unreadable newest checkpoints are skipped, one warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import save_file  # noqa: E402

from trace_rl.train.checkpoint import checkpoint_problem, complete_checkpoints, resumable_checkpoint  # noqa: E402


def _checkpoint(out: Path, step: int) -> Path:
    ckpt = out / "checkpoints" / f"step_{step}"
    (ckpt / "policy").mkdir(parents=True)
    save_file({"w": torch.arange(4000, dtype=torch.float32)}, str(ckpt / "policy" / "model.safetensors"))
    (ckpt / "policy" / "config.json").write_text(json.dumps({"hidden": 8}))
    for name in ("optimizer.pt", "predictor.pt", "rng.pt"):
        torch.save({"x": torch.ones(500)}, ckpt / name)
    (ckpt / "state.json").write_text(json.dumps({"step": step}))
    return ckpt


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "damaged", ["policy/model.safetensors", "optimizer.pt", "rng.pt", "state.json", "policy/config.json"]
)
def test_a_damaged_file_is_named(tmp_path: Path, damaged: str) -> None:
    ckpt = _checkpoint(tmp_path, 3)
    assert checkpoint_problem(ckpt) is None
    _truncate(ckpt / damaged)
    problem = checkpoint_problem(ckpt)
    assert problem is not None and problem.startswith(damaged)


def test_missing_weights_are_a_problem(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path, 1)
    (ckpt / "policy" / "model.safetensors").unlink()
    assert "no safetensors" in (checkpoint_problem(ckpt) or "")


def test_falls_back_to_the_previous_readable_checkpoint_with_one_warning(tmp_path: Path) -> None:
    for step in (2, 4, 6):
        _checkpoint(tmp_path, step)
    (tmp_path / "checkpoints" / "step_8").mkdir()  # incomplete (no state.json): never a candidate
    lines: list[str] = []
    assert resumable_checkpoint(tmp_path, lines.append) == tmp_path / "checkpoints" / "step_6"
    assert lines == []
    _truncate(tmp_path / "checkpoints" / "step_6" / "policy" / "model.safetensors")
    (tmp_path / "checkpoints" / "step_4" / "predictor.pt").write_bytes(b"not a zip")
    assert resumable_checkpoint(tmp_path, lines.append) == tmp_path / "checkpoints" / "step_2"
    assert len(lines) == 1 and lines[0].startswith("warning: checkpoints step_6, step_4 cannot be read")
    assert lines[0].endswith("resuming from step_2") and "model.safetensors" in lines[0]
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step_2", "step_4", "step_6"]


def test_no_readable_checkpoint_left(tmp_path: Path) -> None:
    _truncate(_checkpoint(tmp_path, 1) / "rng.pt")
    lines: list[str] = []
    assert resumable_checkpoint(tmp_path, lines.append) is None
    assert len(lines) == 1 and "starting from step 1" in lines[0]
    assert resumable_checkpoint(tmp_path / "nothing", lines.append) is None and len(lines) == 1
