"""Which checkpoint a resumed run continues from (issue 16).

A checkpoint is ``DIR/checkpoints/step_<N>/``; its ``state.json`` is written last, inside a temporary folder that
is renamed into place, so a folder with ``state.json`` is complete. Complete is not always readable (a disk that
filled up or a copy that was cut off, a file damaged later): `checkpoint_problem` opens every file a resume
loads without reading the tensors themselves (the JSON files parsed, torch's zip archives opened with
``mmap``, the safetensors headers and their coverage of each file checked), and `resumable_checkpoint` falls
back from an unreadable newest checkpoint to the previous readable one, with one warning line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

STATE_FILE = "state.json"
TORCH_FILES = ("optimizer.pt", "predictor.pt", "rng.pt")


def checkpoint_step(ckpt: Path) -> int:
    """N of a ``step_<N>`` folder."""
    return int(ckpt.name.split("_")[1])


def complete_checkpoints(out: str | Path) -> list[Path]:
    """Every complete ``checkpoints/step_<N>`` folder under ``out`` (one with a state.json), oldest first."""
    root = Path(out) / "checkpoints"
    found = [p for p in root.glob("step_*") if p.is_dir() and (p / STATE_FILE).exists()]
    return sorted(found, key=checkpoint_step)


def checkpoint_problem(ckpt: Path) -> str | None:
    """Why a complete checkpoint cannot be loaded (one short phrase naming the file), or None when it can."""
    import torch
    from safetensors import safe_open

    def state(path: Path) -> None:
        if "step" not in json.loads(path.read_text()):
            raise ValueError("no step")

    def archive(path: Path) -> None:
        torch.load(path, map_location="cpu", weights_only=False, mmap=True)

    def weights(path: Path) -> None:
        with safe_open(str(path), "pt") as handle:
            list(handle.keys())

    policy = ckpt / "policy"
    if not list(policy.glob("*.safetensors")):
        return "policy/ holds no safetensors weights"
    checks: list[tuple[Path, Callable[[Path], object]]] = [(ckpt / STATE_FILE, state)]
    checks += [(ckpt / name, archive) for name in TORCH_FILES]
    checks += [(p, weights) for p in sorted(policy.glob("*.safetensors"))]
    checks += [(p, lambda q: json.loads(q.read_text())) for p in sorted(policy.glob("*.json"))]
    for path, check in checks:
        try:
            check(path)
        except Exception as exc:  # any failure to open means the resume would crash on this checkpoint
            detail = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
            return f"{path.relative_to(ckpt)}: {detail}"
    return None


def resumable_checkpoint(out: str | Path, log: Callable[[str], None]) -> Path | None:
    """The newest complete checkpoint under ``out`` that can be loaded, or None.

    When newer complete checkpoints cannot be loaded they are skipped with ONE line through ``log``, naming
    them, the first problem, and the checkpoint the run continues from (their steps are redone).
    """
    skipped: list[tuple[Path, str]] = []
    for ckpt in reversed(complete_checkpoints(out)):
        problem = checkpoint_problem(ckpt)
        if problem is None:
            if skipped:
                log(_skip_warning(skipped, f"resuming from {ckpt.name}"))
            return ckpt
        skipped.append((ckpt, problem))
    if skipped:
        log(_skip_warning(skipped, "no readable checkpoint left: starting from step 1"))
    return None


def completed_step(out: str | Path) -> int | None:
    """Step of the newest complete checkpoint under ``out`` when it can be loaded, else None (a resume then
    falls back to an older checkpoint and redoes the steps after it). A run whose value is >= its config's
    ``steps`` is finished: resuming it would only rebuild its parts (models, prompt embeddings) to run nothing."""
    ckpts = complete_checkpoints(out)
    if not ckpts or checkpoint_problem(ckpts[-1]) is not None:
        return None
    return checkpoint_step(ckpts[-1])


def finished_run(out: str | Path) -> bool:
    """Whether the newest loadable checkpoint under ``out`` marks the run finished: its last step was taken
    (``steps`` reached, or the run's ``total_budget`` could not pay for another step)."""
    ckpts = complete_checkpoints(out)
    if not ckpts or checkpoint_problem(ckpts[-1]) is not None:
        return False
    return bool(json.loads((ckpts[-1] / STATE_FILE).read_text()).get("finished", False))


def _skip_warning(skipped: list[tuple[Path, str]], then: str) -> str:
    noun = "checkpoint" if len(skipped) == 1 else "checkpoints"
    names = ", ".join(p.name for p, _ in skipped)
    return f"warning: {noun} {names} cannot be read ({skipped[0][1]}); {then}"


__all__ = [
    "checkpoint_problem",
    "checkpoint_step",
    "complete_checkpoints",
    "completed_step",
    "finished_run",
    "resumable_checkpoint",
]
