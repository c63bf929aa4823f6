"""Where a run came from: the code it ran (git commit, dirty tree) and the warm start it started from.

Every run's config.json carries a ``provenance`` block (`run_provenance`, plus ``resolved``: `resolved_block`)::

    {"code_commit": "1d161c0...", "code_dirty": false, "warm_start_hash": "sha256:ab12...", "warm_start": PATH}

``warm_start_hash`` is the content hash of the warm-started policy folder (`folder_hash`: every file's relative
path and bytes, the manifest left out), recorded once in that folder's manifest (``warm_start.json``, written by
`trace_rl.train.warm_start.warm_start_policy`) together with the config keys that made it (`warm_start_config`).
A policy without a warm start (``policy.sft_steps`` 0 and a named model) has ``warm_start_hash`` None. Logs made
before provenance was recorded have no block: readers treat every field as unknown (None).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from trace_rl.train.config import TrainConfig

MANIFEST = "warm_start.json"
"""The warm start's manifest, next to the policy it describes: its content hash and the config that made it."""

PROVENANCE_KEY = "provenance"
"""The key of the provenance block in a run's config.json (not a config key: `config_dict` strips it)."""


@functools.lru_cache(maxsize=1)
def code_version() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout this package is imported from: ``git rev-parse HEAD`` and whether
    ``git status --porcelain --untracked-files=no`` lists a change. (None, None) outside a git checkout (an
    installed wheel) or without git."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30
        )
        if commit.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return commit.stdout.strip() or None, dirty


def folder_hash(folder: str | Path) -> str:
    """``sha256:<hex>`` over the files below ``folder`` in sorted relative-path order (each path, its size and
    its bytes), the manifest (`MANIFEST`) left out, so the hash names the content and not where it lies.

    Raises:
        FileNotFoundError: ``folder`` is not a directory.
    """
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder")
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel == MANIFEST:
            continue
        digest.update(f"{rel}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


NOT_RECORDED = ("sft_compile",)
"""Policy keys left out of `warm_start_config`: they change how the warm start's loss is computed (rounding,
speed), not what it computes."""
LATER_KEYS = {"policy.sft_dtype": "float32", "sampling.temperature": 1.0, "sampling.top_p": 1.0}
"""Warm-start keys added after manifests were first written, with the value every earlier warm start had: a key
at that value is left out of `warm_start_config`, so the warm starts kept before it still match."""


def warm_start_config(cfg: TrainConfig) -> dict[str, Any]:
    """The config keys a warm start depends on: the whole ``policy`` section (its model and SFT settings), the
    task data (``env.name``, ``data_seed``, ``train_limit``, ``eval_tasks``, ``task_kwargs``: the warm-start
    tasks are kept apart from the held-out set and the RL pool), ``env.max_turns`` and
    ``sampling.max_new_tokens`` (the probes' episodes), ``sampling.temperature`` and ``sampling.top_p`` (the
    RL-pool probe's sampling) and ``seed``. Flat ``section.key`` names; a key of `LATER_KEYS` at its earlier
    value is left out, and so is ``policy.sft_compile`` (how the same loss is computed, like ``threads`` and
    ``optim.packing``)."""
    out: dict[str, Any] = {
        f"policy.{k}": v for k, v in dataclasses.asdict(cfg.policy).items() if k not in NOT_RECORDED
    }
    for key in ("name", "data_seed", "train_limit", "eval_tasks", "task_kwargs", "max_turns"):
        out[f"env.{key}"] = getattr(cfg.env, key)
    out["sampling.max_new_tokens"] = cfg.sampling.max_new_tokens
    out["sampling.temperature"] = cfg.sampling.temperature
    out["sampling.top_p"] = cfg.sampling.top_p
    for key, earlier in LATER_KEYS.items():
        if out.get(key) == earlier:
            del out[key]
    out["seed"] = cfg.seed
    return json.loads(json.dumps(out))  # JSON-normal (tuples as lists), as it reads back from the manifest


def write_manifest(
    policy_dir: Path, cfg: TrainConfig, *, probe: bool, adopted: bool = False
) -> dict[str, Any]:
    """Write ``policy_dir/warm_start.json``: the folder's `folder_hash`, `warm_start_config` of ``cfg``, whether
    it holds the RL-pool probe's outcomes, and the code that made it; returns it. ``adopted``: a warm start made
    before manifests existed, whose config is ``cfg``'s by assumption (it cannot be checked)."""
    commit, dirty = code_version()
    manifest = {
        "content_hash": folder_hash(policy_dir),
        "config": warm_start_config(cfg),
        "probe": probe,
        "code_commit": commit,
        "code_dirty": dirty,
        "adopted": adopted,
    }
    (policy_dir / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return manifest


def read_manifest(policy_dir: str | Path) -> dict[str, Any] | None:
    """The warm start's manifest in ``policy_dir``, or None where there is none (or it does not parse)."""
    path = Path(policy_dir) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def config_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: recorded -> current`` for every key whose value differs between two flat config dicts (a
    `LATER_KEYS` key that one of them leaves out is shown at its earlier value)."""
    keys = sorted(set(recorded) | set(current))
    shown = {k: LATER_KEYS.get(k, "<absent>") for k in keys}
    return [
        f"{k}: {recorded.get(k, shown[k])!r} -> {current.get(k, shown[k])!r}"
        for k in keys
        if recorded.get(k) != current.get(k)
    ]


def policy_start_hash(cfg: TrainConfig, out: Path) -> str | None:
    """The content hash of the warm start a run starts from: its own ``out/sft/policy`` when it ran its warm
    start, else the folder ``policy.name`` names (its manifest's hash, or the folder's hash when it has no
    manifest); None for a named model (no folder)."""
    own = out / "sft" / "policy"
    for folder in (own, Path(cfg.policy.name)):
        if folder.is_dir():
            manifest = read_manifest(folder)
            if manifest is not None and isinstance(manifest.get("content_hash"), str):
                return str(manifest["content_hash"])
            return folder_hash(folder)
    return None


def run_provenance(
    cfg: TrainConfig, out: Path, *, probe_charge: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The provenance block of a run's config.json: code commit and dirty flag (`code_version`), the warm start's
    content hash and folder (`policy_start_hash`), and the probe rollouts charged to this run (None: none)."""
    commit, dirty = code_version()
    own = out / "sft" / "policy"
    start = own if own.is_dir() else Path(cfg.policy.name)
    return {
        "code_commit": commit,
        "code_dirty": dirty,
        "warm_start_hash": policy_start_hash(cfg, out),
        "warm_start": str(start.resolve()) if start.is_dir() else None,
        "probe_charge": probe_charge,
    }


def config_dict(data: dict[str, Any]) -> dict[str, Any]:
    """A saved config.json without its provenance block: what `trace_rl.train.config.config_from_dict` reads."""
    return {k: v for k, v in data.items() if k != PROVENANCE_KEY}


def provenance_of(data: dict[str, Any]) -> dict[str, Any]:
    """The provenance block of a saved config.json; every field None where the run predates it (unknown)."""
    block = data.get(PROVENANCE_KEY)
    block = block if isinstance(block, dict) else {}
    return {
        key: block.get(key)
        for key in ("code_commit", "code_dirty", "warm_start_hash", "warm_start", "probe_charge", "resolved")
    }


def resolved_block(trainer: Any) -> dict[str, Any]:
    """What a run resolved from the config's "auto" and 0-means-default values, for config.json's provenance
    (issue 58: a comparison must say which estimator each method trained with): the policy update's settings
    (``optim.estimator`` "auto" resolved, Dr. GRPO's constant L), the device, torch's threads, the method the
    cold start allocates with, and dapo's draw cap. ``trainer`` is a set-up `trace_rl.train.run.Trainer`."""
    import torch

    from trace_rl.train.prefixes import effective_method
    from trace_rl.train.step import gen_batch_cap

    cfg = trainer.cfg
    items = list(
        dataclasses.asdict(trainer.settings).items()
    )  # the resolved `UpdateSpec`, and as before issue 60
    at = [k for k, _ in items].index("max_grad_norm") + 1  # the sampling temperature after max_grad_norm
    update = dict([*items[:at], ("temperature", cfg.sampling.temperature), *items[at:]])
    return {
        "update": update,
        "device": trainer.device,
        "threads": torch.get_num_threads(),
        "cold_start_method": effective_method(trainer.method, False).name,
        "max_num_gen_batches": gen_batch_cap(cfg.spec, cfg.env.pool_size, trainer.shape.batch_size),
    }
