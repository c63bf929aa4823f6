"""Issue 39 end to end on the smoke preset with a two-step warm start: the probe's charge, provenance, the atomic
warm start, and a comparison with a method-specific variant (tiny untrained policy, math_python, CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trace_rl.train.config import load_config

CLI = [sys.executable, "-m", "trace_rl.cli.main"]
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
# a warm start of two SFT steps whose RL-pool probe is 4 prompts x 8 samples = 32 rollouts (two smoke steps of 16)
WARM = (
    *("policy.sft_steps=2", "policy.sft_evals=1", "policy.sft_probe_prompts=4", "policy.sft_batch=4"),
    *("policy.require_jump=false", "threads=1"),
)
PROBE = 32


def sets(*overrides: str) -> list[str]:
    return [x for o in overrides for x in ("--set", o)]


def log(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]


def test_warm_start_is_atomic_checked_and_never_reused_half_made(tmp_path: Path, monkeypatch) -> None:
    import trace_rl.rollout.evaluate as evaluate
    from trace_rl.train.compare_shared import warm_start_once
    from trace_rl.train.provenance import MANIFEST, folder_hash, read_manifest
    from trace_rl.train.warm_start import PROBE_FILE

    cfg = load_config(preset="smoke", overrides=list(WARM))
    root = tmp_path / "cmp"
    root.mkdir()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the compare killed while the RL-pool probe samples

    with monkeypatch.context() as m:
        m.setattr(evaluate, "sample_episodes", killed)
        with pytest.raises(KeyboardInterrupt):
            warm_start_once(cfg, root, log=lambda _: None)
    assert not (root / "warm_start").exists()  # only warm_start.tmp/ is left: nothing a rerun would reuse

    lines: list[str] = []
    new = warm_start_once(cfg, root, log=lines.append)
    policy = root / "warm_start" / "sft" / "policy"
    assert not (root / "warm_start.tmp").exists() and Path(new.policy.name) == policy.resolve()
    manifest = read_manifest(policy)
    assert manifest is not None and manifest["probe"] and (policy / PROBE_FILE).exists()
    assert manifest["content_hash"] == folder_hash(policy) and manifest["config"]["policy.sft_steps"] == 2
    probe = json.loads((policy / PROBE_FILE).read_text())
    assert sum(len(r) for r in probe["rewards"]) == PROBE and probe["tokens_generated"] > 0
    assert warm_start_once(cfg, root, log=lines.append) == new  # reused as is

    # a reused warm start made with another config is refused, naming the key
    other = load_config(preset="smoke", overrides=[*WARM, "policy.sft_lr=0.001"])
    with pytest.raises(ValueError, match=r"policy\.sft_lr"):
        warm_start_once(other, root)
    # a warm start from before manifests: adopted with its probe (said so), refused without it
    (policy / MANIFEST).unlink()
    adopted: list[str] = []
    assert warm_start_once(cfg, root, log=adopted.append) == new
    assert any("adopting it" in x for x in adopted) and read_manifest(policy)["adopted"]
    (policy / MANIFEST).unlink()
    (policy / PROBE_FILE).unlink()
    with pytest.raises(ValueError, match="killed before its probe finished"):
        warm_start_once(cfg, root)


def test_compare_charges_the_probe_records_provenance_and_runs_a_dapo_variant(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    methods = "grpo,trace,dapo4=dapo@budget.max_num_gen_batches=4"
    common = ("--preset", "smoke", "--seeds", "1", "--steps", "3", *sets(*WARM, "env.pool_size=16"))
    res = subprocess.run(
        [*CLI, "compare", *common, "--methods", methods, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads((out / "comparison.json").read_text())
    assert list(data["methods"]) == ["grpo", "trace", "dapo4"]
    assert data["methods"]["dapo4"]["budget_total"] == 16.0 and data["methods"]["dapo4"]["method"] == "dapo"

    # the probe: charged to trace (reads the predictor), not to grpo or dapo
    budget = {
        label: sum(r["budget_spent"] for r in log(out / label / "seed_0") if r.get("kind") == "train")
        for label in data["methods"]
    }
    assert budget["grpo"] == 48.0 == data["methods"]["trace"]["run_budget_total"]
    assert budget["trace"] + PROBE == budget["grpo"]  # its RL budget plus the probe is the baseline's budget
    assert data["methods"]["trace"]["rl_budget_total"] == 48.0 - PROBE
    assert data["methods"]["trace"]["probe_rollouts_generated"] == PROBE
    assert data["methods"]["grpo"]["probe_rollouts_generated"] == 0
    curves = json.loads((out / "curves.json").read_text())
    assert curves["methods"]["trace"]["seeds"][0]["rollouts"][0] == PROBE  # its cost axis starts at the probe
    assert curves["methods"]["trace"]["seeds"][0]["probe_rollouts"] == PROBE
    assert curves["methods"]["grpo"]["seeds"][0]["rollouts"][0] == 0
    warm = [r for r in log(out / "trace" / "seed_0") if r.get("kind") == "predictor_warm_start"]
    assert warm[0]["charged"] and warm[0]["charged_rollouts"] == PROBE and warm[0]["charged_tokens"] > 0
    assert "probe charge: 32 rollouts" in res.stdout  # one run at a time: the runs log to compare's stdout
    summary = data["methods"]["trace"]["runs"][0]
    assert (
        "rollouts_to_baseline_final_crossing_share" in summary
        and "final_accuracy_at_baseline_spend" in summary
    )
    assert "boot_low" not in data["paired"]["trace-grpo"]["effective_ratio"]  # one seed: no bootstrap

    # provenance: one commit and one warm start for every run, the warm start's own hash
    from trace_rl.train.provenance import read_manifest

    manifest = read_manifest(out / "warm_start" / "sft" / "policy")
    assert manifest is not None
    for label in data["methods"]:
        block = json.loads((out / label / "seed_0" / "config.json").read_text())["provenance"]
        assert block["code_commit"] and block["code_dirty"] in (True, False)
        assert block["warm_start_hash"] == manifest["content_hash"]
        assert (block["probe_charge"] or {}).get("rollouts", 0) == (PROBE if label == "trace" else 0)
    assert data["provenance"]["warm_start_hashes"] == [manifest["content_hash"]]

    # resuming the comparison with another --jobs reads the finished runs back (threads is not the config)
    again = subprocess.run(
        [*CLI, "compare", *common, "--methods", methods, "--jobs", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert again.returncode == 0, again.stderr[-3000:]

    # scripts/paired_runs.py on the folder; then a run whose warm start differs is refused, naming it
    args = (str(out), "--baseline", "grpo", "--methods", "trace,dapo4", "--seeds", "0")
    table = subprocess.run(
        [sys.executable, str(SCRIPTS / "paired_runs.py"), *args], capture_output=True, text=True
    )
    assert table.returncode == 0, table.stderr[-2000:]
    path = out / "dapo4" / "seed_0" / "config.json"
    config = json.loads(path.read_text())
    config["provenance"]["warm_start_hash"] = "sha256:0000"
    path.write_text(json.dumps(config))
    mixed = subprocess.run(
        [sys.executable, str(SCRIPTS / "paired_runs.py"), *args], capture_output=True, text=True
    )
    assert mixed.returncode == 2 and len(mixed.stderr.strip().splitlines()) == 1
    assert "different warm starts" in mixed.stderr and "dapo4/seed_0" in mixed.stderr


@pytest.mark.parametrize(
    "variant",
    ["x=trace@policy={name: tiny}", "x=trace@env={eval_tasks: 8}", "x=trace@env.eval_temperature=0.5"],
)
def test_variants_changing_shared_parts_are_refused_before_the_warm_start(
    tmp_path: Path, variant: str
) -> None:
    out = tmp_path / "cmp"
    res = subprocess.run(
        [
            *CLI,
            "compare",
            "--preset",
            "smoke",
            *sets(*WARM),
            "--methods",
            f"grpo,{variant}",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr and not (out / "warm_start").exists()
