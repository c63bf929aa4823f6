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
