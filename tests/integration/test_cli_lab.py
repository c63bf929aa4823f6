"""`trace-rl lab` through a subprocess: claims JSON and the error path."""

from __future__ import annotations

import json
import subprocess
import sys

CMD = [sys.executable, "-m", "trace_rl.cli.main", "lab"]


def test_lab_claims_json() -> None:
    out = subprocess.run(
        [*CMD, "claims", "--json", "--seeds", "2", "--steps", "1"], capture_output=True, text=True, check=True
    )
    claims = json.loads(out.stdout)
    ids = [c["id"] for c in claims]
    for expected in (
        "six_prompt",
        "coin_flip_5",
        "squared_movement",
        "error_by_depth",
        "trace_vs_treepo_64x2",
        "trace_vs_treepo_64x6",
        "trace_vs_treepo_128x2",
        "broad_vs_deep",
        "ablation_stacking",
        "trace_vs_flat",
        "noisy_predictor",
    ):
        assert expected in ids
    for c in claims:
        assert set(c) == {"id", "statement", "measured", "expected", "holds"}
        assert isinstance(c["holds"], bool) and isinstance(c["measured"], dict)


def test_lab_claims_rejects_one_seed() -> None:
    out = subprocess.run([*CMD, "claims", "--seeds", "1"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "at least 2" in out.stderr


def test_lab_plot_writes_three_pngs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out_dir = tmp_path / "plots"
    res = subprocess.run(
        [*CMD, "plot", "--out", str(out_dir), "--seeds", "1"], capture_output=True, text=True, check=True
    )
    paths = res.stdout.split()
    assert sorted(p.rsplit("/", 1)[-1] for p in paths) == [
        "allocation_vs_budget.png",
        "effective_ratio_vs_budget.png",
        "replay_depths.png",
    ]
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad = subprocess.run([*CMD, "plot", "--out", str(blocker)], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a directory" in bad.stderr
