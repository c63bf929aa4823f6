"""Issue 39: every rollout charged, provenance kept, the comparison machinery's holes closed (no training here)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from trace_rl.metrics import curves as C
from trace_rl.metrics.intervals import mean_ci, stratified_bootstrap_ci
from trace_rl.train.compare_shared import parse_variant
from trace_rl.train.config import ConfigError, load_config
from trace_rl.train.data import DataCursor
from trace_rl.train.provenance import (
    PROVENANCE_KEY,
    config_dict,
    config_differences,
    folder_hash,
    provenance_of,
    warm_start_config,
)
from trace_rl.train.rundir import check_same_config, log_finished

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


# ------------------------------------------------------------------------------------------- variant guard
@pytest.mark.parametrize(
    "override",
    [
        "policy={name: tiny}",
        "env={eval_tasks: 8}",
        "budget={roots: 4}",
        "env.eval_temperature=0.7",
        "env.eval_samples=4",
        "env.max_turns=6",
        "eval_every=1",
        "sampling.temperature=0.5",
        "sampling.max_new_tokens=8",
        "sampling={temperature: 0.5}",
        "steps=3",
        "total_budget=64",
        "policy.sft_steps=3",
    ],
)
def test_variants_cannot_change_what_a_comparison_shares(override: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_variant(f"x=trace@{override}")
    assert "\n" not in str(err.value) and (
        "cannot differ" in str(err.value) or "whole section" in str(err.value)
    )


def test_method_specific_variant_overrides_pass() -> None:
    assert parse_variant("dapo4=dapo@budget.max_num_gen_batches=4") == (
        "dapo4",
        "dapo",
        ("budget.max_num_gen_batches=4",),
    )


# ------------------------------------------------------------------------------------------ data cursor
@pytest.mark.parametrize(("n", "k"), [(10, 4), (7, 7), (9, 5), (3, 2)])
def test_a_pool_never_holds_a_task_twice_across_epochs(n: int, k: int) -> None:
    cursor = DataCursor(n, seed=3)
    again = DataCursor(n, seed=3)
    for _ in range(40):
        pool = cursor.take(k)
        assert len(set(pool)) == k and all(0 <= i < n for i in pool)
        assert again.take(k) == pool  # deterministic
    with pytest.raises(ValueError, match="distinct tasks"):
        DataCursor(3, seed=0).take(4)


def test_cursor_without_a_boundary_keeps_its_old_order() -> None:
    # pools that divide the epoch never cross a boundary inside a take: the order is the epoch permutations'
    cursor = DataCursor(8, seed=1)
    drawn = [i for _ in range(4) for i in cursor.take(4)]
    expected = [int(i) for e in (0, 1) for i in np.random.default_rng([1, e]).permutation(8)]
    assert drawn == expected


def test_a_pool_with_a_task_twice_is_refused_by_the_step() -> None:
    from trace_rl.envs import load_tasks
    from trace_rl.train.step import _prompt_rngs

    tasks = load_tasks("math_python", "train", 3, 0)
    with pytest.raises(ValueError, match="more than once"):
        _prompt_rngs([tasks[0], tasks[1], tasks[0]], np.random.default_rng(0))


# --------------------------------------------------------------------------------------- config equality
def test_resuming_with_other_threads_is_the_same_run(tmp_path: Path) -> None:
    cfg = load_config(preset="smoke")
    (tmp_path / "config.json").write_text(
        json.dumps({**cfg.to_dict(), PROVENANCE_KEY: {"code_commit": "abc", "warm_start_hash": None}})
    )
    check_same_config(replace(cfg, threads=1), tmp_path)  # a compare resumed with another --jobs
    with pytest.raises(ValueError, match="different config"):
        check_same_config(replace(cfg, steps=cfg.steps + 1), tmp_path)


def test_provenance_of_an_old_config_is_unknown() -> None:
    cfg = load_config(preset="smoke").to_dict()
    assert provenance_of(cfg) == dict.fromkeys(
        ("code_commit", "code_dirty", "warm_start_hash", "warm_start", "probe_charge", "resolved")
    )
    assert config_dict({**cfg, PROVENANCE_KEY: {}}) == cfg


def test_folder_hash_names_the_content_not_the_manifest(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "w.bin").write_bytes(b"\x00\x01")
        (folder / "config.json").write_text("{}")
    (b / "warm_start.json").write_text('{"anything": 1}')
    assert folder_hash(a) == folder_hash(b)
    (b / "sub" / "w.bin").write_bytes(b"\x00\x02")
    assert folder_hash(a) != folder_hash(b)


# ------------------------------------------------------------------------------------------ the charge
def records(
    evals: dict[int, float], steps: int, cost: float = 16.0, charge: dict | None = None
) -> list[dict]:
    out: list[dict] = []
    if charge is not None:
        out.append({"kind": "predictor_warm_start", "step": 0, **charge})
    out.append({"kind": "eval", "step": 0, "eval_accuracy": evals.get(0, 0.1)})
    for step in range(1, steps + 1):
        out.append(
            {
                "kind": "train",
                "step": step,
                "budget_spent": cost,
                "rollouts_generated": cost,
                "tokens_generated": 100,
                "tool_calls": 1,
                "budget_spent_total": (charge or {}).get("charged_budget", 0.0) + cost * step,
                **dict.fromkeys(("effective_ratio", "success_rate", "skip_rate", "active_prompts"), 0.5),
                **dict.fromkeys(("replays", "wall_s"), 1.0),
            }
        )
        if step in evals:
            out.append({"kind": "eval", "step": step, "eval_accuracy": evals[step]})
    return out


CHARGE = {
    "charged": True,
    "charged_rollouts": 32,
    "charged_budget": 32.0,
    "charged_tokens": 500,
    "charged_tool_calls": 3,
}


def test_a_charged_run_starts_its_curve_at_the_probe() -> None:
    charged = C.learning_curve(records({1: 0.3, 2: 0.5}, 2, charge=CHARGE))
    assert charged.rollouts.tolist() == [32.0, 48.0, 64.0]
    assert charged.rollout_equivalents.tolist() == [32.0, 48.0, 64.0]
    assert charged.tokens.tolist() == [500.0, 600.0, 700.0] and charged.probe_rollouts == 32
    cost = C.run_cost(records({1: 0.3}, 2, charge=CHARGE))
    assert cost["probe_rollouts_generated"] == 32 and cost["probe_budget_spent"] == 32
    assert cost["budget_spent_total"] == 32  # the RL steps only
    # a method that does not read the probe logs zeros; a log from before the charge has no fields: both at 0
    free = {**CHARGE, "charged": False, "charged_rollouts": 0, "charged_budget": 0.0}
    free.update(charged_tokens=0, charged_tool_calls=0)
    for recs in (records({1: 0.3}, 1, charge=free), records({1: 0.3}, 1, charge={"examples": 4})):
        assert C.learning_curve(recs).rollouts.tolist() == [0.0, 16.0]
    # tokens unknown (a probe file from before they were recorded): that axis is unknown, the others are not
    unknown = C.learning_curve(records({1: 0.3}, 1, charge={**CHARGE, "charged_tokens": None}))
    assert np.isnan(unknown.tokens).all() and unknown.rollouts.tolist() == [32.0, 48.0]


def test_reach_against_the_baselines_own_crossing_and_the_matched_final() -> None:
    # baseline: 0.1 at 0, 0.4 at 16, 0.4 at 32, 0.4 at 48 -> final 0.4, first crossed at 16 (a third of its run)
    base = C.learning_curve(records({1: 0.4, 2: 0.4, 3: 0.4}, 3))
    # method: charged 16, reaches 0.4 at 32
    method = C.learning_curve(
        records({1: 0.4, 2: 0.5}, 2, charge={**CHARGE, "charged_budget": 16.0, "charged_rollouts": 16})
    )
    # short: stops at 32 (a dapo that could not pay its last draw)
    short = C.learning_curve(records({1: 0.2, 2: 0.6}, 2))
    curves = {"grpo": [base], "trace": [method], "dapo": [short]}
    rows = C.curve_summaries(curves, "grpo", "rollouts")
    reach, share = "rollouts_to_baseline_final", "rollouts_to_baseline_final_share"
    cross, cross_share = C.crossing_keys("rollouts")
    assert rows["trace"][0][reach] == pytest.approx(32.0)
    assert rows["trace"][0][share] == pytest.approx(32 / 48)  # against the baseline's whole run
    assert rows["trace"][0][cross] == pytest.approx(16.0)
    assert rows["trace"][0][cross_share] == pytest.approx(2.0)  # against the baseline's own crossing
    assert rows["grpo"][0][cross_share] == pytest.approx(1.0)
    matched = C.matched_finals(curves, "grpo")
    assert matched["grpo"][0] == {
        "final_accuracy_at_baseline_spend": pytest.approx(0.4),
        "final_spend_matched": 1.0,
    }
    # the baseline's final sits at 32 and 48: trace (16..48) is read there, dapo (0..32) is flagged
    assert matched["trace"][0]["final_accuracy_at_baseline_spend"] == pytest.approx((0.4 + 0.5) / 2)
    assert math.isnan(matched["dapo"][0]["final_accuracy_at_baseline_spend"])
    assert matched["dapo"][0]["final_spend_matched"] == 0.0
    doc = C.curves_document(curves, "grpo")
    assert doc["methods"]["trace"]["seeds"][0]["rollouts"][0] == 16.0
    assert doc["methods"]["trace"]["seeds"][0]["probe_rollouts"] == 16.0
    assert doc["methods"]["dapo"]["summary"][0]["final_spend_matched"] == 0.0


def test_log_finished_follows_the_loops_stop_rule() -> None:
    cfg = load_config(preset="smoke", overrides=["steps=4", "eval_every=2"]).to_dict()
    assert log_finished(records({2: 0.2, 4: 0.3}, 4), cfg) is True
    assert log_finished(records({2: 0.2}, 3), cfg) is False  # killed after step 3
    assert log_finished(records({2: 0.2}, 4), cfg) is False  # killed before the last evaluation
    budget = {**cfg, "total_budget": 48.0}  # 16 per step: a run charged 32 stops after one step
    assert log_finished(records({1: 0.2}, 1, charge=CHARGE), budget) is True
    assert log_finished(records({1: 0.2}, 1), budget) is False
    assert log_finished(records({1: 0.2}, 1), {"steps": 1}) is None  # not enough config: unknown


# ------------------------------------------------------------------------------------------- intervals
def test_stratified_bootstrap() -> None:
    diffs = [0.01, 0.05, -0.02, 0.04, 0.03, 0.02]
    boot = stratified_bootstrap_ci(diffs)
    assert boot.mean == pytest.approx(np.mean(diffs)) and boot.low < boot.mean < boot.high
    assert stratified_bootstrap_ci(diffs) == boot  # seeded
    assert mean_ci(diffs).low <= boot.low  # t widens for few seeds; the bootstrap does not
    # constant within each stratum: every replicate keeps each stratum's count, so the mean never moves
    flat = stratified_bootstrap_ci([0.0, 0.0, 1.0, 1.0, 1.0], strata=["a", "a", "b", "b", "b"])
    assert flat.low == flat.high == pytest.approx(0.6)
    assert stratified_bootstrap_ci([0.0, 0.0, 1.0, 1.0, 1.0]).low < 0.6  # unstratified: it does
    with pytest.raises(ValueError):
        stratified_bootstrap_ci([])
    with pytest.raises(ValueError):
        stratified_bootstrap_ci([1.0, 2.0], strata=[0])


# -------------------------------------------------------------------------------------------- paired_runs
def write_run(root: Path, label: str, seed: int, recs: list[dict], config: dict | None) -> None:
    folder = root / label / f"seed_{seed}"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))


def paired(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "paired_runs.py"), *args], capture_output=True, text=True, timeout=300
    )


def test_paired_runs_refuses_unfinished_runs_and_mixed_warm_starts(tmp_path: Path) -> None:
    cfg = load_config(preset="smoke", overrides=["steps=4", "eval_every=2", "total_budget=64"]).to_dict()

    def config(method: str, start: str) -> dict:
        return {**cfg, "method": method, PROVENANCE_KEY: {"code_commit": "abc", "warm_start_hash": start}}

    evals = {2: 0.3, 4: 0.4}
    for seed in (0, 1, 2):
        write_run(tmp_path, "grpo", seed, records(evals, 4), config("grpo", f"sha256:{seed}"))
        write_run(
            tmp_path,
            "trace",
            seed,
            records({1: 0.3, 2: 0.5}, 2, charge=CHARGE),
            config("trace", f"sha256:{seed}"),
        )
    args = (str(tmp_path), "--baseline", "grpo", "--methods", "trace", "--seeds", "0,1,2")
    ok = paired(*args)
    assert ok.returncode == 0, ok.stderr
    assert "trace - grpo final_matched:" in ok.stdout and " boot [" in ok.stdout
    rows = {tuple(x.split()[:2]): x.split() for x in ok.stdout.splitlines()[1:7]}
    header = ok.stdout.splitlines()[0].split()
    assert (
        rows["trace", "0"][header.index("probe")] == "32" and rows["grpo", "0"][header.index("probe")] == "0"
    )

    # an unfinished run: refused in one line naming it, unless --allow-partial
    run = tmp_path / "trace" / "seed_1" / "metrics.jsonl"
    full = run.read_text()
    run.write_text("".join(full.splitlines(keepends=True)[:-2]))  # killed after step 1
    refused = paired(*args)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        refused.stderr.strip().splitlines()[0]
    ]
    assert "unfinished runs: trace/seed_1" in refused.stderr
    partial = paired(*args, "--allow-partial")
    assert (
        partial.returncode == 0
        and "unfinished runs included (--allow-partial): trace/seed_1" in partial.stderr
    )
    run.write_text(full)

    # two runs of one seed from different warm starts
    other = tmp_path / "trace" / "seed_0" / "config.json"
    other.write_text(json.dumps(config("trace", "sha256:elsewhere")))
    mixed = paired(*args)
    assert mixed.returncode == 2 and len(mixed.stderr.strip().splitlines()) == 1
    assert (
        "seed 0 started from different warm starts: grpo/seed_0" in mixed.stderr
        and "trace/seed_0" in mixed.stderr
    )

    # different held-out evaluation across labels
    other.write_text(json.dumps({**config("trace", "sha256:0"), "eval_every": 1}))
    differs = paired(*args)
    assert differs.returncode == 2 and "eval_every" in differs.stderr

    # old runs (no provenance block): unknown, said so, not refused
    for seed in (0, 1, 2):
        for label in ("grpo", "trace"):
            path = tmp_path / label / f"seed_{seed}" / "config.json"
            path.write_text(json.dumps({**cfg, "method": label}))
    old = paired(*args)
    assert old.returncode == 0 and "provenance unknown" in old.stderr

    # a damaged config.json is refused, not read as "unknown" (which would skip the unfinished-run check)
    (tmp_path / "grpo" / "seed_1" / "config.json").write_text("{trunc")
    damaged = paired(*args)
    assert damaged.returncode == 2 and len(damaged.stderr.strip().splitlines()) == 1
    assert "unreadable" in damaged.stderr and "grpo/seed_1/config.json" in damaged.stderr


def test_compare_pairs_get_a_bootstrap_interval_from_three_seeds() -> None:
    from trace_rl.train.compare import paired_differences

    def per_method(values: list[float]) -> dict:
        return {"runs": [{"final_accuracy": v} for v in values]}

    three = {"grpo": per_method([0.3, 0.4, 0.5]), "trace": per_method([0.35, 0.42, 0.56])}
    row = paired_differences(three, ["grpo", "trace"], 3, baseline="grpo")["trace-grpo"]["final_accuracy"]
    assert row["ci_low"] <= row["boot_low"] <= row["mean"] <= row["boot_high"] <= row["ci_high"]
    one = {"grpo": per_method([0.3]), "trace": per_method([0.35])}
    row = paired_differences(one, ["grpo", "trace"], 1, baseline="grpo")["trace-grpo"]["final_accuracy"]
    assert "boot_low" not in row and row["mean"] == pytest.approx(0.05)


def test_a_later_warm_start_key_at_its_earlier_value_keeps_old_manifests_matching() -> None:
    cfg = load_config(preset="multistep")
    recorded = warm_start_config(cfg)  # what a manifest written before policy.sft_dtype existed holds
    assert "policy.sft_dtype" not in recorded
    assert config_differences(recorded, warm_start_config(cfg)) == []
    bf16 = load_config(preset="multistep", overrides=["policy.sft_dtype=bfloat16"])
    assert config_differences(recorded, warm_start_config(bf16)) == [
        "policy.sft_dtype: 'float32' -> 'bfloat16'"
    ]
    assert config_differences(warm_start_config(bf16), recorded) == [
        "policy.sft_dtype: 'bfloat16' -> 'float32'"
    ]
    with pytest.raises(ConfigError, match=r"policy\.sft_dtype"):
        load_config(preset="multistep", overrides=["policy.sft_dtype=float16"])
    # how the loss is computed is not recorded: a compiled warm start matches an eager one's manifest
    compiled = load_config(preset="multistep", overrides=["policy.sft_compile=true"])
    assert compiled.policy.sft_compile and "policy.sft_compile" not in warm_start_config(compiled)
    assert config_differences(recorded, warm_start_config(compiled)) == []
    with pytest.raises(ConfigError, match=r"policy\.sft_compile"):  # no warm start: nothing to compile
        load_config(preset="multistep", overrides=["policy.sft_compile=true", "policy.sft_steps=0"])
    # the RL-pool probe's sampling: left out at temperature 1 / top-p 1 (every earlier probe), recorded otherwise
    assert "sampling.temperature" not in recorded and "sampling.top_p" not in recorded
    hot = load_config(preset="multistep", overrides=["sampling.temperature=1.5"])
    assert config_differences(recorded, warm_start_config(hot)) == ["sampling.temperature: 1.0 -> 1.5"]
