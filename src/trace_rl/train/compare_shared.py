"""What the runs of one comparison share, guarded at both ends (`trace_rl.train.compare`): one warm start per
comparison, built once and reused only when its manifest matches (`warm_start_once`, `check_warm_start`,
`check_same_start`); the keys no variant may change (`DATA_KEYS`, `EVAL_KEYS`, `parse_variant`), checked again in
the runs' config.json provenance after they ran (`shared_differences`, `check_provenance`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from trace_rl.errors import UserError
from trace_rl.train.config import ConfigError, TrainConfig, validate
from trace_rl.train.provenance import (
    PROVENANCE_KEY,
    config_differences,
    policy_start_hash,
    provenance_of,
    read_manifest,
    warm_start_config,
    write_manifest,
)
from trace_rl.train.run import Trainer
from trace_rl.train.warm_start import PROBE_FILE

Run = tuple[str, int, TrainConfig, Path]
"""One run of a comparison: (label, seed, its config, its folder ROOT/<label>/seed_<seed>)."""


def warm_start_once(cfg: TrainConfig, out: Path, log: Callable[[str], None] = print) -> TrainConfig:
    """Run the config's warm start once into out/warm_start/ and return a config starting from it.

    The warm start is built in ``out/warm_start.tmp/`` (a leftover one from a killed compare is deleted first)
    and moved to ``out/warm_start/`` only once its policy, probe outcomes and manifest are written
    (`trace_rl.train.warm_start.warm_start_policy`), so a compare killed during the warm start leaves nothing
    that a rerun would reuse. An existing ``out/warm_start/`` is reused only when `check_warm_start` accepts it.

    Raises:
        ValueError: the existing warm start is incomplete or was made with another config (`check_warm_start`).
    """
    if cfg.policy.sft_steps == 0:
        return cfg
    folder = out / "warm_start"
    policy_dir = folder / "sft" / "policy"
    if folder.exists():
        check_warm_start(cfg, folder, log)
    else:
        tmp = out / "warm_start.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        trainer = Trainer(replace(cfg, steps=1), tmp, log=log)
        trainer.prepare_policy_only()
        os.replace(tmp, folder)
    # the runs load the finished warm start: no SFT step of theirs is left to compile
    policy = replace(cfg.policy, name=str(policy_dir.resolve()), sft_steps=0, sft_compile=False)
    new = replace(cfg, policy=policy)
    validate(new)
    return new


def check_warm_start(cfg: TrainConfig, folder: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Accept ``folder`` (a comparison's warm_start/) for reuse by ``cfg``, or raise; returns its manifest.

    Accepted: ``sft/policy`` holds a manifest (``warm_start.json``) whose recorded config equals
    `trace_rl.train.provenance.warm_start_config` of ``cfg``, and the probe outcomes it says it has. A warm start
    made before manifests existed (a policy with its probe outcomes, e.g. one kept in results/ and copied back)
    is adopted: its manifest is written with ``cfg``'s config, which cannot be checked (said in the log).

    Raises:
        ValueError: no policy, no probe outcomes (a warm start killed during its probe), or a recorded config
            that differs from ``cfg``'s (the first differences named).
    """
    policy_dir = folder / "sft" / "policy"
    if not policy_dir.is_dir():
        raise UserError(
            f"{folder} holds no warm-start policy (sft/policy): a warm start that did not finish; delete {folder} "
            "to build it again"
        )
    manifest = read_manifest(policy_dir)
    if manifest is None:
        if not (policy_dir / PROBE_FILE).exists():
            raise UserError(
                f"{folder} holds a warm-start policy without its probe outcomes ({PROBE_FILE}): a warm start killed "
                f"before its probe finished; delete {folder} to build it again"
            )
        log(
            f"warm start {folder}: no manifest (made before warm starts recorded their config); adopting it as "
            "this comparison's, unchecked"
        )
        return write_manifest(policy_dir, cfg, probe=True, adopted=True)
    if manifest.get("probe") and not (policy_dir / PROBE_FILE).exists():
        raise UserError(
            f"{folder}: its probe outcomes ({PROBE_FILE}) are missing; delete {folder} to rebuild it"
        )
    diffs = config_differences(manifest.get("config") or {}, warm_start_config(cfg))
    if diffs:
        raise UserError(
            f"{folder} was made with another config ({'; '.join(diffs[:3])}"
            f"{'; ...' if len(diffs) > 3 else ''}); use another --out or delete {folder}"
        )
    return manifest


DATA_KEYS = ("env.name", "env.data_seed", "env.train_limit", "env.eval_tasks", "env.task_kwargs")
"""Config keys that choose the task data (trace_rl.train.hygiene.run_tasks); one comparison has one of each."""

EVAL_KEYS = (
    "env.eval_temperature",
    "env.eval_samples",
    "env.max_turns",
    "eval_every",
    "sampling.max_new_tokens",
    "sampling.temperature",
    "sampling.top_p",
    "sampling.max_concurrency",
    "steps",
    "total_budget",
)
"""Config keys that decide how runs are measured or how much they may spend (the held-out evaluation, the
episodes, the budget); one comparison has one of each, so a variant may not set them."""

SECTIONS = ("env", "policy", "sampling", "budget", "optim", "predictor", "backend")
"""The config's sections: a variant names a section's keys (``budget.roots=16``), never the whole section."""

SHARED_KEYS = (*DATA_KEYS, *EVAL_KEYS)
"""What the runs of one comparison share besides the warm start; `shared_differences` compares them."""


def shared_differences(configs: dict[str, dict[str, Any]]) -> list[str]:
    """``key: label=value, label=value`` for every `SHARED_KEYS` key whose value differs between the saved configs
    (config.json dicts by label; configs that lack a key count as unknown and are left out of that key)."""
    out = []
    for key in SHARED_KEYS:
        values: dict[str, Any] = {}
        for label, data in configs.items():
            node: Any = data
            for part in key.split("."):
                node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
            if node is not _MISSING:
                values[label] = node
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            out.append(f"{key}: " + ", ".join(f"{label}={v!r}" for label, v in values.items()))
    return out


_MISSING = object()


def parse_variant(entry: str) -> tuple[str, str, tuple[str, ...]]:
    """One entry of ``--methods``: ``METHOD`` or ``LABEL=METHOD@KEY=VALUE;KEY=VALUE`` (a method under its own
    label with config overrides, e.g. ``trace_32x6=trace@budget.roots=32;budget.continuations=6`` for the paper's
    budget-shape question at equal cost). Returns (label, method, overrides); the label names the run folders
    and the rows of comparison.json.

    Raises:
        ConfigError: an empty label or method, or an override of ``policy.*`` (all runs of a comparison start
            from one warm start), of the task data (`DATA_KEYS`: all runs share the held-out tasks and the RL
            pool the warm start was kept apart from), of what measures the runs or bounds their spend
            (`EVAL_KEYS`: the evaluation, the episodes, ``steps``, ``total_budget``), of a whole section
            (``env={...}``) or ``method``/``seed``.
    """
    label, method = entry.strip(), entry.strip()
    overrides: tuple[str, ...] = ()
    if "=" in entry.split("@", 1)[0]:
        label, rest = (x.strip() for x in entry.split("=", 1))
        method, _, tail = rest.partition("@")
        method = method.strip()
        overrides = tuple(o.strip() for o in tail.split(";") if o.strip())
    if not label or not method or "/" in label:
        raise ConfigError(f"--methods entry {entry!r}: expected METHOD or LABEL=METHOD@KEY=VALUE;KEY=VALUE")
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key in SECTIONS:
            raise ConfigError(
                f"--methods entry {entry!r}: {key}={{...}} replaces the whole section; name its keys "
                f"({key}.KEY=VALUE), and only those a variant may change"
            )
        shared = key == "sampling" or key.startswith(("policy.", "sampling.", *DATA_KEYS))
        if shared or key in (*EVAL_KEYS, "method", "seed"):
            raise ConfigError(
                f"--methods entry {entry!r}: {key} cannot differ between the runs of one comparison"
            )
    return label, method, overrides


def check_same_start(cfg: TrainConfig, run_dir: Path) -> None:
    """Raise ValueError when the run in ``run_dir`` recorded a warm start (its config.json provenance) other than
    the one ``cfg`` starts from now (the comparison's warm start rebuilt under the same path). A run that
    recorded none (made before provenance) is not checked."""
    path = run_dir / "config.json"
    if not path.exists():
        return
    recorded = provenance_of(json.loads(path.read_text()))["warm_start_hash"]
    current = policy_start_hash(cfg, run_dir)
    if recorded is not None and current is not None and recorded != current:
        raise UserError(
            f"{run_dir} started from another warm start ({recorded[:19]}) than {cfg.policy.name} "
            f"({current[:19]}); delete that run or use another --out"
        )


def check_provenance(plan: Sequence[Run], base: TrainConfig) -> dict[str, Any]:
    """Check that the runs of a comparison share what they must: per seed one warm start (each run's
    config.json ``warm_start_hash``), and across labels the `SHARED_KEYS`; returns what the comparison records
    of them (``warm_start_hash``, the runs without provenance).

    Raises:
        ValueError: two runs of one seed from different warm starts, or shared keys that differ (both named).
    """
    configs: dict[tuple[str, int], dict[str, Any]] = {}
    for label, seed, _, run_dir in plan:
        path = run_dir / "config.json"
        configs[label, seed] = json.loads(path.read_text()) if path.exists() else {}
    hashes = {key: provenance_of(data)["warm_start_hash"] for key, data in configs.items()}
    for seed in sorted({s for _, s in configs}):
        starts = {label: h for (label, s), h in hashes.items() if s == seed and h is not None}
        if len(set(starts.values())) > 1:
            raise UserError(
                f"runs of seed {seed} started from different warm starts: "
                + ", ".join(f"{label} ({h[:19]})" for label, h in starts.items())
            )
    diffs = shared_differences({f"{label}/seed_{seed}": data for (label, seed), data in configs.items()})
    if diffs:
        raise UserError(f"the runs differ in what a comparison shares: {diffs[0]}")
    return {
        "warm_start_hashes": sorted({h for h in hashes.values() if h is not None}),
        "runs_without_provenance": sorted(
            f"{label}/seed_{seed}" for (label, seed), data in configs.items() if PROVENANCE_KEY not in data
        ),
    }
