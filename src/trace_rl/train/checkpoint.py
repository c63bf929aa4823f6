"""Which checkpoint a resumed run continues from (issue 16).

A checkpoint is ``DIR/checkpoints/step_<N>/``; its ``state.json`` is written last, inside a temporary folder that
is renamed into place, so a folder with ``state.json`` is complete. Complete is not always readable (a disk that
filled up or a copy that was cut off, a file damaged later): `checkpoint_problem` opens every file a resume
loads without reading the tensors themselves (the JSON files parsed, torch's zip archives opened with
``mmap``, the safetensors headers and their coverage of each file checked), and `resumable_checkpoint` falls
back from an unreadable newest checkpoint to the previous readable one, with one warning line.

`save_checkpoint` writes one (policy, optimizer, predictor, RNG states, data position); `load_checkpoint` restores
them into a run's parts and drops the metrics of the steps the resumed run redoes.

Loading never runs code from a checkpoint: the ``.pt`` files are read with ``torch.load(weights_only=True)``,
which rebuilds only tensors, containers and plain values, plus the numpy arrays and scalars the project saves
(the convex predictors' heads, RNG states; `SAFE_NUMPY_GLOBALS`). A file whose pickle names anything else (a
function to call, a class to build) is refused with `UnsafeCheckpointError` before any of it is loaded, also by
`checkpoint_problem`, so that a resume, or merely checking a run folder from elsewhere, stops with one line instead
of falling back to an older checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trace_rl.errors import UserError
from trace_rl.train.config import TrainConfig
from trace_rl.train.rundir import json_default, read_metrics

STATE_FILE = "state.json"
TORCH_FILES = ("optimizer.pt", "predictor.pt", "rng.pt")
KEEP_CHECKPOINTS = 2


class UnsafeCheckpointError(UserError):
    """A checkpoint file whose pickle would build or call something outside the weights-only allow-list."""


def safe_numpy_globals() -> list[Any]:
    """What ``torch.load(weights_only=True)`` may rebuild beyond its defaults: numpy arrays (``_reconstruct``,
    ``ndarray``, ``dtype`` and the numeric and bool dtype classes) and numpy scalars, which the project's
    predictor and RNG states hold. No callable that runs arbitrary code is in it."""
    import numpy as np

    try:
        from numpy._core import multiarray
    except ImportError:  # numpy < 2
        from numpy.core import multiarray  # type: ignore[no-redef]
    dtypes = {type(np.dtype(code)) for code in "?bhilqpBHILQPefdgFDG"}
    return [multiarray._reconstruct, multiarray.scalar, np.ndarray, np.dtype, *sorted(dtypes, key=str)]


def load_torch_file(path: Path, *, mmap: bool = False) -> Any:
    """``torch.load`` of one checkpoint file on the CPU with ``weights_only=True`` and `safe_numpy_globals`.

    Raises:
        UnsafeCheckpointError: the pickle names a global outside the allow-list (nothing of it is loaded).
        Other exceptions of torch.load for a damaged file (RuntimeError, EOFError, ...).
    """
    import pickle

    import torch

    allowed = safe_numpy_globals()
    with torch.serialization.safe_globals(allowed):
        try:
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
        except (ValueError, RuntimeError, OSError):
            unsafe = []  # not a torch zip archive: torch.load below reports the damage
        if unsafe:
            raise UnsafeCheckpointError(_unsafe_message(path, sorted(unsafe)))
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except pickle.UnpicklingError as exc:  # built dynamically, past the static scan above
            if "weights_only" in str(exc) or "Weights only" in str(exc):
                raise UnsafeCheckpointError(_unsafe_message(path, [])) from None
            raise


def _unsafe_message(path: Path, names: list[str]) -> str:
    what = f" ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})" if names else ""
    return (
        f"{path}: refused: its pickle would build or call objects outside the weights-only allow-list{what}; "
        "trace-rl never runs code from a checkpoint. Delete that checkpoint folder if you did not write it"
    )


def checkpoint_step(ckpt: Path) -> int:
    """N of a ``step_<N>`` folder."""
    return int(ckpt.name.split("_")[1])


def complete_checkpoints(out: str | Path) -> list[Path]:
    """Every complete ``checkpoints/step_<N>`` folder under ``out`` (one with a state.json), oldest first."""
    root = Path(out) / "checkpoints"
    found = [p for p in root.glob("step_*") if p.is_dir() and (p / STATE_FILE).exists()]
    return sorted(found, key=checkpoint_step)


def checkpoint_problem(ckpt: Path) -> str | None:
    """Why a complete checkpoint cannot be loaded (one short phrase naming the file), or None when it can.

    Raises:
        UnsafeCheckpointError: a ``.pt`` file would run code when loaded (never a reason to fall back quietly).
    """
    from safetensors import safe_open

    def state(path: Path) -> None:
        if "step" not in json.loads(path.read_text()):
            raise ValueError("no step")

    def archive(path: Path) -> None:
        load_torch_file(path, mmap=True)

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
        except UnsafeCheckpointError:
            raise
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


def latest_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoints/step_<N> under ``out`` (one with a state.json), or None."""
    ckpts = complete_checkpoints(out)
    return ckpts[-1] if ckpts else None


def save_checkpoint(
    out: Path,
    step: int,
    *,
    cfg: TrainConfig,
    policy: Any,
    optimizer: Any,
    predictor: Any,
    online: Any,
    cursor: Any,
    rng: Any,
    update_rng: Any = None,
    budget_spent: float = 0.0,
    finished: bool = False,
    adaptive: Any = None,
) -> Path:
    """Atomically write checkpoints/step_<step>/ (write to a temporary folder, then rename); keeps the newest
    ``KEEP_CHECKPOINTS``. ``cursor`` is the run's `DataCursor`, ``rng`` its numpy Generator of prompt sampling and
    allocation, ``update_rng`` that of the policy update's minibatch order, ``budget_spent`` the
    rollout-equivalents of the steps done, ``finished`` marks the run's last step (`finished_run`), ``adaptive``
    is `trace_adaptive`'s `AdaptiveState` (None for the other methods)."""
    import torch

    root = out / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    for stale in root.glob(".tmp_step_*"):  # left by a kill during an earlier save
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".tmp_step_{step}_{os.getpid()}"
    tmp.mkdir()
    policy.save(tmp / "policy")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(
        {
            "predictor": predictor.state_dict(),
            "online": online.state_dict(),
            **({"adaptive": adaptive.state_dict()} if adaptive is not None else {}),
        },
        tmp / "predictor.pt",
    )
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
    state = {
        "step": step,
        "cursor": {"epoch": cursor.epoch, "index": cursor.index},
        "numpy_rng": rng.bit_generator.state,
        **({"update_rng": update_rng.bit_generator.state} if update_rng is not None else {}),
        "config": cfg.to_dict(),
        "budget_spent": budget_spent,
        "finished": finished,
    }
    (tmp / "state.json").write_text(json.dumps(state, default=json_default))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in sorted(root.glob("step_*"), key=lambda p: int(p.name.split("_")[1]))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(
    ckpt: Path,
    out: Path,
    *,
    optimizer: Any,
    predictor: Any,
    online: Any,
    cursor: Any,
    rng: Any,
    update_rng: Any = None,
    adaptive: Any = None,
) -> dict[str, Any]:
    """Restore a `save_checkpoint` folder into the run's parts (the policy is loaded from ckpt/policy by the
    caller) and drop the records of later steps from out/metrics.jsonl (they are redone). Returns the
    checkpoint's state.json (``step``, ``budget_spent``, ``finished``, ...).

    Raises:
        ValueError: ``adaptive`` is given (a trace_adaptive run) and the checkpoint holds no state for it."""
    import torch

    state: dict[str, Any] = json.loads((ckpt / "state.json").read_text())
    # every file is read (weights only) before any part changes: a refused file leaves the run untouched
    optim_state, pred, rng_state = (load_torch_file(ckpt / name) for name in TORCH_FILES)
    optimizer.load_state_dict(optim_state)
    predictor.load_state_dict(pred["predictor"])
    online.load_state_dict(pred["online"])
    if adaptive is not None:
        if "adaptive" not in pred:
            raise ValueError(
                f"{ckpt} holds no trace_adaptive state: it was not written by a trace_adaptive run"
            )
        adaptive.load_state_dict(pred["adaptive"])
    torch.set_rng_state(rng_state["torch"])
    random.setstate(rng_state["python"])
    rng.bit_generator.state = state["numpy_rng"]
    if update_rng is not None and "update_rng" in state:  # checkpoints from before issue 22 kept one stream
        update_rng.bit_generator.state = state["update_rng"]
    cursor.epoch, cursor.index = state["cursor"]["epoch"], state["cursor"]["index"]
    # every step after the checkpoint is redone, so its log lines go
    path = out / "metrics.jsonl"
    kept = [r for r in read_metrics(path) if int(r.get("step", 0)) <= state["step"]]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, path)
    return state


def _skip_warning(skipped: list[tuple[Path, str]], then: str) -> str:
    noun = "checkpoint" if len(skipped) == 1 else "checkpoints"
    names = ", ".join(p.name for p, _ in skipped)
    return f"warning: {noun} {names} cannot be read ({skipped[0][1]}); {then}"


__all__ = [
    "KEEP_CHECKPOINTS",
    "UnsafeCheckpointError",
    "checkpoint_problem",
    "checkpoint_step",
    "complete_checkpoints",
    "completed_step",
    "finished_run",
    "latest_checkpoint",
    "load_checkpoint",
    "load_torch_file",
    "resumable_checkpoint",
    "safe_numpy_globals",
    "save_checkpoint",
]
