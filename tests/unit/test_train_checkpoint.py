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


class _RunsCode:
    """A pickle payload that calls a function when loaded (what a hostile checkpoint would hold)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.write_text, (self.marker, "ran"))


@pytest.mark.parametrize("name", ["optimizer.pt", "predictor.pt", "rng.pt"])
def test_a_checkpoint_whose_pickle_runs_code_is_refused(tmp_path: Path, name: str) -> None:
    from trace_rl.errors import UserError
    from trace_rl.train.checkpoint import UnsafeCheckpointError, completed_step, load_checkpoint

    marker = tmp_path / "ran.txt"
    _checkpoint(tmp_path, 2)
    ckpt = _checkpoint(tmp_path, 4)
    torch.save({"x": torch.ones(3), "payload": _RunsCode(marker)}, ckpt / name)
    lines: list[str] = []
    with pytest.raises(
        UnsafeCheckpointError, match=f"{name}: refused: its pickle would build or call"
    ) as info:
        resumable_checkpoint(tmp_path, lines.append)  # no quiet fall-back to step_2 either
    assert isinstance(info.value, UserError) and "\n" not in str(info.value) and lines == []
    with pytest.raises(UnsafeCheckpointError):
        completed_step(tmp_path)
    with pytest.raises(UnsafeCheckpointError):  # loading directly (no check first) refuses as well
        load_checkpoint(ckpt, tmp_path, optimizer=None, predictor=None, online=None, cursor=None, rng=None)
    assert not marker.exists()


def test_the_states_the_project_saves_load_weights_only(tmp_path: Path) -> None:
    import random

    import numpy as np

    from trace_rl.predictor import build_predictor
    from trace_rl.predictor.online import OnlineTrainer
    from trace_rl.train.checkpoint import load_torch_file

    texts = ["2+3 = ?", "2+3 = ? <tool_call>x</tool_call>", "7*8 = ?"]
    for name in ("ngram", "tiny"):
        pred = build_predictor(name, seed=0)
        pred.update(texts, np.array([1.0, 0.0, 1.0]))
        online = OnlineTrainer(pred)
        torch.save({"predictor": pred.state_dict(), "online": online.state_dict()}, tmp_path / f"{name}.pt")
        back = load_torch_file(tmp_path / f"{name}.pt")
        again = build_predictor(name, seed=1)
        again.load_state_dict(back["predictor"])
        np.testing.assert_allclose(again.predict(texts), pred.predict(texts), rtol=1e-6)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    torch.save(opt.state_dict(), tmp_path / "optimizer.pt")
    torch.optim.AdamW(model.parameters(), lr=1e-3).load_state_dict(load_torch_file(tmp_path / "optimizer.pt"))
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp_path / "rng.pt")
    rng = load_torch_file(tmp_path / "rng.pt")
    assert rng["python"] == random.getstate() and torch.equal(rng["torch"], torch.get_rng_state())
    scalars = {
        "f": np.float64(0.5),
        "i": np.int64(3),
        "a": np.arange(4, dtype=np.int32),
        "b": np.ones(2, bool),
    }
    torch.save(scalars, tmp_path / "numpy.pt")
    loaded = load_torch_file(tmp_path / "numpy.pt")
    assert loaded["f"] == 0.5 and loaded["i"] == 3 and loaded["a"].dtype == np.int32 and loaded["b"].all()
